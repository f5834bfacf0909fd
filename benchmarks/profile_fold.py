"""One fold each (ours: k normalization + fold; SGLang 0.5.19's) at T=16, B=8, all accepted, on the
Qwen3.5-35B-A3B-like target, for Nsight Compute to profile:

    RSO_SGLANG_KERNELS=DIR ncu --clock-control none -k regex:"fold_kernel" --section SpeedOfLight \\
        --section WarpStateStats --section SchedulerStats --section Occupancy python benchmarks/profile_fold.py

With `--cuda CUBIN`: instead, three whole commits (fold, conv rollback) through the entry point with the CUDA
kernel built into CUBIN (its kernels are named gdn_fold_*; `-s 1 -c 1` profiles the second), the shape
`ncu_regions.py` reads (README there):

    ncu --clock-control none -k regex:gdn_fold -s 1 -c 1 --section WarpStateStats --section SourceCounters \\
        -o prof python benchmarks/profile_fold.py --cuda gdn_fold.cubin
"""

import argparse
import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / "overlay"), str(Path(__file__).resolve().parent.parent)]

from benchmarks.fold_cases import make_case, sglang_module  # noqa: E402
from benchmarks.gpu_run import TARGET, Pool  # noqa: E402
from replayssm_overlay.kernels import gdn_fold  # noqa: E402

N, B = 16, 8


def triton_folds() -> None:
    pool = Pool(N, B, sets=1, snapshot=False)
    lens = torch.full((B,), N, dtype=torch.int32, device="cuda")
    gdn_fold.fold_all_layers(pool.state, pool.rawv, pool.rawk, pool.g, pool.beta, pool.slot_sets[0], lens)
    sglang_module("fla.gdn_replayssm_spec_fold").commit_gdn_replayssm_fold_all_layers(
        pool.state, pool.rawv, pool.rawk, pool.g, pool.beta, pool.slot_sets[0], lens, N, TARGET["H"])


def cuda_commits(cubin: Path) -> None:
    from benchmarks.gpu_commit import conv_pair, entry_commit, spec_state, use_choice
    from replayssm_overlay.kernels import cuda_fold

    L, HV, H = TARGET["L"], TARGET["HV"], TARGET["H"]
    case = make_case(L=L, HV=HV, H=H, K=128, V=128, N=N, slots=list(range(B)), accept_lens=[N] * B,
                     num_slots=B + 2, device="cuda")
    conv, window, _ = conv_pair(L, B + 2, B, N, H, HV)
    use_choice("overlay-cuda", cuda_fold.CudaKernels(cubin.read_bytes(), cubin.name))
    for _ in range(3):
        ss = spec_state(case.temporal.clone(), case.rawv, case.rawk, case.g, case.beta, conv.clone(), window)
        entry_commit(ss, case.slots, case.accept_lens)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cuda", type=Path, metavar="CUBIN", help="profile the CUDA commit built into CUBIN instead")
    args = ap.parse_args()
    if args.cuda:
        cuda_commits(args.cuda)
    else:
        triton_folds()
    torch.cuda.synchronize()
    print("done")
