"""On a GPU: after `sglang_warmup` compiled SGLang's commit on the pool, the server's first commits on that
pool compile nothing more (marked `gpu`; skipped without CUDA).

The CPU test (tests/hooks/test_sglang_warmup.py) checks that the warm-up runs on the very tensors of the pool
SGLang builds (the hybrid pool and the PD-decode pool); this one checks, with Triton's compiler itself, that
this leaves nothing to compile: a fresh Triton cache folder, the warm-up on a pool laid out as `MambaPool`
lays it out (a PD-decode pool's slot count, larger than `max_mamba_cache_size + 1`), then commits with real
rows (accepted prefixes, a track slot), and no new binary of SGLang's fold or conv scatter in the folder.
Prints what the warm-up cost and what it recorded (reported, not asserted). SGLang's kernel files come from
RSO_SGLANG_KERNELS, as for the other GPU tests (benchmarks/README.md).
"""

import time

import pytest
import torch

from benchmarks.fold_cases import sglang_module
from replayssm_overlay import fold, sglang_warmup

#: a PD-decode pool of --max-running-requests 16 plus 40 pre-allocated rows, one slot each (max_mamba_cache_size
#: 32 would have made 33 slots): MambaPool's slot and request-row counts
SLOTS, ROWS = 57, 17
LAYERS, HV, H, K, V, WINDOW, CONV_DIM, CONV_WIDTH = 2, 32, 16, 128, 128, 16, 8192, 3
FOLD_KERNELS = ("gdn_replayssm_exact_fold_kernel", "_fused_conv_window_scatter_with_mask_kernel")


def _binaries(cache) -> dict:
    """Binaries Triton compiled into the cache folder, per kernel (a kernel compiled earlier in this process
    with the same specialization is found in memory and compiles nothing: only the fold's, whose constexpr
    strides are this pool's, must be new)."""
    return {name: len(list(cache.glob(f"*/{name}.cubin"))) for name in FOLD_KERNELS}


def _pool():
    """A pool as MambaPool allocates it (every layer, SLOTS slots, the deduplicated conv windows of ROWS rows)."""
    cuda = dict(device="cuda")
    span = WINDOW + CONV_WIDTH - 1
    shared = torch.zeros(LAYERS, ROWS, CONV_DIM, span, dtype=torch.bfloat16, **cuda)
    return dict(
        temporal=torch.randn(LAYERS, SLOTS, HV, V, K, **cuda) * 0.5,
        replayssm_rawv=torch.randn(LAYERS, SLOTS, HV, WINDOW, V, **cuda).to(torch.bfloat16),
        replayssm_rawk=torch.randn(LAYERS, SLOTS, H, WINDOW, K, **cuda).to(torch.bfloat16),
        replayssm_g=-torch.rand(LAYERS, SLOTS, HV, WINDOW, **cuda) * 0.1,
        replayssm_beta=torch.rand(LAYERS, SLOTS, HV, WINDOW, **cuda),
        conv=[torch.zeros(LAYERS, SLOTS, CONV_DIM, CONV_WIDTH, dtype=torch.bfloat16, **cuda)],
        intermediate_conv_window=[
            shared.as_strided(
                (LAYERS, ROWS, WINDOW, CONV_DIM, CONV_WIDTH), (ROWS * CONV_DIM * span, CONV_DIM * span, 1, span, 1)
            )
        ],
    )


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_gpu_after_the_warm_up_the_first_commits_compile_nothing(tmp_path):
    import types

    import triton

    for name in ("fla.gdn_replayssm_spec_fold", "mamba.mamba_state_scatter_triton"):
        sglang_module(name)  # registered under their full names, which SGLang's commit imports
    pool = types.SimpleNamespace(**_pool())
    mamba_pool = types.SimpleNamespace(get_speculative_mamba2_params_all_layers=lambda: pool)
    before = pool.temporal.clone()
    with triton.knobs.cache.scope():
        triton.knobs.cache.dir = str(tmp_path)
        started = time.monotonic()
        outcome = sglang_warmup._warm(mamba_pool, "test")
        warmed = _binaries(tmp_path)
        print(f"warm-up: {time.monotonic() - started:.2f} s, binaries compiled: {warmed}, recorded: {outcome}")
        assert outcome["outcome"] == "compiled" and outcome["pool"]["slots"] == SLOTS, outcome
        assert outcome["compiles"] is None or outcome["compiles"] >= 2
        assert torch.equal(pool.temporal, before)  # padded rows: nothing written
        slots = torch.tensor([3, 0, -1, 7], dtype=torch.int32, device="cuda")
        lens = torch.tensor([16, 5, 0, 1], dtype=torch.int32, device="cuda")
        track = (
            torch.tensor([9, -1, -1, 10], dtype=torch.int64, device="cuda"),
            torch.tensor([7, -1, -1, 0], dtype=torch.int64, device="cuda"),
        )
        fold.sglang_commit(pool, slots, lens, None, None, None, -1)
        fold.sglang_commit(pool, slots, lens, None, *track, -1)
        torch.cuda.synchronize()
        assert _binaries(tmp_path) == warmed and warmed[FOLD_KERNELS[0]] == 2  # without and with a track slot
    assert not torch.equal(pool.temporal[:, 3], before[:, 3])  # the commits ran
