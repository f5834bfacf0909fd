"""`replayssm-overlay plan`: the flags in, one plan out (a table, or JSON), exit 0 / 1 (refused) / 2 (bad input).

The plan refuses (exit 1, the plan still printed) a ring that is too short for the window on a ring release
(the rule the server's configurator enforces, `hooks.ring_fit`) and, with `--max-running-requests`, a mamba
pool that cannot hold that many requests with ReplaySSM on. Bad input (exit 2) prints the field or flag and
the fix, and computes nothing.
"""

from __future__ import annotations

import argparse
import sys

from replayssm_overlay.cliutil import EXIT_CHECK_FAILED, EXIT_OK, HelpFormatter, print_json
from replayssm_overlay.hooks import ring_fit
from replayssm_overlay.patcher.releases import SUPPORTED_RELEASES
from replayssm_overlay.plan import fit, model, state_bytes
from replayssm_overlay.plan.errors import PlanInputError

ALGORITHMS = ("DFLASH", "DSPARK")
MIN_WINDOW = 2  # DFLASH: a block of one drafts nothing; DSPARK: N = gamma + 1 with gamma >= 1
MB, GB = 10**6, 10**9

EXAMPLES = """examples:
  # Qwen3-Next-80B-A3B, TP 4, DFLASH block 16 on 0.5.23 (ring of 32), H100s:
  replayssm-overlay plan --model /models/Qwen3-Next-80B-A3B-Instruct \\
      --release 0.5.23 --tp 4 --algorithm DFLASH --window 16 --ring-len 32 \\
      --gpu-memory-gib 80 --mem-fraction-static 0.85 \\
      --weights /models/Qwen3-Next-80B-A3B-Instruct
  # Qwen3.5-35B-A3B, TP 1, DSPARK gamma 7 (window 8) on 0.5.19, bytes only:
  replayssm-overlay plan --model /models/Qwen3.5-35B-A3B/config.json \\
      --release 0.5.19 --algorithm DSPARK --window 8
  # Qwen3.5-397B-A17B, TP 8, on 0.5.21, JSON, refusing fewer than 64 requests:
  replayssm-overlay plan --model /models/Qwen3.5-397B-A17B --release 0.5.21 \\
      --tp 8 --algorithm DFLASH --window 16 --ring-len 32 --json \\
      --gpu-memory-gib 141 --weights-gib 750 --mem-fraction-static 0.88 \\
      --max-running-requests 64"""

SCHEMA = """--json prints one object: ok (false when refused), refusals[], model{name, path, model_type,
gdn_layers}, release, protocol (fold: 0.5.19's window per slot | ring), tp, dp, attn_tp, algorithm, window,
ring_len, smallest_ring, ring_fits (null on 0.5.19: its GDN window is the verify window), mamba_ssm_dtype,
per_request_bytes{off, on} (one state slot + the verify buffers), ratio, requests_per_gb{off, on},
buffers{off, on}{slot, request}{buffer: bytes}, fit (null without --gpu-memory-gib){gpu_memory_gib,
weights_gib_per_gpu, mem_fraction_static, mamba_full_memory_ratio, mamba_pool_bytes, slots_per_request,
requests{off, on}, max_running_requests, holds}."""


