"""`replayssm-smoke`: is speculative decoding on this SGLang server lossless, and how well does the draft do?

One run: probe the server (SGLang? speculation on?), generate greedily for every prompt, measure
acceptance per class (cross-checked with /metrics), re-score the outputs teacher-forced, compare token
ids with a reference server or a golden file, apply the model's thresholds, write report.json,
junit.xml and a plot (and, with --prom-out, the result as Prometheus text for a periodic job), print a
table. `--check-inputs` only validates the prompts and thresholds files (and the model's baseline) without
a server, as the deploy role does before it installs the periodic job. Exit 0: every gate passed (inputs
valid); 1: a gate failed; 2: usage or environment error (nothing is then reported as a pass).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from replayssm_overlay.cliutil import EXIT_OK, EXIT_USAGE, print_json
from replayssm_overlay.promtext import parse_labels

from . import (
    __version__,
    acceptance,
    exactness,
    gates,
    golden,
    metrics,
    parity_mode,
    prom,
    report,
    runner,
    server,
    thresholds,
)
from .errors import SmokeEnvironmentError
from .prompts import load_prompts

DEFAULT_TIE_MARGIN = 1e-3

EPILOG = """\
examples:
  replayssm-smoke --target http://node1:30000
  replayssm-smoke --target http://node1:30000 --reference http://node1:30001 --out smoke-node1
      # node1:30001 = the same command line without --enable-linear-replayssm-spec: strict parity
  replayssm-smoke --target http://ref:30000 --record golden.json      # record once, from a reference server
  replayssm-smoke --target http://node1:30000 --golden golden.json --json
  replayssm-smoke --target http://127.0.0.1:30000 --no-metrics-gate --prom-out /var/lib/node-exporter/smoke.prom
      # the periodic job on a serving node (deploy role sglang_monitor)
  replayssm-smoke --check-inputs --prompts mine.jsonl --thresholds t.yaml --model /models/Qwen3.5-35B-A3B \
      --algorithm DFLASH --require-baseline      # validate files, no server

exit codes: 0 every gate passed, 1 a gate failed, 2 usage or environment error
(unreachable or non-SGLang server, speculation off, malformed response, bad prompts/thresholds file).
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="replayssm-smoke",
        description="Measure acceptance and check exactness of speculative decoding on a live SGLang server.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument(
        "--target",
        metavar="URL",
        help="the speculative SGLang server, http://HOST:PORT (required unless --check-inputs)",
    )
    side = p.add_mutually_exclusive_group()
    side.add_argument(
        "--reference",
        metavar="URL",
        help="the same model served with the target's algorithm and ReplaySSM off (strict parity), "
        "or without speculation (tie-aware parity, speedup)",
    )
    side.add_argument("--golden", metavar="FILE", help="parity against outputs recorded earlier with --record")
    side.add_argument(
        "--record",
        metavar="FILE",
        help="only record the target's greedy outputs to FILE (speculation not required) and exit",
    )
    p.add_argument(
        "--prompts", action="append", metavar="FILE", help="JSONL prompts replacing the built-in set (repeatable)"
    )
    p.add_argument("--add-prompts", action="append", metavar="FILE", help="JSONL prompts added to the set (repeatable)")
    p.add_argument("--classes", metavar="A,B", help="run only these workload classes")
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=128,
        help="tokens per prompt where the prompt line sets none (default 128)",
    )
    p.add_argument("--thresholds", metavar="FILE", help="per-model thresholds YAML (default: the built-in one)")
    p.add_argument(
        "--out",
        default="smoke-report",
        metavar="DIR",
        help="where report.json, junit.xml and accept_length.svg go (default ./smoke-report)",
    )
    p.add_argument("--json", action="store_true", help="print report.json on stdout instead of the table")
    p.add_argument(
        "--tie-margin",
        type=float,
        default=None,
        help="logprob gap under which a non-argmax token counts as a tie, not a failure "
        f"(default: the thresholds profile's tie_margin, else {DEFAULT_TIE_MARGIN:g})",
    )
    p.add_argument("--top-logprobs", type=int, default=5, help="top-k logprobs asked for when re-scoring (>= 2)")
    p.add_argument(
        "--require-replayssm",
        action="store_true",
        help="error (exit 2) unless the target runs with --enable-linear-replayssm-spec",
    )
    p.add_argument(
        "--parity",
        choices=parity_mode.CHOICES,
        default="auto",
        help="strict: fail parity on any divergence; tie-aware: a divergence at a near-tie of the "
        "target's logprobs is reported, not failed; auto (default): strict when the reference "
        "runs the target's algorithm and draft length with ReplaySSM off, else tie-aware",
    )
    p.add_argument(
        "--strict-parity",
        dest="parity",
        action="store_const",
        const=parity_mode.STRICT,
        help="the same as --parity strict",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=1,
        help="requests in flight (default 1: single-stream speed, batch-invariant parity)",
    )
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per request (default 120)")
    p.add_argument("--deadline", type=float, default=900.0, help="seconds for the whole run (default 900)")
    p.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="S",
        help="wait up to S seconds for /health to answer 200 (default: check once)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    watch = p.add_argument_group("periodic runs (a job on a serving node, watched by Prometheus)")
    watch.add_argument(
        "--prom-out",
        metavar="FILE",
        help="also write the result as Prometheus text to FILE, atomically (node_exporter's "
        "textfile collector; name it *.prom); written on exit 1 and 2 too",
    )
    watch.add_argument(
        "--prom-label",
        action="append",
        metavar="KEY=VALUE",
        help="a label put on every --prom-out sample (repeatable), e.g. service=sglang-overlay",
    )
    watch.add_argument(
        "--no-metrics-gate",
        action="store_true",
        help="report the /metrics cross-check without gating on it (on a node that serves traffic "
        "the server-wide counters move with every other request)",
    )
    check = p.add_argument_group("--check-inputs: validate the files, contact no server")
    check.add_argument(
        "--check-inputs",
        action="store_true",
        help="parse the prompts and the thresholds, pick the profile for --model, and exit",
    )
    check.add_argument(
        "--model",
        action="append",
        metavar="NAME",
        help="model path or served name to pick the profile for (repeatable)",
    )
    check.add_argument("--algorithm", metavar="NAME", help="speculative algorithm to pick the profile for")
    check.add_argument(
        "--require-baseline",
        action="store_true",
        help="error unless the profile has a baseline_accept_length for every class with prompts",
    )
    return p


