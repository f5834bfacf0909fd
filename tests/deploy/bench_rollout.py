"""Benchmark: a 3-node rollout under a steady load through sglang-router, with the router integration and
without (a plain swap), side by side in one run on the test fleet. Not a test: it asserts nothing and
prints (and writes, --out) requests, failed requests, p50/p99 latency and the rollout's wall time per row.

Rows: "router integration" (sglang_router_url set: out of the router, drain, switch, gates, back), and
"plain swap" (the same rollout without sglang_router_url: the router learns of each switch only from its
own health checks), each under the router as the tests run it (retries off, so each request a switch
cuts or sends to a stopped node fails) and, with --retries, the plain swap once more behind a router with
its default retries (a cut request is re-run on another node: it shows as latency, not as a failure).
Every rollout is v1 -> v2 or back, all three nodes, canary first; the load (tests/deploy/loadgen.py)
starts before the playbook and stops right after it.

Needs what the rollout tests need (root, Docker, debootstrap, the test venv); about 10 minutes on 2 cores
(with --retries):

    sudo .venv/bin/python -m tests.deploy.bench_rollout --out rollout-bench.json [--retries]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from tests.deploy.fleet import start_fleet
from tests.deploy.loadgen import LOAD_CONCURRENCY, LOAD_REQUESTS, Background
from tests.deploy.router import ROUTED_ENV, start_router
from tests.deploy.runner import ansible_playbook, write_inventory
from tests.deploy.standin_image import build_saved_images

ROWS = (("router integration", True, False), ("plain swap", False, False))
RETRY_ROW = ("plain swap, router retries on", False, True)


def _log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _rollout(fleet, router, image, root: Path, name: str, integration: bool) -> dict:
    """One 3-node rollout of `image` under load through `router`; its numbers."""
    extra = {"sglang_router_url": router.url, "sglang_canary_bake": 0} if integration else {}
    stem = name.replace(" ", "-").replace(",", "")
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
        "requests": report["requests"],
        "failed": report["failed"],
        "failures": report["failures"],
        "p50_s": report["latency_s"]["p50"],
        "p99_s": report["latency_s"]["p99"],
        "max_s": report["latency_s"]["max"],
        "rollout_s": round(wall, 1),
    }


def table(rows: list[dict]) -> str:
    head = f"{'':34} {'requests':>8} {'failed':>6} {'p50 s':>7} {'p99 s':>7} {'max s':>7} {'rollout s':>9}"
    lines = [head] + [
        f"{r['row']:34} {r['requests']:>8} {r['failed']:>6} {r['p50_s']:>7.3f} {r['p99_s']:>7.3f} "
        f"{r['max_s']:>7.3f} {r['rollout_s']:>9.1f}"
        for r in rows
    ]
    return "\n".join(lines)


def run(root: Path, retries: bool) -> list[dict]:
    _log("building the stand-in images and starting the test fleet (a few minutes)")
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
        rows, plan = [], list(ROWS) + ([RETRY_ROW] if retries else [])
        for number, (name, integration, with_retries) in enumerate(plan):
            router = start_router(fleet, urls, retries=with_retries)
            try:
                image = images["v1" if number % 2 == 0 else "v2"]  # every row switches all three nodes
                _log(f"{name}: rolling out {image.ref} under load")
                rows.append(_rollout(fleet, router, image, root, name, integration))
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
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rso-bench-rollout-") as tmp:
        rows = run(Path(tmp), args.retries)
    print(table(rows))
    if args.out:
        args.out.write_text(
            json.dumps({"rows": rows, "load": {"concurrency": LOAD_CONCURRENCY, "request_s": 0.5}}, indent=1) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
