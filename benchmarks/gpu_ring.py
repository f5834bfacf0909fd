"""One GPU run for the circular-ring releases (SGLang 0.5.20 on): the multi-step verify -> commit cycle
with 0.5.23's own kernels, its distance per step from the verify recurrence replayed token by token,
and per verify step (verify + commit) the ring path's cost beside 0.5.19's fold path and the snapshot
path, CUDA graph and eager, T=16, B 1/8/32, for a Qwen3.5-35B-A3B-like target (30 GDN layers per rank).

SGLang cannot be installed on the GPU machine, so its kernel files are loaded by path (never committed):
    RSO_KERNELS_0519=<dir with 0.5.19's fused_sigmoid_gating_recurrent.py, gdn_replayssm_spec_fold.py,
                      mamba_state_scatter_triton.py>
    RSO_KERNELS_0523=<dir with 0.5.23's gdn_replayssm_spec_decode.py>
    python benchmarks/gpu_ring.py --out OUTDIR                       # the multi-step cycles
    python benchmarks/gpu_ring.py --out OUTDIR --batch 8 --path ring  # one path's timing, one process each

What is measured, and how it relates to SGLang's MTP commit: the overlay's DFLASH/DSPARK commit on a
ring pool calls the installed release's own `spec_utils.commit_mamba_states_after_verify` (that it is
bitwise the MTP commit is checked on CPU, where spec_utils imports). On the GPU the same kernel sequence
runs, called with the arguments that function's GDN ring branch passes: `commit_gdn_replayssm_spec`
(cursor advance; `fold_every_commit = temporal.dtype != fp32`), then `commit_gdn_replayssm_circular`
(materialize flush rows, finish cursors). The conv rollback (one small scatter, the same in every path)
is left out of every path's timing. The multi-step cycle is run twice from the same inputs and must be
bitwise equal to itself (the commit is deterministic), and its state (materialized on a copy with every
row flushed) is compared with the recurrence (`fused_sigmoid_gating_delta_rule_update`, state write-back)
over each row's accepted prefix: relative RMS per step.
Writes OUTDIR/ring.json and OUTDIR/log.txt as it goes; exit 1 if a check fails. Each timing runs in a
process of its own, so a fault in one path cannot take the others' numbers with it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
import types
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import timing  # noqa: E402

TARGET = dict(L=30, HV=32, H=16, K=128, V=128)
RESULTS: dict = {"cycle": [], "timing": [], "ring_pairs": []}
RUN = timing.Run(RESULTS)  # the results folder: started in main
log, save = RUN.log, RUN.save
DEVICE = "cuda"  # "cpu" only for --cpu-smoke (Triton interpreter)
RING_DTYPE = torch.bfloat16  # the conv dtype of a served model; fp32 for --cpu-smoke (numpy has no bf16)


def _stub(name: str, **attrs):
    module = sys.modules.get(name) or types.ModuleType(name)
    for key, value in attrs.items():
        setattr(module, key, value)
    sys.modules[name] = module


def load(variable: str, filename: str, alias: str):
    """One SGLang kernel file from the folder named by `variable`, under its own module name `alias`
    (0.5.19's and 0.5.23's files live side by side), with stand-ins for the few helpers it imports."""
    folder = Path(os.environ[variable])
    path = next(p for p in folder.rglob(filename))
    sm90 = DEVICE == "cuda" and torch.cuda.get_device_capability()[0] >= 9
    _stub("sglang.kernels.jit.utils", is_arch_support_pdl=lambda: sm90)
    _stub("sglang.kernels.ops.attention.fla.utils", is_tf32_supported=True)
    _stub("sglang.srt.utils", is_gfx95_supported=lambda: False)
    spec = importlib.util.spec_from_file_location(alias, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[alias] = module
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------------------------- pools
class RingPool:
    """Target-shaped GDN ring pool as 0.5.20+ allocates it with a bf16 conv dtype: fp32 checkpoint, bf16
    d/k rings plus their bf16 low parts (rawv/rawk), fp32 g, request-keyed cursors; `sets` disjoint
    request sets of size B (slot s of set i is request row s + 1)."""

    def __init__(self, N, B, sets, ring_len, layers=None, seed=0):
        L = layers or TARGET["L"]
        HV, H, K, V = (TARGET[x] for x in ("HV", "H", "K", "V"))
        gen = torch.Generator(device=DEVICE).manual_seed(seed)
        S = sets * B + 1
        self.L, self.N, self.B, self.sets, self.ring_len = L, N, B, sets, ring_len
        self.temporal = torch.randn(L, S, HV, V, K, device=DEVICE, generator=gen) * 0.5
        self.d = torch.zeros(L, S, HV, ring_len, V, device=DEVICE, dtype=RING_DTYPE)
        self.k = torch.zeros(L, S, H, ring_len, K, device=DEVICE, dtype=RING_DTYPE)
        lows = RING_DTYPE != torch.float32  # the pool keeps low parts only for a 16-bit ring
        self.d_lo = torch.zeros_like(self.d) if lows else None
        self.k_lo = torch.zeros_like(self.k) if lows else None
        self.g = torch.zeros(L, S, HV, ring_len, device=DEVICE)
        self.write_pos = torch.zeros(S, dtype=torch.int32, device=DEVICE)
        self.cache_base = torch.zeros(S, dtype=torch.int32, device=DEVICE)
        self.is_flush = torch.zeros(S, dtype=torch.int8, device=DEVICE)
        perm = torch.randperm(sets * B, device=DEVICE, generator=gen).to(torch.int32)
        self.slot_sets = [perm[i * B : (i + 1) * B].contiguous() for i in range(sets)]
        self.row_sets = [(s + 1).to(torch.int64).contiguous() for s in self.slot_sets]
        self.A_log = torch.rand(L, HV, device=DEVICE, generator=gen)
        self.dt_bias = torch.rand(L, HV, device=DEVICE, generator=gen)
        self.cu = torch.arange(0, B * N + 1, N, dtype=torch.int32, device=DEVICE)
        self.new_inputs(gen)

    def new_inputs(self, gen=None):
        HV, H, K, V = (TARGET[x] for x in ("HV", "H", "K", "V"))
        T = self.B * self.N

        def rnd(*shape):
            return torch.randn(*shape, device=DEVICE, generator=gen).to(torch.bfloat16)

        self.q, self.kk, self.v = rnd(self.L, T, H, K), rnd(self.L, T, H, K), rnd(self.L, T, HV, V)
        self.a, self.b = rnd(self.L, T, HV), rnd(self.L, T, HV)
        self.out = torch.empty(T, HV, V, device=DEVICE, dtype=torch.bfloat16)

    def state_tensors(self):
        tensors = dict(
            temporal=self.temporal,
            d=self.d,
            k=self.k,
            d_lo=self.d_lo,
            k_lo=self.k_lo,
            g=self.g,
            write_pos=self.write_pos,
            cache_base=self.cache_base,
            is_flush=self.is_flush,
        )
        return {name: t for name, t in tensors.items() if t is not None}

    def verify(self, ring, i, sync=False):
        """0.5.23 `GDNAttnBackend._replayssm_target_verify`, once per layer (launch_mode="verify")."""
        for layer in range(self.L):
            self.verify_layer(ring, i, layer)
            if sync:
                torch.cuda.synchronize()
                log("  verify layer", layer, "done")

    def verify_layer(self, ring, i, layer):
        K = TARGET["K"]
        ring.gdn_replayssm_spec_decode(
            q=self.q[layer],
            k=self.kk[layer],
            v=self.v[layer],
            a=self.a[layer],
            b=self.b[layer],
            A_log=self.A_log[layer],
            dt_bias=self.dt_bias[layer],
            checkpoint_state=self.temporal[layer],
            d_cache=self.d[layer],
            k_cache=self.k[layer],
            g_cache=self.g[layer],
            rawv_cache=None if self.d_lo is None else self.d_lo[layer],
            rawk_cache=None if self.k_lo is None else self.k_lo[layer],
            beta_cache=None,
            out=self.out,
            query_start_loc=self.cu,
            ssm_state_indices=self.slot_sets[i],
            replay_indices=self.row_sets[i],
            write_pos=self.write_pos,
            cache_base=self.cache_base,
            is_flush=self.is_flush,
            max_cache_len=self.ring_len,
            max_spec_len=self.N,
            scale=K**-0.5,
            use_qk_l2norm_in_kernel=True,
            null_block_id=-1,
            launch_mode="verify",
        )

    def commit(self, ring, i, accept_lens, temporal=None, is_flush=None, cursors=None, tracks=None):
        """The kernels of 0.5.20+'s `commit_mamba_states_after_verify` GDN ring branch, with its arguments
        (`tracks`: the track slots and steps, int64, as the server passes them)."""
        temporal = self.temporal if temporal is None else temporal
        write_pos, cache_base, flags = cursors or (self.write_pos, self.cache_base, self.is_flush)
        if is_flush is None:
            ring.commit_gdn_replayssm_spec(
                write_pos=write_pos,
                cache_base=cache_base,
                is_flush=flags,
                num_accepted=accept_lens,
                replay_indices=self.row_sets[i],
                max_cache_len=self.ring_len,
                max_spec_len=self.N,
                fold_every_commit=temporal.dtype != torch.float32,
                null_block_id=-1,
            )
        else:
            flags = is_flush
        ring.commit_gdn_replayssm_circular(
            checkpoint_state=temporal,
            d_cache=self.d,
            k_cache=self.k,
            g_cache=self.g,
            d_residual_cache=self.d_lo,
            k_residual_cache=self.k_lo,
            state_batch_indices=self.slot_sets[i],
            replay_indices=self.row_sets[i],
            write_pos=write_pos,
            cache_base=cache_base,
            is_flush=flags,
            accept_lens=accept_lens,
            null_block_id=-1,
            **(dict(mamba_track_indices=tracks[0], mamba_steps_to_track=tracks[1]) if tracks else {}),
        )

    def materialized(self, ring, i):
        """The state the ring stands for: the commit's materialization on copies, every row flushed."""
        temporal = self.temporal.clone()
        flags = self.is_flush.clone()
        flags[self.row_sets[i]] = 1
        self.commit(
            ring,
            i,
            torch.zeros(self.B, dtype=torch.int32, device=DEVICE),
            temporal=temporal,
            is_flush=flags,
            cursors=(self.write_pos.clone(), self.cache_base.clone(), flags),
        )
        return temporal