def _validate(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not args.target and not args.check_inputs:
        p.error("--target is required (unless --check-inputs)")
    if args.prom_out and (args.record or args.check_inputs):
        p.error("--prom-out goes with a smoke run, not with --record or --check-inputs")
    if (args.model or args.algorithm or args.require_baseline) and not args.check_inputs:
        p.error("--model, --algorithm and --require-baseline go with --check-inputs")
    if args.require_baseline and not args.model:
        p.error("--require-baseline needs --model (the baseline is the model's profile's)")
    try:
        args.prom_labels = parse_labels(args.prom_label)
    except ValueError as exc:
        p.error(f"--prom-label {exc}")
    if args.top_logprobs < 2:
        p.error("--top-logprobs must be at least 2")
    if args.concurrency < 1 or args.concurrency > 64:
        p.error("--concurrency must be in [1, 64]")
    if args.timeout <= 0 or args.deadline <= 0 or args.wait < 0 or (args.tie_margin or 0) < 0:
        p.error("--timeout and --deadline must be positive, --wait and --tie-margin not negative")
    if not 2 <= args.max_new_tokens <= 4096:
        p.error("--max-new-tokens must be in [2, 4096]")


class Progress:
    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.t0 = time.monotonic()

    def __call__(self, msg: str) -> None:
        if not self.quiet:
            print(f"[smoke {time.monotonic() - self.t0:6.1f}s] {msg}", file=sys.stderr, flush=True)


def _p50(values: list) -> float | None:
    values = [v for v in values if v]
    return acceptance.percentile(values, 50) if values else None


def _load_prompts(args):
    classes = [c for c in args.classes.split(",") if c] if args.classes else None
    return load_prompts(args.prompts, args.add_prompts, args.max_new_tokens, classes)


def _connect(url: str, args, progress: Progress) -> server.ServerInfo:
    url = server.normalize_url(url)
    server.wait_healthy(url, args.wait, args.timeout, progress)
    return server.probe(url, args.timeout)


def _generate_all(url: str, prompts, args, deadline, progress: Progress, label: str) -> list[runner.Generation]:
    return runner.run_all(prompts, lambda pr: runner.generate(url, pr, deadline), args.concurrency, progress, label)


def _notes(args, info: server.ServerInfo) -> list[str]:
    notes = []
    if not info.replayssm_spec:
        notes.append(
            "the target does not report enable_linear_replayssm_spec: this checks speculation without "
            "ReplaySSM spec-verify (--require-replayssm makes that an error)"
        )
    if args.concurrency > 1:
        notes.append(
            f"concurrency {args.concurrency}: tokens/s is not single-stream, and batching can move "
            "argmax ties (parity is exact only one request at a time or with --enable-deterministic-inference)"
        )
    return notes


def _side_notes(side: str, other: dict, info: server.ServerInfo) -> list[str]:
    notes = []
    if other.get("speculative_algorithm") and not parity_mode.same_algorithm_replayssm_off(info.summary(), other):
        notes.append(
            f"the {side} ran with speculation ({other['speculative_algorithm']}, ReplaySSM "
            f"{'on' if other.get('enable_linear_replayssm_spec') else 'off'}) but not as the target with "
            "ReplaySSM off: parity compares two different speculative runs"
        )
    if other.get("model_path") and other["model_path"] != info.model_path:
        notes.append(f"the {side} served {other['model_path']}, the target {info.model_path}")
    return notes


def record(args, progress: Progress) -> dict:
    """--record: the target's greedy outputs to a golden file (speculation not required)."""
    prompts = _load_prompts(args)
    info = _connect(args.target, args, progress)
    progress(
        f"recording {len(prompts)} prompts from {info.url} ({info.model_path}, "
        f"speculation {info.speculative_algorithm or 'off'})"
    )
    gens = _generate_all(info.url, prompts, args, runner.Deadline(args.deadline, args.timeout), progress, "generate")
    golden.write(args.record, info.summary(), gens)
    return {"recorded": args.record, "prompts": len(gens), "server": info.summary()}


def check_inputs(args) -> dict:
    """--check-inputs: the prompts and thresholds parse, and (with --model) the profile the model gets,
    with a baseline for every class when --require-baseline; raises SmokeEnvironmentError otherwise."""
    prompts = _load_prompts(args)
    classes = {p.cls for p in prompts}
    th_source, profiles = thresholds.load_profiles(args.thresholds)
    result = {"prompts": len(prompts), "classes": sorted(classes), "thresholds": th_source, "profile": None}
    if args.model:
        names = [*args.model, *(m.rstrip("/").rsplit("/", 1)[-1] for m in args.model)]
        profile = thresholds.select_profile(th_source, profiles, names, args.algorithm)
        profile = thresholds.check_classes(th_source, profile, classes, args.thresholds is not None)
        if args.require_baseline:
            thresholds.require_baseline(th_source, profile, classes, args.model[0])
        result.update(profile=profile.name, baseline_accept_length=profile.baseline_accept_length)
    return result


def run(args, progress: Progress) -> dict:
    """The whole check; returns report.json's body (`report.finished_run`; raises SmokeEnvironmentError
    for exit 2).

    Everything that can be refused (files, servers, golden recording) is checked before the first
    generation request.
    """
    prompts = _load_prompts(args)
    th_source, profiles = thresholds.load_profiles(args.thresholds)
    deadline = runner.Deadline(args.deadline, args.timeout)
    info = _connect(args.target, args, progress)
    url = info.url
    server.require_speculative(info)
    if args.require_replayssm and not info.replayssm_spec:
        raise SmokeEnvironmentError(
            f"{url} does not run ReplaySSM spec-verify (enable_linear_replayssm_spec is {info.replayssm_spec!r})",
            "start it with --enable-linear-replayssm-spec",
        )
    profile = thresholds.select_profile(th_source, profiles, info.names, info.speculative_algorithm)
    profile = thresholds.check_classes(th_source, profile, {p.cls for p in prompts}, args.thresholds is not None)
    progress(
        f"target {url}: {info.model_path}, {info.speculative_algorithm} "
        f"(draft tokens {info.speculative_num_draft_tokens}), SGLang {info.version}; "
        f"thresholds profile {profile.name!r}; {len(prompts)} prompts"
    )

    notes = _notes(args, info)
    ref_info, reference_outputs, golden_info = None, None, None
    if args.reference:
        ref_info = _connect(args.reference, args, progress)
        notes += _side_notes("reference", ref_info.summary(), info)
    elif args.golden:
        golden_server, reference_outputs = golden.load(args.golden, prompts)
        golden_info = {"path": args.golden, "server": golden_server}
        notes += _side_notes("golden file", golden_server, info)

    before = metrics.snapshot(url, args.timeout)
    gens = _generate_all(url, prompts, args, deadline, progress, "generate")
    after = metrics.snapshot(url, args.timeout) if before is not None else None
    rows, per_class = acceptance.aggregate(gens, url)
    overall = acceptance.summarize(rows)
    acc = {cls: acceptance.gate(cls, stats, profile.acceptance.get(cls)) for cls, stats in per_class.items()}
    cross = metrics.cross_check(
        before,
        after,
        overall["token_weighted_accept_length"],
        None if args.no_metrics_gate else profile.metrics_max_relative_diff,
    )
    cross["server_info_avg_spec_accept_length"] = server.probe(url, args.timeout).avg_spec_accept_length()

    if args.tie_margin is not None:
        tie_margin, tie_source = args.tie_margin, "--tie-margin"
    elif profile.tie_margin is not None:
        tie_margin, tie_source = profile.tie_margin, f"profile {profile.name}"
    else:
        tie_margin, tie_source = DEFAULT_TIE_MARGIN, "default"
    tfs = runner.run_all(
        gens,
        lambda g: exactness.teacher_force(url, g, args.top_logprobs, tie_margin, deadline),
        args.concurrency,
        progress,
        "teacher-force",
    )
    tf_summary = exactness.teacher_forced_summary(tfs, tie_margin, args.top_logprobs)

    ref_gens = _generate_all(ref_info.url, prompts, args, deadline, progress, "reference") if ref_info else []
    if ref_gens:
        reference_outputs = {g.prompt.id: (g.prompt_ids, g.output_ids) for g in ref_gens}
    if reference_outputs is not None:
        reference_server = ref_info.summary() if ref_info else golden_info["server"]
        mode, mode_reason = parity_mode.choose(args.parity, info.summary(), reference_server)
        par = exactness.parity(
            gens,
            {t.prompt_id: t for t in tfs},
            reference_outputs,
            "reference" if ref_info else "golden",
            tie_margin,
            mode == parity_mode.STRICT,
        )
        par["mode"], par["mode_reason"] = mode, mode_reason
    else:
        par = {"passed": None, "skipped": "no --reference or --golden given", "first_divergence": {}}

    return report.finished_run(
        info=info,
        ref_info=ref_info,
        golden_info=golden_info,
        th_source=th_source,
        profile=profile,
        notes=notes,
        acceptance=acc,
        acceptance_overall=overall,
        cross=cross,
        concurrency=args.concurrency,
        target_tps=_p50([g.tokens_per_s for g in gens]),
        ref_tps=_p50([g.tokens_per_s for g in ref_gens]),
        tie_margin=tie_margin,
        tie_source=tie_source,
        teacher_forced=tf_summary,
        parity=par,
        verdict=gates.collect(acc, cross, tf_summary, par),
        rows=rows,
        gens=gens,
    )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _validate(parser, args)
    progress = Progress(args.quiet)
    started = time.time()
    if args.check_inputs:
        return _one_shot(args, lambda: check_inputs(args), lambda done: _describe_inputs(args, done))
    if args.record:
        return _one_shot(
            args,
            lambda: record(args, progress),
            lambda done: f"recorded {done['prompts']} prompts to {done['recorded']}",
        )
    try:
        body = run(args, progress)
    except KeyboardInterrupt:
        print("replayssm-smoke: interrupted, no report written", file=sys.stderr)
        return 130
    except SmokeEnvironmentError as exc:
        body = report.stopped_run(exc, args.target)
        if args.json:  # the table on stdout carries the message otherwise
            print(f"replayssm-smoke: error: {exc}", file=sys.stderr)
    finished = time.time()
    doc = report.document(body, started, finished)
    if body.get("error") and not os.path.isdir(args.out):
        # a run stopped by its environment (an unreachable target, say) creates no folder; an existing one
        # gets the error report, so an older report there can never read as this run's pass
        print(
            f"replayssm-smoke: no report written: {args.out} does not exist and the run stopped before a verdict",
            file=sys.stderr,
        )
    else:
        try:
            written = report.write(args.out, doc)
            progress(f"wrote {', '.join(written)}")
        except OSError as exc:
            print(f"replayssm-smoke: error: cannot write the report to {args.out}: {exc}", file=sys.stderr)
            return EXIT_USAGE
    if args.prom_out:  # written on every outcome: a stopped run must read as a failure, never as stale data
        try:
            prom.write(args.prom_out, doc, finished, args.prom_labels)
            progress(f"wrote {args.prom_out}")
        except OSError as exc:
            print(f"replayssm-smoke: error: cannot write --prom-out {args.prom_out}: {exc}", file=sys.stderr)
            return EXIT_USAGE
    if args.json:
        print_json(doc, sort_keys=False)
    else:
        sys.stdout.write(report.table(doc))
    return doc["exit_code"]


def _one_shot(args, action, describe) -> int:
    """--record and --check-inputs: `action()`'s result as JSON or `describe(result)`, exit 0; an error, exit 2."""
    try:
        done = action()
    except SmokeEnvironmentError as exc:
        print(f"replayssm-smoke: error: {exc}", file=sys.stderr)
        if args.json:
            print_json({"ok": False, "error": exc.what, "fix": exc.fix, "code": exc.code}, sort_keys=False)
        return exc.exit_code
    if args.json:
        print_json(done, sort_keys=False, indent=None)
    else:
        print(describe(done))
    return EXIT_OK


def _describe_inputs(args, done: dict) -> str:
    chosen = (
        (
            f"; profile {done['profile']!r} for {args.model[0]}, baseline for "
            f"{', '.join(sorted(done['baseline_accept_length'])) or 'no class'}"
        )
        if done["profile"]
        else ""
    )
    return (
        f"inputs OK: {done['prompts']} prompts in classes {', '.join(done['classes'])}; "
        f"thresholds {done['thresholds']}{chosen}"
    )


if __name__ == "__main__":
    sys.exit(main())