def register(sub) -> None:
    """Add the `plan` subcommand."""
    cmd = sub.add_parser(
        "plan",
        formatter_class=HelpFormatter,
        help="per GPU: speculative state per running request with ReplaySSM off and on, and how many fit",
        description="From a hybrid GDN model's config.json, the SGLang release and the serving flags, print "
        "per GPU the speculative state one running request needs with ReplaySSM spec-verify off and on, "
        "their ratio and the smallest valid ring, and, given the GPU memory and the weights, how many "
        "requests the mamba pool holds either way. Needs no GPU, SGLang or torch: the bytes are the pool "
        "layout of each release (tests hold them equal to SGLang's own pool builder). Exit 0: planned; 1: "
        "refused (a ring too short for the window, or fewer requests fit than --max-running-requests); 2: "
        "bad input, nothing computed.",
        epilog=EXAMPLES + "\n\n" + SCHEMA,
    )
    cmd.add_argument(
        "--model",
        required=True,
        metavar="PATH",
        help="the model folder or its config.json (-: the config.json on stdin)",
    )
    cmd.add_argument("--model-name", metavar="NAME", help="the name the plan shows (default: the folder's name)")
    cmd.add_argument(
        "--release", required=True, metavar="X.Y.Z", help="the SGLang release served: " + ", ".join(SUPPORTED_RELEASES)
    )
    cmd.add_argument("--tp", type=int, default=1, metavar="N", help="--tp-size of the server")
    cmd.add_argument(
        "--dp", type=int, default=1, metavar="N", help="--dp-size with --enable-dp-attention (attention TP is tp / dp)"
    )
    cmd.add_argument(
        "--algorithm",
        required=True,
        type=str.upper,
        metavar="NAME",
        help="--speculative-algorithm: " + " or ".join(ALGORITHMS),
    )
    cmd.add_argument(
        "--window",
        required=True,
        type=int,
        metavar="N",
        help="the verify window N = --speculative-num-draft-tokens (DFLASH: the block size; DSPARK: gamma + 1)",
    )
    cmd.add_argument(
        "--ring-len", type=int, default=16, metavar="L", help="--linear-replayssm-cache-len (SGLang's default 16)"
    )
    cmd.add_argument(
        "--mamba-ssm-dtype",
        choices=tuple(model.SSM_DTYPE_BYTES),
        default=None,
        help="--mamba-ssm-dtype (default: the config.json's mamba_ssm_dtype, else float32)",
    )
    cmd.add_argument(
        "--gpu-memory-gib", type=float, metavar="GIB", help="memory of one GPU, in GiB (default: none: no fit)"
    )
    weights = cmd.add_mutually_exclusive_group()
    weights.add_argument(
        "--weights",
        action="append",
        metavar="PATH",
        help="the weights (a model folder or its *.safetensors.index.json; repeat for the "
        "draft model); split evenly over the TP ranks (default: none)",
    )
    weights.add_argument(
        "--weights-gib", type=float, metavar="GIB", help="the weights' total size, in GiB (default: none)"
    )
    cmd.add_argument("--mem-fraction-static", type=float, default=0.85, metavar="F", help="--mem-fraction-static")
    cmd.add_argument(
        "--mamba-full-memory-ratio",
        type=float,
        default=fit.MAMBA_FULL_MEMORY_RATIO,
        metavar="R",
        help="--mamba-full-memory-ratio",
    )
    cmd.add_argument(
        "--mamba-radix-cache-strategy",
        choices=tuple(fit.EXTRA_SLOTS),
        default="no_buffer",
        metavar="NAME",
        help="--mamba-radix-cache-strategy: "
        + ", ".join(fit.EXTRA_SLOTS)
        + " (state slots per request: 3, +2 extra_buffer, +1 extra_buffer_lazy)",
    )
    cmd.add_argument("--disable-radix-cache", action="store_true", help="--disable-radix-cache (1 slot a request)")
    cmd.add_argument(
        "--max-running-requests",
        type=int,
        metavar="N",
        help="refuse (exit 1) when fewer requests fit with ReplaySSM on (needs --gpu-memory-gib; "
        "default: none, no refusal)",
    )
    cmd.add_argument("--json", action="store_true", help="print one JSON object on stdout instead of the table")
    cmd.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    plan = make_plan(args)
    if args.json:
        print_json(plan)
    else:
        print(table(plan))
    return EXIT_OK if plan["ok"] else EXIT_CHECK_FAILED