def recurrence(fsg, pool: RingPool, state, i, accept_lens):
    """The verify recurrence over each row's accepted prefix with state write-back (one varlen launch per
    layer: the kernel carries the fp32 state token to token as repeated decode calls do)."""
    N = pool.N
    lens = accept_lens.tolist()
    tokens = torch.cat([torch.arange(r * N, r * N + n) for r, n in enumerate(lens)]).to(DEVICE)
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0).tolist()), dtype=torch.int32, device=DEVICE)
    for layer in range(pool.L):
        fsg.fused_sigmoid_gating_delta_rule_update(
            A_log=pool.A_log[layer],
            a=pool.a[layer][tokens].contiguous(),
            dt_bias=pool.dt_bias[layer],
            softplus_beta=1.0,
            softplus_threshold=20.0,
            q=pool.q[layer][tokens][None].contiguous(),
            k=pool.kk[layer][tokens][None].contiguous(),
            v=pool.v[layer][tokens][None].contiguous(),
            b=pool.b[layer][tokens].contiguous(),
            initial_state_source=state[layer],
            initial_state_indices=pool.slot_sets[i],
            cu_seqlens=cu,
            use_qk_l2norm_in_kernel=True,
            is_kda=False,
        )


def cycle(ring, fsg, *, ring_len, steps, layers, B=4, N=16, seed=7):
    """`steps` consecutive verify -> commit steps with random accept lengths; returns per-step numbers."""

    def run():
        pool = RingPool(N, B, sets=1, ring_len=ring_len, layers=layers, seed=seed)
        reference = pool.temporal.clone()
        gen = torch.Generator().manual_seed(seed)
        rows, slots = [], pool.slot_sets[0].long()
        for step in range(steps):
            pool.new_inputs(torch.Generator(device=DEVICE).manual_seed(seed * 1000 + step))
            accept = torch.randint(1, N + 1, (B,), generator=gen, dtype=torch.int32).to(DEVICE)
            pool.verify(ring, 0)
            base_before = pool.cache_base.clone()
            pool.commit(ring, 0, accept)
            recurrence(fsg, pool, reference, 0, accept)
            mat = pool.materialized(ring, 0)
            err = (
                (mat[:, slots].double() - reference[:, slots].double()).norm() / reference[:, slots].double().norm()
            ).item()
            rows.append(
                dict(
                    step=step,
                    accept=accept.tolist(),
                    relative_rms=err,
                    flushed=bool((pool.cache_base != base_before).any()),
                )
            )
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        return rows, {k: t.clone() for k, t in pool.state_tensors().items()}

    rows, first = run()
    _, second = run()
    deterministic = all(torch.equal(first[k], second[k]) for k in first)
    return dict(
        ring_len=ring_len,
        steps=steps,
        layers=layers,
        B=B,
        N=N,
        deterministic=deterministic,
        max_relative_rms=max(r["relative_rms"] for r in rows),
        flushes=sum(r["flushed"] for r in rows),
        per_step=rows,
    )


