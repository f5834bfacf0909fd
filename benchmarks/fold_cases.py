"""Random GDN ReplaySSM fold cases built with SGLang 0.5.19's own kernels, and their decode reference.

Shared by the CPU tests (tests/kernels, Triton interpreter, the installed sglang) and the GPU run
(benchmarks/gpu_run.py, no sglang install: the kernel files are loaded by path from the folder named by
RSO_SGLANG_KERNELS, with a stand-in for the one helper module they import). A case is what the server
holds after a TARGET_VERIFY: a pre-verify fp32 state for a few slots, and the raw window (k, v, g, beta)
that SGLang's verify kernel wrote into the ReplaySSM ring. The reference runs SGLang's decode kernel
token by token over each request's accepted prefix, called the way `TritonGDNKernel.decode` calls it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import torch

FLA = "sglang.kernels.ops.attention.fla"
MAMBA = "sglang.kernels.ops.mamba"


def _load_by_path(folder: Path, module: str):
    """Load one of SGLang's kernel files from `folder` (its package path mirrored or flat)."""
    leaf = module.rsplit(".", 1)[1] + ".py"
    candidates = [folder / Path(*module.split(".")).with_suffix(".py"), folder / leaf]
    path = next((p for p in candidates if p.exists()), None)
    if path is None:
        raise FileNotFoundError(f"{leaf} not under {folder}")
    if "sglang.kernels.jit.utils" not in sys.modules:
        # The only import of these files beyond torch/triton: the PDL capability probe (sm_90 has PDL).
        stub = types.ModuleType("sglang.kernels.jit.utils")
        stub.is_arch_support_pdl = lambda: torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9
        sys.modules["sglang.kernels.jit.utils"] = stub
    spec = importlib.util.spec_from_file_location(module, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module] = mod
    spec.loader.exec_module(mod)
    return mod


def sglang_module(name: str):
    """`name` is e.g. 'fla.fused_sigmoid_gating_recurrent' or 'mamba.mamba_state_scatter_triton'."""
    package, leaf = name.split(".", 1)
    module = f"{FLA if package == 'fla' else MAMBA}.{leaf}"
    folder = os.environ.get("RSO_SGLANG_KERNELS")
    if folder:
        return sys.modules.get(module) or _load_by_path(Path(folder), module)
    return importlib.import_module(module)


@dataclass
class FoldCase:
    """Pool tensors after verify (ring filled, state untouched) plus what the reference needs."""

    L: int
    HV: int
    H: int
    K: int
    V: int
    N: int  # verify window = ring length
    slots: torch.Tensor  # [B] int32, -1 = padded row
    accept_lens: torch.Tensor  # [B] int32, incl. bonus
    track_slots: torch.Tensor | None  # [B] int32
    track_steps: torch.Tensor | None  # [B] int32, -1 = none
    temporal: torch.Tensor  # [L, S, HV, V, K] fp32 (pre-verify; folded in place by a commit)
    rawv: torch.Tensor
    rawk: torch.Tensor
    g: torch.Tensor
    beta: torch.Tensor
    q: torch.Tensor  # [L, B, N, H, K] (decode inputs, per token)
    k: torch.Tensor  # [L, B, N, H, K]
    v: torch.Tensor  # [L, B, N, HV, V]
    a: torch.Tensor  # [L, B, N, HV]
    b: torch.Tensor  # [L, B, N, HV]
    A_log: torch.Tensor  # [L, HV]
    dt_bias: torch.Tensor  # [L, HV]
    initial: torch.Tensor = field(repr=False, default=None)  # copy of temporal before any commit


def _mixed_qkv(q, k, v):
    """q, k [T, H, K] and v [T, HV, V] as views of one [T, conv_dim] row-major tensor, as the GDN
    layer's split of its conv output gives them (the strides decide the decode kernel's specialization)."""
    T = q.shape[0]
    mixed = torch.cat([q.reshape(T, -1), k.reshape(T, -1), v.reshape(T, -1)], dim=1)
    qs, ks, vs = torch.split(mixed, [q[0].numel(), k[0].numel(), v[0].numel()], dim=1)
    return qs.view(1, T, *q.shape[1:]), ks.view(1, T, *k.shape[1:]), vs.view(1, T, *v.shape[1:])