def _check_inputs(args) -> int:
    """PlanInputError for a flag the plan cannot use; the attention TP otherwise."""
    if args.release not in SUPPORTED_RELEASES:
        raise PlanInputError(
            f"--release {args.release}: SGLang {args.release} is not a release the overlay supports",
            "pass one of " + ", ".join(SUPPORTED_RELEASES),
        )
    if args.algorithm not in ALGORITHMS:
        raise PlanInputError(
            f"--algorithm {args.algorithm}: the overlay serves ReplaySSM spec-verify for "
            + " and ".join(ALGORITHMS)
            + " only",
            "pass --algorithm DFLASH or DSPARK",
        )
    if args.window < MIN_WINDOW:
        raise PlanInputError(
            f"--window {args.window}: {args.algorithm} verifies at least {MIN_WINDOW} tokens (DFLASH: its block "
            "size; DSPARK: gamma + 1)",
            f"pass the server's --speculative-num-draft-tokens (>= {MIN_WINDOW})",
        )
    if args.ring_len < 1 or args.ring_len & (args.ring_len - 1):
        raise PlanInputError(
            f"--ring-len {args.ring_len}: {ring_fit.RING_FLAG} must be a power of two (SGLang's "
            "GDN ring kernels assert it)",
            f"pass {ring_fit.smallest_ring(max(args.window, 1))}, the smallest valid length for a "
            f"window of {args.window}",
        )
    if args.tp < 1 or args.dp < 1 or args.tp % args.dp:
        raise PlanInputError(
            f"--tp {args.tp} --dp {args.dp}: the DP size must divide the TP size (attention TP is tp / dp)",
            "pass a --dp that divides --tp (1 without DP attention)",
        )
    if not 0 < args.mem_fraction_static < 1:
        raise PlanInputError(
            f"--mem-fraction-static {args.mem_fraction_static} is not between 0 and 1",
            "pass the server's --mem-fraction-static, e.g. 0.85",
        )
    if args.mamba_full_memory_ratio <= 0:
        raise PlanInputError(
            f"--mamba-full-memory-ratio {args.mamba_full_memory_ratio} is not positive",
            "pass the server's value (SGLang's default 0.9)",
        )
    has_weights = args.weights or args.weights_gib is not None
    if (args.gpu_memory_gib is None) != (not has_weights):
        raise PlanInputError(
            "--gpu-memory-gib and --weights / --weights-gib go together",
            "pass both to see how many requests fit, or neither",
        )
    if args.gpu_memory_gib is not None and args.gpu_memory_gib <= 0:
        raise PlanInputError(f"--gpu-memory-gib {args.gpu_memory_gib} is not positive", "pass one GPU's memory")
    if args.weights_gib is not None and args.weights_gib < 0:
        raise PlanInputError(f"--weights-gib {args.weights_gib} is negative", "pass the weights' total size")
    if args.max_running_requests is not None and (args.max_running_requests < 1 or args.gpu_memory_gib is None):
        raise PlanInputError(
            "--max-running-requests needs a positive count and --gpu-memory-gib with the weights",
            "pass --gpu-memory-gib and --weights (or --weights-gib) too",
        )
    return args.tp // args.dp


def make_plan(args) -> dict:
    """The plan as a dict (the JSON document); PlanInputError on bad input."""
    attn_tp = _check_inputs(args)
    gdn = model.load(args.model, sys.stdin)
    ssm_dtype = args.mamba_ssm_dtype or gdn.mamba_ssm_dtype or "float32"
    rank = state_bytes.Rank.of(gdn, attn_tp, ssm_dtype)
    layouts = {
        side: state_bytes.buffers(
            rank, release=args.release, window=args.window, ring_len=args.ring_len, replayssm=side == "on"
        )
        for side in ("off", "on")
    }
    per_request = {side: state_bytes.per_request(layout) for side, layout in layouts.items()}
    protocol = state_bytes.protocol(args.release)
    ring_fits = ring_fit.fits(args.window, args.ring_len) if protocol == state_bytes.RING else None
    refusals = []
    if ring_fits is False:
        refusals.append(
            f"{ring_fit.RING_FLAG} {args.ring_len} does not fit a verify window of {args.window} on "
            f"SGLang {args.release}: set {ring_fit.RING_FLAG} {ring_fit.smallest_ring(args.window)}"
        )
    plan = {
        "model": {
            "name": args.model_name or gdn.name,
            "path": gdn.path,
            "model_type": gdn.model_type,
            "gdn_layers": gdn.gdn_layers,
        },
        "release": args.release,
        "protocol": protocol,
        "tp": args.tp,
        "dp": args.dp,
        "attn_tp": attn_tp,
        "algorithm": args.algorithm,
        "window": args.window,
        "ring_len": args.ring_len,
        "smallest_ring": ring_fit.smallest_ring(args.window),
        "ring_fits": ring_fits,
        "mamba_ssm_dtype": ssm_dtype,
        "per_request_bytes": per_request,
        "ratio": round(per_request["off"] / per_request["on"], 2),
        "requests_per_gb": {side: round(GB / size, 2) for side, size in per_request.items()},
        "buffers": layouts,
        "fit": _fit(args, layouts, refusals),
    }
    plan["refusals"] = refusals
    plan["ok"] = not refusals
    return plan