def _bits(tensor):
    """Bit patterns (the sign of a zero included)."""
    if not tensor.is_floating_point():
        return tensor
    return tensor.contiguous().view({2: torch.int16, 4: torch.int32}[tensor.element_size()])


def ring_pair(ring, *, N, B, steps, layers, padded=2, seed=11):
    """SGLang's ring of L = N and of 2N from the same inputs, step by step: the verify's output, every
    slot's state (track slots and spares included), write_pos, is_flush, cache_base modulo N and the
    materialized state must be the same bits. Rows 0..padded-1 are padded (slot -1); every other row
    stores a track slot (a spare of the second request set) at a random step; both rings start with
    random stale rows (a reused pool)."""
    pools = [RingPool(N, B, sets=2, ring_len=length, layers=layers, seed=seed) for length in (N, 2 * N)]
    for pool in pools:
        stale = torch.Generator(device=DEVICE).manual_seed(seed + pool.ring_len)
        for t in (pool.d, pool.k, pool.g, pool.d_lo, pool.k_lo):
            if t is not None:
                t.copy_(torch.randn(t.shape, device=DEVICE, generator=stale).to(t.dtype))
        pool.slot_sets[0][:padded] = -1
    gen = torch.Generator().manual_seed(seed)
    track_slots = pools[0].slot_sets[1].to(torch.int64)
    track_slots[:padded] = -1
    differing, flushes = [], [0, 0]
    for step in range(steps):
        accept = torch.randint(1, N + 1, (B,), generator=gen, dtype=torch.int32)
        track_steps = torch.tensor([int(torch.randint(-1, int(n), (1,), generator=gen)) for n in accept])
        accept, track_steps = accept.to(DEVICE), track_steps.to(DEVICE)
        seen = []
        for which, pool in enumerate(pools):
            pool.new_inputs(torch.Generator(device=DEVICE).manual_seed(seed * 1000 + step))
            outs = []
            for layer in range(pool.L):  # the verify writes `out` per layer: keep each layer's
                pool.verify_layer(ring, 0, layer)
                outs.append(pool.out.clone())
            pool.commit(ring, 0, accept, tracks=(track_slots, track_steps))
            flushes[which] += int(bool((pool.write_pos[pool.row_sets[0][padded:]] == 0).all()))
            seen.append(
                dict(
                    out=torch.stack(outs),
                    state=pool.temporal.clone(),
                    write_pos=pool.write_pos.clone(),
                    is_flush=pool.is_flush.clone(),
                    cache_base=pool.cache_base % N,
                    materialized=pool.materialized(ring, 0),
                )
            )
        for name in seen[0]:
            a, b = _bits(seen[0][name]), _bits(seen[1][name])
            if not torch.equal(a, b):
                count = int((a != b).sum())
                delta = (seen[0][name].double() - seen[1][name].double()).abs().max().item()
                differing.append(dict(step=step, name=name, values=count, max_abs=delta))
    return dict(
        N=N,
        rings=[N, 2 * N],
        B=B,
        padded=padded,
        layers=layers,
        steps=steps,
        flushes=flushes,
        bitwise_equal=not differing,
        differing=differing[:20],
    )