def make_case(
    *, L, HV, H, K, V, N, slots, accept_lens, num_slots, track=None, device="cpu", seed=0, raw_dtype=torch.bfloat16
) -> FoldCase:
    """Fresh random inputs; the ring is written by SGLang's verify kernel (`cache_ring=True`).
    `track`: None, or (track_slots, track_steps) lists."""
    fsg = sglang_module("fla.fused_sigmoid_gating_recurrent")
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def randn(*shape, scale=1.0, dtype=torch.float32):
        return (torch.randn(*shape, generator=gen) * scale).to(dtype).to(device)

    B = len(slots)
    temporal = randn(L, num_slots, HV, V, K, scale=0.5)
    rawv = torch.full((L, num_slots, HV, N, V), float("nan"), dtype=raw_dtype, device=device)
    rawk = torch.full((L, num_slots, H, N, K), float("nan"), dtype=raw_dtype, device=device)
    g = torch.full((L, num_slots, HV, N), float("nan"), device=device)
    beta = torch.full((L, num_slots, HV, N), float("nan"), device=device)
    q, k = randn(L, B, N, H, K, dtype=raw_dtype), randn(L, B, N, H, K, dtype=raw_dtype)
    v = randn(L, B, N, HV, V, dtype=raw_dtype)
    a, b = randn(L, B, N, HV, dtype=raw_dtype), randn(L, B, N, HV, dtype=raw_dtype)
    A_log, dt_bias = randn(L, HV, scale=0.5), randn(L, HV, scale=0.5)
    slots_t = torch.tensor(slots, dtype=torch.int32, device=device)
    cu = torch.arange(0, B * N + 1, N, dtype=torch.int32, device=device)
    for layer in range(L):
        qs, ks, vs = _mixed_qkv(
            q[layer].reshape(B * N, H, K), k[layer].reshape(B * N, H, K), v[layer].reshape(B * N, HV, V)
        )
        fsg.fused_sigmoid_gating_delta_rule_update(
            A_log=A_log[layer],
            a=a[layer].reshape(B * N, HV),
            dt_bias=dt_bias[layer],
            softplus_beta=1.0,
            softplus_threshold=20.0,
            q=qs,
            k=ks,
            v=vs,
            b=b[layer].reshape(B * N, HV),
            initial_state_source=temporal[layer],
            initial_state_indices=slots_t,
            cu_seqlens=cu,
            use_qk_l2norm_in_kernel=True,
            is_kda=False,
            disable_state_update=True,
            cache_ring=True,
            replayssm_rawv=rawv[layer],
            replayssm_rawk=rawk[layer],
            replayssm_g=g[layer],
            replayssm_beta=beta[layer],
        )
    track_slots = track_steps = None
    if track is not None:
        track_slots = torch.tensor(track[0], dtype=torch.int32, device=device)
        track_steps = torch.tensor(track[1], dtype=torch.int32, device=device)
    return FoldCase(
        L=L,
        HV=HV,
        H=H,
        K=K,
        V=V,
        N=N,
        slots=slots_t,
        accept_lens=torch.tensor(accept_lens, dtype=torch.int32, device=device),
        track_slots=track_slots,
        track_steps=track_steps,
        temporal=temporal,
        rawv=rawv,
        rawk=rawk,
        g=g,
        beta=beta,
        q=q,
        k=k,
        v=v,
        a=a,
        b=b,
        A_log=A_log,
        dt_bias=dt_bias,
        initial=temporal.clone(),
    )


