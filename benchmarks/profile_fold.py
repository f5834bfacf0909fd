"""One fold each (ours: k normalization + fold; SGLang 0.5.19's) at T=16, B=8, all accepted, on the
Qwen3.5-35B-A3B-like target, for Nsight Compute to profile:

    RSO_SGLANG_KERNELS=DIR ncu --clock-control none -k regex:"fold_kernel" --section SpeedOfLight \\
        --section WarpStateStats --section SchedulerStats --section Occupancy python benchmarks/profile_fold.py
"""

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / "overlay"), str(Path(__file__).resolve().parent.parent)]

from benchmarks.gpu_run import TARGET, Pool  # noqa: E402
from benchmarks.fold_cases import sglang_module  # noqa: E402
from replayssm_overlay.kernels import gdn_fold  # noqa: E402

N, B = 16, 8
pool = Pool(N, B, sets=1, snapshot=False)
lens = torch.full((B,), N, dtype=torch.int32, device="cuda")
gdn_fold.fold_all_layers(pool.state, pool.rawv, pool.rawk, pool.g, pool.beta, pool.slot_sets[0], lens)
sglang_module("fla.gdn_replayssm_spec_fold").commit_gdn_replayssm_fold_all_layers(
    pool.state, pool.rawv, pool.rawk, pool.g, pool.beta, pool.slot_sets[0], lens, N, TARGET["H"])
torch.cuda.synchronize()
print("profiled one fold of each")