# -------------------------------------------------------------------------------------------- timing
class FoldPool:
    """0.5.19's pool for the same target: fp32 state, bf16 raw window, fp32 g/beta (ReplaySSM fold), or
    per-step intermediate states (snapshot path)."""

    def __init__(self, N, B, sets, snapshot):
        L, HV, H, K, V = (TARGET[x] for x in ("L", "HV", "H", "K", "V"))
        S = sets * B + 1
        self.N, self.B, self.sets = N, B, sets
        self.state = torch.randn(L, S, HV, V, K, device=DEVICE) * 0.5
        self.rawv = torch.zeros(L, S, HV, N, V, device=DEVICE, dtype=torch.bfloat16)
        self.rawk = torch.zeros(L, S, H, N, K, device=DEVICE, dtype=torch.bfloat16)
        self.g = torch.zeros(L, S, HV, N, device=DEVICE)
        self.beta = torch.zeros(L, S, HV, N, device=DEVICE)
        perm = torch.randperm(sets * B, device=DEVICE).to(torch.int32)
        self.slot_sets = [perm[i * B : (i + 1) * B].contiguous() for i in range(sets)]
        T = B * N
        self.qkv = torch.randn(T, 2 * H * K + HV * V, device=DEVICE).to(torch.bfloat16)
        self.a = torch.randn(T, HV, device=DEVICE).to(torch.bfloat16)
        self.b = torch.randn(T, HV, device=DEVICE).to(torch.bfloat16)
        self.A_log, self.dt_bias = torch.rand(HV, device=DEVICE), torch.rand(HV, device=DEVICE)
        self.cu = torch.arange(0, T + 1, N, dtype=torch.int32, device=DEVICE)
        self.rows = torch.arange(B, dtype=torch.int32, device=DEVICE)
        self.inter = torch.empty(L, B, N, HV, V, K, device=DEVICE) if snapshot else None

    def verify(self, fsg, i, ring):
        H, K, HV, V = (TARGET[x] for x in ("H", "K", "HV", "V"))
        q, k, v = torch.split(self.qkv, [H * K, H * K, HV * V], dim=1)
        T = self.qkv.shape[0]
        q, k, v = q.view(1, T, H, K), k.view(1, T, H, K), v.view(1, T, HV, V)
        for layer in range(TARGET["L"]):
            kw = (
                dict(
                    cache_ring=True,
                    replayssm_rawv=self.rawv[layer],
                    replayssm_rawk=self.rawk[layer],
                    replayssm_g=self.g[layer],
                    replayssm_beta=self.beta[layer],
                )
                if ring
                else dict(
                    intermediate_states_buffer=self.inter[layer],
                    intermediate_state_indices=self.rows,
                    cache_steps=self.N,
                )
            )
            fsg.fused_sigmoid_gating_delta_rule_update(
                A_log=self.A_log,
                a=self.a,
                dt_bias=self.dt_bias,
                softplus_beta=1.0,
                softplus_threshold=20.0,
                q=q,
                k=k,
                v=v,
                b=self.b,
                initial_state_source=self.state[layer],
                initial_state_indices=self.slot_sets[i],
                cu_seqlens=self.cu,
                use_qk_l2norm_in_kernel=True,
                is_kda=False,
                disable_state_update=True,
                **kw,
            )


