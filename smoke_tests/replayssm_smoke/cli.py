"""`replayssm-smoke`: is speculative decoding on this SGLang server lossless, and how well does the draft do?

One run: probe the server (SGLang? speculation on?), generate greedily for every prompt, measure
acceptance per class (cross-checked with /metrics), re-score the outputs teacher-forced, compare token
ids with a reference server or a golden file, apply the model's thresholds, write report.json,
junit.xml and a plot, print a table. Exit 0: every gate passed; 1: a gate failed; 2: usage or
environment error (nothing is then reported as a pass).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from . import __version__, acceptance, exactness, golden, metrics, report, runner, server, thresholds
from .errors import SmokeEnvironmentError
from .prompts import load_prompts

EPILOG = """\
examples:
  replayssm-smoke --target http://node1:30000
  replayssm-smoke --target http://node1:30000 --reference http://node1:30001 --out smoke-node1
  replayssm-smoke --target http://ref:30000 --record golden.json      # record once, from a non-spec server
  replayssm-smoke --target http://node1:30000 --golden golden.json --json

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
    p.add_argument("--target", required=True, metavar="URL", help="the speculative SGLang server, http://HOST:PORT")
    side = p.add_mutually_exclusive_group()
    side.add_argument("--reference", metavar="URL", help="the same model served without speculation (parity, speedup)")
    side.add_argument("--golden", metavar="FILE", help="parity against outputs recorded earlier with --record")
    side.add_argument("--record", metavar="FILE",
                      help="only record the target's greedy outputs to FILE (speculation not required) and exit")
    p.add_argument("--prompts", action="append", metavar="FILE",
                   help="JSONL prompts replacing the built-in set (repeatable)")
    p.add_argument("--add-prompts", action="append", metavar="FILE", help="JSONL prompts added to the set (repeatable)")
    p.add_argument("--classes", metavar="A,B", help="run only these workload classes")
    p.add_argument("--max-new-tokens", type=int, default=128,
                   help="tokens per prompt where the prompt line sets none (default 128)")
    p.add_argument("--thresholds", metavar="FILE", help="per-model thresholds YAML (default: the built-in one)")
    p.add_argument("--out", default="smoke-report", metavar="DIR",
                   help="where report.json, junit.xml and accept_length.svg go (default ./smoke-report)")
    p.add_argument("--json", action="store_true", help="print report.json on stdout instead of the table")
    p.add_argument("--tie-margin", type=float, default=1e-3,
                   help="logprob gap under which a non-argmax token counts as a tie, not a failure (default 1e-3)")
    p.add_argument("--top-logprobs", type=int, default=5, help="top-k logprobs asked for when re-scoring (>= 2)")
    p.add_argument("--strict-parity", action="store_true", help="fail parity on any divergence, ties included")
    p.add_argument("--concurrency", type=int, default=1,
                   help="requests in flight (default 1: single-stream speed, batch-invariant parity)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per request (default 120)")
    p.add_argument("--deadline", type=float, default=900.0, help="seconds for the whole run (default 900)")
    p.add_argument("--wait", type=float, default=0.0, metavar="S",
                   help="wait up to S seconds for /health to answer 200 (default: check once)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    return p


def _validate(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.top_logprobs < 2:
        p.error("--top-logprobs must be at least 2")
    if args.concurrency < 1 or args.concurrency > 64:
        p.error("--concurrency must be in [1, 64]")
    if args.timeout <= 0 or args.deadline <= 0 or args.wait < 0 or args.tie_margin < 0:
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


def _gate(name: str, passed: bool | None, detail: str) -> dict:
    return {"name": name, "passed": passed, "detail": detail}


def _record(args, progress: Progress, prompts, deadline) -> dict:
    url = server.normalize_url(args.target)
    server.wait_healthy(url, args.wait, args.timeout, progress)
    info = server.probe(url, args.timeout)
    progress(f"recording {len(prompts)} prompts from {url} ({info.model_path}, "
             f"speculation {info.speculative_algorithm or 'off'})")
    gens = runner.run_all(prompts, lambda pr: runner.generate(url, pr, deadline), args.concurrency, progress, "generate")
    golden.write(args.record, info.summary(), gens)
    return {"recorded": args.record, "prompts": len(gens), "server": info.summary()}


def run(args, progress: Progress) -> dict:
    """The whole check; returns report.json's content (raises SmokeEnvironmentError for exit 2)."""
    prompts = load_prompts(args.prompts, args.add_prompts, args.max_new_tokens,
                           [c for c in args.classes.split(",") if c] if args.classes else None)
    th_source, profiles = thresholds.load_profiles(args.thresholds)
    deadline = runner.Deadline(args.deadline, args.timeout)

    url = server.normalize_url(args.target)
    server.wait_healthy(url, args.wait, args.timeout, progress)
    info = server.probe(url, args.timeout)
    server.require_speculative(info)
    profile = thresholds.select_profile(th_source, profiles, info.names, info.speculative_algorithm)
    profile = thresholds.check_classes(th_source, profile, {p.cls for p in prompts}, args.thresholds is not None)
    progress(f"target {url}: {info.model_path}, {info.speculative_algorithm} "
             f"(draft tokens {info.speculative_num_draft_tokens}), SGLang {info.version}; "
             f"thresholds profile {profile.name!r}; {len(prompts)} prompts")

    ref_info, reference_outputs, against = None, None, None
    if args.reference:
        ref_url = server.normalize_url(args.reference)
        server.wait_healthy(ref_url, args.wait, args.timeout, progress)
        ref_info = server.probe(ref_url, args.timeout)
        against = "reference"
    elif args.golden:
        golden_server, reference_outputs = golden.load(args.golden, prompts)
        against = "golden"

    before = metrics.snapshot(url, args.timeout)
    gens = runner.run_all(prompts, lambda pr: runner.generate(url, pr, deadline), args.concurrency, progress, "generate")
    after = metrics.snapshot(url, args.timeout) if before is not None else None
    info_after = server.probe(url, args.timeout)

    rows, per_class = acceptance.aggregate(gens, url)
    overall = acceptance.summarize(rows)
    acc = {cls: acceptance.gate(cls, stats, profile.acceptance.get(cls)) for cls, stats in per_class.items()}
    cross = metrics.cross_check(before, after, overall["token_weighted_accept_length"], profile.metrics_max_relative_diff)
    cross["server_info_avg_spec_accept_length"] = info_after.avg_spec_accept_length()

    tfs = runner.run_all(gens, lambda g: exactness.teacher_force(url, g, args.top_logprobs, args.tie_margin, deadline),
                         args.concurrency, progress, "teacher-force")
    tf_by_id = {t.prompt_id: t for t in tfs}
    tf_summary = exactness.teacher_forced_summary(tfs, args.tie_margin, args.top_logprobs)

    ref_gens = []
    if ref_info is not None:
        ref_gens = runner.run_all(prompts, lambda pr: runner.generate(ref_info.url, pr, deadline),
                                  args.concurrency, progress, "reference")
        reference_outputs = {g.prompt.id: (g.prompt_ids, g.output_ids) for g in ref_gens}
    if reference_outputs is not None:
        par = exactness.parity(gens, tf_by_id, reference_outputs, against, args.tie_margin, args.strict_parity)
    else:
        par = {"passed": None, "skipped": "no --reference or --golden given", "first_divergence": {}}

    target_tps = _p50([g.tokens_per_s for g in gens])
    ref_tps = _p50([g.tokens_per_s for g in ref_gens])
    gates = []
    for cls in sorted(acc):
        s = acc[cls]
        detail = "; ".join(s["failures"]) if s["failures"] else (
            f"mean {s['mean_accept_length']:.3f} over {s['requests']} requests" if s["passed"] else "no threshold for this class")
        gates.append(_gate(f"acceptance.{cls}", s["passed"], detail))
    gates.append(_gate("acceptance.metrics_cross_check", cross["passed"], cross["note"] or (
        f"relative diff {cross['relative_diff']:.4f} (max {cross['max_relative_diff']})"
        if cross["relative_diff"] is not None else "not gated")))
    gates.append(_gate("exactness.teacher_forced", tf_summary["passed"],
                       f"{len(tf_summary['violations'])} violation(s), {len(tf_summary['ties'])} tie(s) "
                       f"in {tf_summary['checked_tokens']} tokens"))
    gates.append(_gate("exactness.parity", par["passed"], par.get("skipped") or (
        f"{par['prompts_matching']}/{par['prompts']} identical; failing: {', '.join(par['failing']) or 'none'}; "
        f"diverged at a tie: {', '.join(par['diverged_at_tie']) or 'none'}")))
    passed = all(g["passed"] is not False for g in gates)
    return {
        "passed": passed,
        "exit_code": 0 if passed else 1,
        "target": info.summary(),
        "reference": ref_info.summary() if ref_info else None,
        "golden": {"path": args.golden, "server": golden_server} if args.golden else None,
        "thresholds": {"source": th_source, "profile": profile.name, "how_measured": profile.how_measured},
        "acceptance": acc,
        "acceptance_overall": overall,
        "metrics_cross_check": cross,
        "speed": {"concurrency": args.concurrency, "target_tokens_per_s_p50": target_tps,
                  "reference_tokens_per_s_p50": ref_tps,
                  "speedup": target_tps / ref_tps if target_tps and ref_tps else None},
        "exactness": {"tie_margin": args.tie_margin, "teacher_forced": tf_summary, "parity": par},
        "gates": gates,
        "requests": [
            {"prompt_id": r.prompt_id, "class": r.cls, "completion_tokens": r.completion_tokens,
             "spec_verify_ct": r.verify_ct, "accept_length": r.accept_length, "spec_accept_rate": r.accept_rate}
            for r in rows
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _validate(parser, args)
    progress = Progress(args.quiet)
    started = time.time()
    if args.record:
        try:
            prompts = load_prompts(args.prompts, args.add_prompts, args.max_new_tokens,
                                   [c for c in args.classes.split(",") if c] if args.classes else None)
            done = _record(args, progress, prompts, runner.Deadline(args.deadline, args.timeout))
        except SmokeEnvironmentError as exc:
            print(f"replayssm-smoke: error: {exc}", file=sys.stderr)
            return exc.exit_code
        print(json.dumps(done) if args.json else f"recorded {done['prompts']} prompts to {done['recorded']}")
        return 0
    try:
        body = run(args, progress)
    except SmokeEnvironmentError as exc:
        body = {"passed": False, "exit_code": exc.exit_code, "error": {"what": exc.what, "fix": exc.fix},
                "target": {"url": args.target}, "gates": []}
        if args.json:  # the table on stdout carries the message otherwise
            print(f"replayssm-smoke: error: {exc}", file=sys.stderr)
    doc = {"schema": report.SCHEMA, "tool_version": __version__,
           "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
           "duration_s": round(time.time() - started, 3), **body}
    try:
        written = report.write(args.out, doc)
        progress(f"wrote {', '.join(written)}")
    except OSError as exc:
        print(f"replayssm-smoke: error: cannot write the report to {args.out}: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(json.dumps(doc, indent=2) + "\n" if args.json else report.table(doc))
    return doc["exit_code"]


if __name__ == "__main__":
    sys.exit(main())