def decode_reference(case: FoldCase):
    """(temporal after token-by-token decode of every accepted prefix, {row: state after its track step})."""
    fsg = sglang_module("fla.fused_sigmoid_gating_recurrent")
    temporal = case.initial.clone()
    tracked = {}
    slots = case.slots.tolist()
    lens = case.accept_lens.tolist()
    steps = case.track_steps.tolist() if case.track_steps is not None else [-1] * len(slots)
    device = temporal.device
    for t in range(case.N):
        rows = [i for i, s in enumerate(slots) if s >= 0 and t < lens[i]]
        if not rows:
            break
        idx = torch.tensor(rows, device=device)
        row_slots = case.slots[idx].contiguous()
        cu = torch.arange(len(rows) + 1, dtype=torch.int32, device=device)
        for layer in range(case.L):
            qs, ks, vs = _mixed_qkv(case.q[layer, idx, t], case.k[layer, idx, t], case.v[layer, idx, t])
            fsg.fused_sigmoid_gating_delta_rule_update(
                A_log=case.A_log[layer],
                a=case.a[layer, idx, t].contiguous(),
                dt_bias=case.dt_bias[layer],
                softplus_beta=1.0,
                softplus_threshold=20.0,
                q=qs,
                k=ks,
                v=vs,
                b=case.b[layer, idx, t].contiguous(),
                initial_state_source=temporal[layer],
                initial_state_indices=row_slots,
                cu_seqlens=cu,
                use_qk_l2norm_in_kernel=True,
            )
        for i in rows:
            if steps[i] == t:
                tracked[i] = temporal[:, slots[i]].clone()
    return temporal, tracked


def snapshot_reference(case: FoldCase):
    """Stock's snapshot path on the same inputs: SGLang's verify writes every step's state of every row
    (`intermediate_states_buffer`), then SGLang's scatter copies each row's last accepted step into its
    slot and its track step into its track slot. The temporal state afterwards."""
    fsg = sglang_module("fla.fused_sigmoid_gating_recurrent")
    scatter = sglang_module("mamba.mamba_state_scatter_triton").fused_mamba_state_scatter_with_mask
    temporal = case.initial.clone()
    B, N, device = len(case.slots), case.N, temporal.device
    inter = torch.empty(case.L, B, N, case.HV, case.V, case.K, device=device)
    rows = torch.arange(B, dtype=torch.int32, device=device)
    cu = torch.arange(0, B * N + 1, N, dtype=torch.int32, device=device)
    for layer in range(case.L):
        qs, ks, vs = _mixed_qkv(
            case.q[layer].reshape(B * N, case.H, case.K),
            case.k[layer].reshape(B * N, case.H, case.K),
            case.v[layer].reshape(B * N, case.HV, case.V),
        )
        fsg.fused_sigmoid_gating_delta_rule_update(
            A_log=case.A_log[layer],
            a=case.a[layer].reshape(B * N, case.HV),
            dt_bias=case.dt_bias[layer],
            softplus_beta=1.0,
            softplus_threshold=20.0,
            q=qs,
            k=ks,
            v=vs,
            b=case.b[layer].reshape(B * N, case.HV),
            initial_state_source=temporal[layer],
            initial_state_indices=case.slots,
            cu_seqlens=cu,
            use_qk_l2norm_in_kernel=True,
            is_kda=False,
            disable_state_update=True,
            intermediate_states_buffer=inter[layer],
            intermediate_state_indices=rows,
            cache_steps=N,
        )
    scatter(temporal, inter, case.slots, (case.accept_lens - 1).to(torch.int32))
    if case.track_slots is not None:
        scatter(temporal, inter, case.track_slots, case.track_steps)
    return temporal


def reference_float64(case: FoldCase):
    """The same recurrence in float64 from the ring (no rounding to fp32 between ops): for closeness."""
    h = case.initial.double().clone()
    slots, lens = case.slots.tolist(), case.accept_lens.tolist()
    group = case.HV // case.H
    for i, s in enumerate(slots):
        if s < 0:
            continue
        for t in range(lens[i]):
            k = case.rawk[:, s, :, t].double().repeat_interleave(group, dim=1)  # [L, HV, K]
            k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
            v = case.rawv[:, s, :, t].double()  # [L, HV, V]
            hs = h[:, s] * torch.exp(case.g[:, s, :, t].double())[..., None, None]  # [L, HV, V, K]
            v = (v - (hs * k[:, :, None, :]).sum(-1)) * case.beta[:, s, :, t].double()[..., None]
            h[:, s] = hs + v[..., None] * k[:, :, None, :]
    return h