def time_ring(ring, fsg, fold, scatter, *, batch, path):
    """One path's per-verify-step cost at T=16 and batch `batch` (ring at L=16 and L=64, fold, snapshot)."""
    N, sets = 16, 2
    lens = torch.randint(1, N + 1, (batch,), generator=torch.Generator().manual_seed(batch), dtype=torch.int32).to(
        DEVICE
    )
    steps = (lens - 1).to(torch.int64)
    row = dict(N=N, B=batch, path=path, mean_accept=lens.float().mean().item())
    if path == "ring":
        for ring_len in (16, 32, 64):
            pool = RingPool(N, batch, sets, ring_len)

            def ring_step(i):
                pool.verify(ring, i)
                pool.commit(ring, i, lens)

            row[f"L{ring_len}_graph_us"] = timing.graph_us(ring_step, sets, 20)
            row[f"L{ring_len}_eager_us"] = timing.eager_us(ring_step, sets, 10)[0]
            if ring_len == 16:
                row["verify_graph_us"] = timing.graph_us(lambda i: pool.verify(ring, i), sets, 20)
            del pool
            torch.cuda.empty_cache()
    else:
        pool = FoldPool(N, batch, sets, snapshot=path == "snapshot")

        def fold_step(i):
            pool.verify(fsg, i, ring=True)
            fold.commit_gdn_replayssm_fold_all_layers(
                pool.state, pool.rawv, pool.rawk, pool.g, pool.beta, pool.slot_sets[i], lens, N, TARGET["H"]
            )

        def snapshot_step(i):
            pool.verify(fsg, i, ring=False)
            scatter.fused_mamba_state_scatter_with_mask(pool.state, pool.inter, pool.slot_sets[i], steps)

        step = fold_step if path == "fold" else snapshot_step
        row["graph_us"] = timing.graph_us(step, sets, 20 if path == "fold" else 10)
        row["eager_us"] = timing.eager_us(step, sets, 10 if path == "fold" else 5)[0]
    RESULTS["timing"].append(row)
    save()
    log("time", json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in row.items()}))


