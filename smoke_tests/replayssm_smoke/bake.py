"""The canary bake on live traffic, run by the rollout on the controller: `measure` reads /metrics of the
canary and of the nodes still on the old release at the bake's start and end, `judge` turns those readings
(and the overlay's facts of both) into a verdict, a side-by-side table and a JSON file; `check` refuses bad
settings before a rollout changes anything.

    python -m replayssm_smoke.bake check --seconds 300 --poll 15 --model /models/Qwen3.5-35B-A3B ...
    python -m replayssm_smoke.bake measure --canary node1=http://10.0.0.1:30000 --old node2=http://... \\
        --seconds 300 --poll 15 --min-requests 100 --max-wait 300 --out readings.json
    python -m replayssm_smoke.bake judge --readings readings.json --model ... --out bake.json

Why two steps: the overlay's facts come from inside each node's container (the rollout asks for them between
the steps), the numbers from the nodes' /metrics, which the controller reaches as the router does, so no
Prometheus is needed; with --prometheus URL they come from the operator's Prometheus over the same instants
(bake_prometheus says how), and from the nodes' /metrics when it fails by then (the result names its source).
`measure` reads again every --poll seconds after --seconds until the canary has served --min-requests, at most
--max-wait seconds more (too little traffic: `judge` says no verdict). Exit codes: 0 promote (check: inputs
valid), 1 fail or no verdict, 2 bad input (check: a named Prometheus that does not answer, or scrapes less
often than the bake lasts) or a node whose /metrics cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from replayssm_overlay.cliutil import EXIT_CHECK_FAILED, EXIT_OK, atomic_write_json

from . import bake_prometheus, bake_rows, httpclient, thresholds
from .errors import SmokeEnvironmentError

READ_TIMEOUT_S = 10.0


def _node(value: str) -> tuple[str, str]:
    name, sep, url = value.partition("=")
    if not (sep and name and url.startswith(("http://", "https://"))):
        raise argparse.ArgumentTypeError(f"{value!r} is not NAME=http://host:port")
    return name, url.rstrip("/")


def _fraction(value: str) -> float:
    number = float(value)
    if not 0.0 <= number < 1.0:
        raise argparse.ArgumentTypeError(
            f"{value} is not a fraction in [0, 1): a tolerance of 1 or more passes "
            "anything, a negative one asks the canary to beat the old nodes"
        )
    return number


def _non_negative(value: str) -> float:
    number = float(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative: the canary would have to beat the old nodes")
    return number


def _count(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value} is not a whole number") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return number


def baselines(model: list[str], algorithm: str | None, path: str | None) -> dict[str, float]:
    """The model's baseline accept lengths by request class (its profile's `baseline_accept_length`)."""
    source, profiles = thresholds.load_profiles(path)
    profile = thresholds.select_profile(source, profiles, model, algorithm)
    if not profile.baseline_accept_length:
        raise SmokeEnvironmentError(
            f"{source}: profile {profile.name!r} (model {model[0]!r}) has no baseline_accept_length: the bake "
            "compares the canary's acceptance with it",
            "add baseline_accept_length: {<class>: <value>, ...} to that profile (measured on a node known to be "
            "good), or name a thresholds file (sglang_bake_thresholds) whose profile for this model has one",
        )
    return dict(profile.baseline_accept_length)


def _read(nodes: list[tuple[str, str]]) -> dict[str, dict]:
    readings = {}
    for name, url in nodes:
        try:
            readings[name] = bake_rows.reading(httpclient.get_text(url + "/metrics", READ_TIMEOUT_S))
        except SmokeEnvironmentError as exc:
            raise SmokeEnvironmentError(
                f"{name}: cannot read {url}/metrics for the bake: {exc.what}",
                "start SGLang with --enable-metrics (sglang_flags) and check that the "
                "controller reaches the node as the router does",
            ) from None
    return readings


def measure(args) -> dict:
    """Readings at the start and at the end of the bake; the end waits for --min-requests on the canary. The
    nodes' /metrics are read at both ends always, so a Prometheus (--prometheus) that fails by the end leaves
    numbers to judge: then the readings say which source they come from."""
    canary, old = args.canary, args.old or []
    started = time.time()
    start = _read([canary, *old])
    time.sleep(args.seconds)
    while True:
        end = _read([canary, *old])
        ended = time.time()
        served = end[canary[0]]["counters"]["requests"] - start[canary[0]]["counters"]["requests"]
        waited = ended - started - args.seconds
        if served >= args.min_requests or waited + args.poll > args.max_wait:
            break
        time.sleep(args.poll)
    source = "the nodes' /metrics"
    if args.prometheus:
        prometheus = bake_prometheus.Prometheus(args.prometheus, args.prometheus_job)
        try:
            start, end = prometheus.readings([canary, *old], started, ended)
            source = f"Prometheus {prometheus.url} (job {prometheus.job})"
        except bake_prometheus.PrometheusUnusable as exc:
            source += f", as {exc.what}"
    return {
        "canary": canary[0],
        "old": [name for name, _ in old],
        "seconds": args.seconds,
        "waited_s": round(max(0.0, waited), 1),
        "min_requests": args.min_requests,
        "started": started,
        "ended": ended,
        "source": source,
        "start": start,
        "end": end,
    }


def _overlay(path: str | None) -> dict | None:
    if not path:
        return None
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def judge(args) -> dict:
    """The verdict of a `measure` readings file: rows, table, verdict."""
    doc = json.loads(Path(args.readings).read_text())
    canary = bake_rows.window(doc["start"][doc["canary"]], doc["end"][doc["canary"]])
    old = None
    if doc["old"]:
        old = bake_rows.window(
            bake_rows.combined([doc["start"][n] for n in doc["old"]]),
            bake_rows.combined([doc["end"][n] for n in doc["old"]]),
        )
    tol = bake_rows.Tolerances(
        accept=args.accept_tolerance,
        aborted=args.aborted_tolerance,
        latency=args.latency_tolerance,
        baseline_fraction=args.baseline_fraction,
        min_requests=doc["min_requests"],
        min_class_requests=args.min_class_requests,
    )
    result = bake_rows.compare(
        canary,
        old,
        baselines(args.model, args.algorithm, args.thresholds),
        tol,
        (_overlay(args.canary_overlay), _overlay(args.old_overlay)),
    )
    summary = {
        "verdict": result["verdict"],
        "canary": doc["canary"],
        "old": doc["old"],
        "seconds": doc["seconds"],
        "waited_s": doc["waited_s"],
        "started_at": _utc(doc["started"]),
        "ended_at": _utc(doc["ended"]),
        "requests": canary["requests"],
        "source": doc["source"],
        "failed_rows": result["failed_rows"],
        "rows": result["rows"],
    }
    summary["table"] = f"{bake_rows.table(result['rows'])}\nnumbers from {doc['source']}"
    summary["headline"] = headline(summary)
    return summary


def headline(summary: dict) -> str:
    """One line: what the bake decided, about which canary, on how much traffic."""
    against = ", ".join(summary["old"]) or "no node on the old release"
    what = {
        "promote": "PASSED, promote",
        "fail": "FAILED on " + ", ".join(summary["failed_rows"]),
        "no-verdict": f"NO VERDICT: the canary served {summary['requests']} request(s), fewer than the "
        f"{_min_requests(summary)} a verdict needs, in {summary['seconds']:g} s + "
        f"{summary['waited_s']:g} s of waiting",
    }[summary["verdict"]]
    return (
        f"bake of {summary['canary']} against {against}, {summary['seconds']:g} s of live traffic ending "
        f"{summary['ended_at']}: {what}"
    )


def _min_requests(summary: dict) -> str:
    row = next(r for r in summary["rows"] if r["metric"] == "requests")
    return row["tolerance"].rsplit(" ", 1)[-1]


def _utc(stamp: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamp))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m replayssm_smoke.bake",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="step", required=True)
    model = argparse.ArgumentParser(add_help=False)
    model.add_argument("--model", action="append", required=True, help="model path or served name (repeatable)")
    model.add_argument("--algorithm", help="speculative algorithm, to pick the thresholds profile")
    model.add_argument("--thresholds", help="smoke thresholds file (default: the built-in one)")
    judged = argparse.ArgumentParser(add_help=False)
    judged.add_argument("--accept-tolerance", type=_fraction, default=bake_rows.Tolerances.accept)
    judged.add_argument("--aborted-tolerance", type=_fraction, default=bake_rows.Tolerances.aborted)
    judged.add_argument("--latency-tolerance", type=_non_negative, default=bake_rows.Tolerances.latency)
    judged.add_argument("--baseline-fraction", type=_fraction, default=bake_rows.Tolerances.baseline_fraction)
    judged.add_argument(
        "--min-class-requests",
        type=_count,
        default=bake_rows.Tolerances.min_class_requests,
        help="canary requests of a request class (SGLang's custom label `class`) for its own accept-length row "
        "to be judged; fewer are shown only",
    )
    timing = argparse.ArgumentParser(add_help=False)
    timing.add_argument("--seconds", type=float, required=True, help="how long the canary serves before the verdict")
    timing.add_argument("--poll", type=float, default=15.0, help="seconds between readings while waiting for traffic")
    timing.add_argument("--prometheus", default="", metavar="URL", help="the operator's Prometheus (default: none)")
    timing.add_argument("--prometheus-job", default="sglang", help="its scrape job of SGLang (default: sglang)")
    check = sub.add_parser(
        "check", parents=[model, judged, timing], help="refuse bad settings; contact nothing but a named Prometheus"
    )
    check.add_argument("--min-requests", type=int, default=bake_rows.Tolerances.min_requests)
    check.add_argument("--max-wait", type=float, default=0.0)
    run = sub.add_parser("measure", parents=[timing], help="read the nodes' /metrics at the bake's start and end")
    run.add_argument("--canary", type=_node, required=True, metavar="NAME=URL")
    run.add_argument("--old", type=_node, action="append", metavar="NAME=URL", help="a node on the old release")
    run.add_argument("--min-requests", type=int, default=bake_rows.Tolerances.min_requests)
    run.add_argument("--max-wait", type=float, default=0.0, help="seconds more to wait for --min-requests")
    run.add_argument("--out", required=True, help="the readings file (JSON)")
    verdict = sub.add_parser("judge", parents=[model, judged], help="the verdict of a readings file")
    verdict.add_argument("--readings", required=True)
    verdict.add_argument("--canary-overlay", help="`replayssm-overlay metrics --json` of the canary")
    verdict.add_argument("--old-overlay", help="`replayssm-overlay metrics --json` of a node on the old release")
    verdict.add_argument("--out", required=True, help="the bake's result (JSON: verdict, rows, table)")
    return p


def _check(p: argparse.ArgumentParser, args) -> None:
    if args.seconds <= 0 or args.poll <= 0 or args.seconds < args.poll:
        p.error(
            f"a bake of {args.seconds:g} s is shorter than one reading interval ({args.poll:g} s): it could "
            "not see the canary's traffic change; raise sglang_canary_bake or lower sglang_bake_poll"
        )
    if getattr(args, "min_requests", 1) < 1 or getattr(args, "max_wait", 0) < 0:
        p.error("--min-requests must be at least 1 and --max-wait 0 or more seconds")
    if args.prometheus and not args.prometheus.startswith(("http://", "https://")):
        p.error(f"--prometheus {args.prometheus!r} is not an http:// or https:// URL (sglang_bake_prometheus_url)")


def _check_prometheus(args) -> None:
    """A named Prometheus must answer, scrape the job, and scrape it at least once within the bake."""
    prometheus = bake_prometheus.Prometheus(args.prometheus, args.prometheus_job)
    try:
        interval = prometheus.scrape_interval()
    except bake_prometheus.PrometheusUnusable as exc:
        raise SmokeEnvironmentError(
            exc.what,
            "name the Prometheus that scrapes the fleet's SGLang and its job (sglang_bake_prometheus_url, "
            'sglang_bake_prometheus_job), or set sglang_bake_prometheus_url to "" to read the nodes\' /metrics',
        ) from None
    if args.seconds < interval:
        raise SmokeEnvironmentError(
            f"a bake of {args.seconds:g} s is shorter than one scrape interval ({interval:g} s) of job "
            f"{prometheus.job!r} at {prometheus.url}: Prometheus could miss the canary's traffic",
            "raise sglang_canary_bake to at least a few scrape intervals",
        )


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if args.step in ("check", "measure"):
        _check(p, args)
    try:
        if args.step == "check":
            if args.prometheus:
                _check_prometheus(args)
            by_class = baselines(args.model, args.algorithm, args.thresholds)
            print(
                f"bake settings valid; the model's baseline accept length is {min(by_class.values()):g} (by class: "
                + ", ".join(f"{cls} {value:g}" for cls, value in sorted(by_class.items()))
                + ")"
            )
            return EXIT_OK
        if args.step == "measure":
            atomic_write_json(args.out, measure(args))
            return EXIT_OK
        summary = judge(args)
    except SmokeEnvironmentError as exc:
        print(f"replayssm-smoke bake: error: {exc}", file=sys.stderr)
        return exc.exit_code
    atomic_write_json(args.out, summary, sort_keys=False)
    print(summary["headline"])
    print(summary["table"])
    return EXIT_OK if summary["verdict"] == "promote" else EXIT_CHECK_FAILED


if __name__ == "__main__":
    sys.exit(main())
