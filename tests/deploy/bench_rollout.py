"""Benchmark: a 3-node rollout under a steady load through a router, with the router integration and
without (a plain swap), and with the canary bake, side by side in one run on the test fleet. Not a test: it
asserts nothing and prints (and writes, --out) requests, failed requests, p50/p99 latency and the rollout's
wall time per row.

Rows: "router integration" (sglang_router_url set: out of the router, drain, switch, gates, back), and
"plain swap" (the same rollout without sglang_router_url: the router learns of each switch only from its
own health checks), each under the router as the tests run it (retries off, so each request a switch
cuts or sends to a stopped node fails) and, with --retries, the plain swap once more behind a router with
its default retries (a cut request is re-run on another node: it shows as latency, not as a failure).
With --bake S, per router (sglang-router 0.3.2 and smg 1.x): the router integration without a bake and with
the canary baked for S seconds of the load (the bake's own settings: BAKE_SETTINGS), so the bake's cost in
wall time and what it does to the requests show side by side, behind both routers.
Every rollout is v1 -> v2 or back, all three nodes, canary first; the load (tests/deploy/loadgen.py)
starts before the playbook and stops right after it.

Needs what the rollout tests need (root, Docker, debootstrap, the test venv, .venv-smg for smg); about 10
minutes on 2 cores with --retries, 10 more with --bake 30:

    sudo .venv/bin/python -m tests.deploy.bench_rollout --out rollout-bench.json [--retries] [--bake 30]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.deploy.bake_thresholds import THRESHOLDS
from tests.deploy.fleet import start_fleet
from tests.deploy.loadgen import LOAD_CONCURRENCY, LOAD_REQUESTS, Background
from tests.deploy.router import ROUTED_ENV, start_router
from tests.deploy.runner import ansible_playbook, write_inventory
from tests.deploy.standin_image import build_saved_images


@dataclass(frozen=True)
class Row:
    """One rollout of the benchmark: its name, the router in front, and how the rollout runs."""

    name: str
    router: str = "sglang-router"
    integration: bool = True  # sglang_router_url set
    retries: bool = False  # the router's own retries
    bake_s: int = 0  # the canary's bake (sglang_canary_bake)


ROWS = (Row("router integration"), Row("plain swap", integration=False))
RETRY_ROW = Row("plain swap, router retries on", integration=False, retries=True)
#: the bake's settings besides its length: a reading every 5 s, a verdict on 8 requests or more
BAKE_SETTINGS = {
    "sglang_bake_poll": 5,
    "sglang_bake_min_requests": 8,
    "sglang_bake_max_wait": 30,
    "sglang_bake_accept_tolerance": 0.2,
}


def bake_rows(seconds: int) -> list[Row]:
    """Per router: the integration without a bake, then with a bake of `seconds`."""
    return [
        Row(f"{label} ({kind})", router=kind, bake_s=bake)
        for kind in ("sglang-router", "smg")
        for label, bake in (("router integration", 0), (f"canary bake {seconds} s", seconds))
    ]


def _log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _rollout(fleet, router, image, root: Path, row: Row) -> dict:
    """One 3-node rollout of `image` under load through `router`; its numbers."""
    name = row.name
    extra = {"sglang_router_url": router.url, "sglang_canary_bake": row.bake_s} if row.integration else {}
    if row.bake_s:
        extra.update(
            BAKE_SETTINGS,
            sglang_bake_thresholds=str(root / "thresholds.yaml"),
            sglang_bake_report_dir=str(root / "bake"),
        )
    stem = "".join(c if c.isalnum() else "-" for c in name)
    inventory = write_inventory(fleet, root / f"{stem}.json", image, sglang_env=ROUTED_ENV, **extra)
    load = Background(fleet, router.url, LOAD_REQUESTS, LOAD_CONCURRENCY, root / f"{stem}.load.json")
    tic = time.monotonic()
    try:
        result = ansible_playbook(fleet, "rollout.yml", inventory, timeout=1800)
    finally:
        wall = time.monotonic() - tic
        report = load.result()
    if result.rc != 0:
        raise RuntimeError(f"the rollout ({name}) failed:\n{result.output[-4000:]}")
    return {
        "row": name,
        "router": row.router,
        "bake_s": row.bake_s,
        "requests": report["requests"],
        "failed": report["failed"],
        "failures": report["failures"],
        "p50_s": report["latency_s"]["p50"],
        "p99_s": report["latency_s"]["p99"],
        "max_s": report["latency_s"]["max"],
        "rollout_s": round(wall, 1),
    }


def table(rows: list[dict]) -> str:
    head = f"{'':40} {'requests':>8} {'failed':>6} {'p50 s':>7} {'p99 s':>7} {'max s':>7} {'rollout s':>9}"
    lines = [head] + [
        f"{r['row']:40} {r['requests']:>8} {r['failed']:>6} {r['p50_s']:>7.3f} {r['p99_s']:>7.3f} "
        f"{r['max_s']:>7.3f} {r['rollout_s']:>9.1f}"
        for r in rows
    ]
    return "\n".join(lines)


def run(root: Path, retries: bool, bake_s: int) -> list[dict]:
    _log("building the stand-in images and starting the test fleet (a few minutes)")
    (root / "thresholds.yaml").write_text(THRESHOLDS)
    images = build_saved_images(root / "images")
    fleet = start_fleet(root / "fleet", count=3)
    try:
        urls = sorted(f"http://{node.address}:30000" for node in fleet.nodes)
        for image in ("v1", "v2"):
            _log(f"deploying {image} (plain), to start from a fleet that holds both images")
            result = ansible_playbook(
                fleet,
                "deploy.yml",
                write_inventory(fleet, root / f"setup-{image}.json", images[image], sglang_env=ROUTED_ENV),
                timeout=1800,
            )
            if result.rc != 0:
                raise RuntimeError(f"setting up the fleet failed:\n{result.output[-4000:]}")
        rows, plan = [], list(ROWS) + ([RETRY_ROW] if retries else []) + (bake_rows(bake_s) if bake_s else [])
        for number, row in enumerate(plan):
            router = start_router(fleet, urls, retries=row.retries, kind=row.router)
            try:
                image = images["v1" if number % 2 == 0 else "v2"]  # every row switches all three nodes
                _log(f"{row.name}: rolling out {image.ref} under load")
                rows.append(_rollout(fleet, router, image, root, row))
            finally:
                router.stop()
            _log(json.dumps(rows[-1]))
        return rows
    finally:
        fleet.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, help="write the rows as JSON here")
    p.add_argument("--retries", action="store_true", help="add the plain swap behind a router with its retries on")
    p.add_argument(
        "--bake",
        type=int,
        default=0,
        metavar="S",
        help="add, per router (sglang-router, smg), the integration without and with a canary bake of S seconds",
    )
    args = p.parse_args(argv)
    if args.bake < 0:
        p.error("--bake takes seconds, 0 or more")
    with tempfile.TemporaryDirectory(prefix="rso-bench-rollout-") as tmp:
        rows = run(Path(tmp), args.retries, args.bake)
    print(table(rows))
    if args.out:
        args.out.write_text(
            json.dumps({"rows": rows, "load": {"concurrency": LOAD_CONCURRENCY, "request_s": 0.5}}, indent=1) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