def diagnose(ring, batch):
    """The ring step at `batch` with a sync after every launch (run with CUDA_LAUNCH_BLOCKING=1): names
    the first call that faults."""
    pool = RingPool(16, batch, 2, 16)
    lens = torch.randint(1, 17, (batch,), dtype=torch.int32).to(DEVICE)
    log("diagnose: verify")
    pool.verify(ring, 0, sync=True)
    log("diagnose: commit")
    pool.commit(ring, 0, lens)
    torch.cuda.synchronize()
    log("diagnose: ok")


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True, help="folder for ring.json and log.txt")
    parser.add_argument("--steps", type=int, default=40, help="steps of the multi-step cycle (default 40)")
    parser.add_argument("--batch", type=int, help="time one batch size (with --path) instead of the cycle")
    parser.add_argument("--path", choices=("ring", "fold", "snapshot"), default="ring")
    parser.add_argument("--diagnose", type=int, metavar="B", help="the ring step at batch B, synced per launch")
    parser.add_argument(
        "--pairs",
        action="store_true",
        help="rings of N and 2N from the same inputs, bit for bit per step (N: --windows)",
    )
    parser.add_argument("--windows", default="16,8,4", help="windows N of --pairs (default 16,8,4)")
    parser.add_argument(
        "--cpu-smoke",
        action="store_true",
        help="check the script on a CPU (TRITON_INTERPRET=1): a 3-step cycle, no timing",
    )
    args = parser.parse_args()
    RUN.start(Path(args.out), "log.txt", "ring.json")
    global DEVICE, RING_DTYPE
    if args.cpu_smoke:
        DEVICE, RING_DTYPE = "cpu", torch.float32
        TARGET.update(HV=2, H=1, K=32, V=32)
    import triton

    RESULTS["env"] = dict(
        torch=torch.__version__,
        triton=triton.__version__,
        device=torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu",
        target=TARGET,
    )
    log("env", json.dumps(RESULTS["env"]))
    ring = load("RSO_KERNELS_0523", "gdn_replayssm_spec_decode.py", "rso_0523_gdn_replayssm_spec_decode")
    fsg = load("RSO_KERNELS_0519", "fused_sigmoid_gating_recurrent.py", "rso_0519_fused_sigmoid_gating_recurrent")
    fold = load("RSO_KERNELS_0519", "gdn_replayssm_spec_fold.py", "rso_0519_gdn_replayssm_spec_fold")
    scatter = load("RSO_KERNELS_0519", "mamba_state_scatter_triton.py", "rso_0519_mamba_state_scatter_triton")
    if args.diagnose:
        diagnose(ring, args.diagnose)
        return 0
    if args.pairs:
        ok = True
        for N in (4,) if args.cpu_smoke else [int(n) for n in args.windows.split(",")]:
            try:
                result = ring_pair(
                    ring,
                    N=N,
                    B=2 if args.cpu_smoke else 8,
                    steps=2 if args.cpu_smoke else args.steps,
                    layers=2 if args.cpu_smoke else 4,
                    padded=1 if args.cpu_smoke else 2,
                )
            except Exception as err:  # a ring length the kernels refuse is a result
                result = dict(N=N, rings=[N, 2 * N], bitwise_equal=False, error=f"{type(err).__name__}: {err}")
            RESULTS["ring_pairs"].append(result)
            save()
            ok &= result["bitwise_equal"]
            log("pair", json.dumps(result))
        return 0 if ok else 1
    if args.batch:
        time_ring(ring, fsg, fold, scatter, batch=args.batch, path=args.path)
        return 0
    ok = True
    for ring_len, layers in ((16, 2), (64, 2)):
        started = time.monotonic()
        result = cycle(ring, fsg, ring_len=ring_len, steps=3 if args.cpu_smoke else args.steps, layers=layers)
        result["seconds"] = round(time.monotonic() - started, 1)
        RESULTS["cycle"].append(result)
        save()
        ok &= result["deterministic"]
        log(
            "cycle",
            json.dumps({k: v for k, v in result.items() if k != "per_step"}),
            "rms per step:",
            " ".join(f"{r['relative_rms']:.1e}" for r in result["per_step"]),
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