def _fit(args, layouts: dict, refusals: list) -> dict | None:
    if args.gpu_memory_gib is None:
        return None
    total = (
        int(args.weights_gib * fit.GIB)
        if args.weights_gib is not None
        else sum(fit.weights_bytes(path) for path in args.weights)
    )
    budget = fit.Budget(
        int(args.gpu_memory_gib * fit.GIB), total // args.tp, args.mem_fraction_static, args.mamba_full_memory_ratio
    )
    budget.check()
    slots = fit.slots_per_request(args.mamba_radix_cache_strategy, args.disable_radix_cache)
    requests = {side: budget.requests(state_bytes.per_request(layout, slots)) for side, layout in layouts.items()}
    wanted = args.max_running_requests
    holds = None if wanted is None else requests["on"] >= wanted
    if holds is False:
        refusals.append(
            f"the mamba pool holds {requests['on']} running requests with ReplaySSM on ({budget.mamba_bytes / GB:.1f} "
            f"GB, {slots} state slots a request), fewer than --max-running-requests {wanted}: lower "
            f"--max-running-requests to {requests['on']}, or raise --mem-fraction-static or "
            "--mamba-full-memory-ratio, or use more TP ranks"
        )
    return {
        **budget.describe(),
        "slots_per_request": slots,
        "requests": requests,
        "max_running_requests": wanted,
        "holds": holds,
    }


def table(plan: dict) -> str:
    """The plan for people: one header line, a table of off/on, the refusals."""
    ring = (
        f"ring {plan['ring_len']} (smallest valid {plan['smallest_ring']})"
        if plan["protocol"] == "ring"
        else f"window of {plan['window']} rows per slot (0.5.19 sizes it to the verify window)"
    )
    lines = [
        f"{plan['model']['name']} ({plan['model']['gdn_layers']} GDN layers) on SGLang {plan['release']}, "
        f"TP {plan['tp']} (attention TP {plan['attn_tp']}), {plan['algorithm']} window {plan['window']},",
        f"{ring}, SSM state {plan['mamba_ssm_dtype']}; per GPU:",
    ]
    rows = [("", "ReplaySSM off", "ReplaySSM on")]
    per = plan["per_request_bytes"]
    rows.append(("per running request", _mb(per["off"]), _mb(per["on"])))
    for kind, label in (("slot", "  state slot"), ("request", "  verify buffers")):
        rows.append((label, *(_mb(sum(plan["buffers"][side][kind].values())) for side in ("off", "on"))))
    rows.append(("requests per GB", *(f"{plan['requests_per_gb'][side]:.2f}" for side in ("off", "on"))))
    if plan["fit"]:
        f = plan["fit"]
        rows.append(
            (
                f"requests that fit ({f['slots_per_request']} slots each)",
                *(str(f["requests"][side]) for side in ("off", "on")),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines += [
        "  " + row[0].ljust(widths[0]) + "  " + "  ".join(c.rjust(w) for c, w in zip(row[1:], widths[1:]))
        for row in rows
    ]
    lines.append(f"  ratio off/on: {plan['ratio']:.2f}x")
    if plan["fit"]:
        f = plan["fit"]
        ratio = f["mamba_full_memory_ratio"]
        lines.append(
            f"  mamba pool: {f['mamba_pool_bytes'] / GB:.2f} GB = ({f['gpu_memory_gib']} GiB x "
            f"{f['mem_fraction_static']} - {f['weights_gib_per_gpu']} GiB weights) x {ratio}/{1 + ratio:g}"
        )
        lines.append("  (an upper bound: the CUDA context, activations and graphs are not counted)")
    lines += [f"REFUSED: {reason}" for reason in plan["refusals"]]
    return "\n".join(lines)


def _mb(size: int) -> str:
    return f"{size / MB:.1f} MB"
