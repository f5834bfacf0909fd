"""SGLang 0.5.19's own GDN fold kernel as a kernel provider for the ahead-of-time build (proof only).

The overlay's build (`replayssm_overlay.aot.build`) compiles whatever a provider lists. Until the
overlay's own fold kernel exists, the build, the loader and the GPU proof are exercised on SGLang's
fold, loaded by file path (nothing of SGLang is copied here). SGLang passes every stride as a
`tl.constexpr`, so its binaries also depend on the number of layers and of mamba slots, which a
server only knows at run time: that is why this provider is a proof vehicle, not something to ship.

`sglang_fold_provider(layers, slots)` returns `provider(hv, h, k, v, window)` giving the two variants
(no track slot, track slot) with the arguments `commit_gdn_replayssm_fold_all_layers` passes for
contiguous fp32 state, bf16 raw k/v, fp32 g/beta and int32 index tensors.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from pathlib import Path

FOLD_FILE = "gdn_replayssm_spec_fold.py"
FOLD_RELPATH = Path("sglang/kernels/ops/attention/fla") / FOLD_FILE
REPO = Path(__file__).resolve().parent.parent


def fold_file() -> Path:
    """$RSO_SGLANG_FOLD_FILE, else <repo>/.sglang-kernels/<file>, else the installed sglang's file."""
    if os.environ.get("RSO_SGLANG_FOLD_FILE"):
        return Path(os.environ["RSO_SGLANG_FOLD_FILE"])
    carried = REPO / ".sglang-kernels" / FOLD_FILE
    if carried.is_file():
        return carried
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"no {FOLD_FILE}: set RSO_SGLANG_FOLD_FILE or install sglang 0.5.19")
    return Path(list(spec.submodule_search_locations)[0]).parent / FOLD_RELPATH


def load_fold_module(path: Path | None = None):
    """SGLang's fold module, imported by path and compiled (torch may be absent on a build machine: only
    annotations use it)."""
    if "torch" not in sys.modules and importlib.util.find_spec("torch") is None:
        sys.modules["torch"] = types.ModuleType("torch")
    return load_compiled(Path(path or fold_file()), "rso_sglang_gdn_fold")


def load_compiled(path: Path, name: str):
    """Import a kernel file by path with Triton's interpreter off (the CPU test session may have set
    TRITON_INTERPRET=1, which makes `@triton.jit` produce functions that cannot be compiled)."""
    import triton

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    with triton.knobs.runtime.scope():
        triton.knobs.runtime.interpret = False
        spec.loader.exec_module(module)
    return module


def fold_constexprs(layers: int, slots: int, hv: int, h: int, k: int, v: int, window: int, has_track: bool) -> dict:
    """What SGLang's wrapper passes as constexprs for contiguous pool tensors of these sizes."""
    bk = 1 << (k - 1).bit_length()
    bv = min(1 << (v - 1).bit_length(), 32)
    return {
        "stride_state_slot": hv * k * v, "stride_rawv_slot": hv * window * v, "stride_rawk_slot": h * window * k,
        "stride_g_slot": hv * window, "stride_beta_slot": hv * window,
        "stride_state_layer": slots * hv * k * v, "stride_rawv_layer": slots * hv * window * v,
        "stride_rawk_layer": slots * h * window * k, "stride_g_layer": slots * hv * window,
        "stride_beta_layer": slots * hv * window,
        "stride_indices": 1, "stride_accept": 1, "stride_track": int(has_track), "stride_steps": int(has_track),
        "H": h, "HV": hv, "K": k, "V": v, "BK": bk, "BV": bv, "MAX_CACHE_LEN": window,
        "USE_QK_L2NORM_IN_KERNEL": True, "NULL_BLOCK_ID": -1, "HAS_TRACK": has_track,
    }


POINTER_TYPES = ["*fp32", "*bf16", "*bf16", "*fp32", "*fp32", "*i32", "*i32", "*i32", "*i32"]


def sglang_fold_provider(layers: int, slots: int, path: Path | None = None):
    module = load_fold_module(path)
    kernel = module.gdn_replayssm_exact_fold_kernel
    signature = dict(zip(kernel.arg_names, POINTER_TYPES))

    def provider(hv, h, k, v, window):
        return [
            {"kernel": kernel, "signature": signature, "num_warps": 1, "num_stages": 3,
             "constexprs": fold_constexprs(layers, slots, hv, h, k, v, window, has_track),
             "label": f"sglang-0.5.19 L={layers} slots={slots} HV={hv} H={h} K={k} V={v} T={window} "
                      f"track={has_track}"}
            for has_track in (False, True)
        ]

    provider.module = module
    return provider


PROOF_LAYERS, PROOF_SLOTS = 30, 8  # the shapes gpu_aot_check.py runs


def aot_specializations(hv, h, k, v, window):
    """Provider for `replayssm-overlay kernels build --provider benchmarks.aot_sglang_fold:aot_specializations`."""
    global _PROOF_PROVIDER
    if _PROOF_PROVIDER is None:
        _PROOF_PROVIDER = sglang_fold_provider(PROOF_LAYERS, PROOF_SLOTS)
    return _PROOF_PROVIDER(hv, h, k, v, window)


_PROOF_PROVIDER = None
