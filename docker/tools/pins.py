"""`make pins`: every (SGLang release, CUDA lane) that docker/base.lock knows, and whether it is pinned.

Why it exists: the release pipeline builds one image per pinned (release, lane) and must not invent the
list; people want to see at a glance which bases still need `make pin-base`. A table by default, JSON
with --json (the pipeline's build matrix: `{"include": [...]}` of the pinned ones, `unpinned` beside).

    python3 docker/tools/pins.py [--json]

Examples:
    make pins                       # table: release, lane, tag, digest or the pin-base command
    python3 docker/tools/pins.py --json | jq -c .include
"""

from __future__ import annotations

import argparse
import json

from common import DIGEST, base_pin, pin_base_command, read_lock, run_tool


def all_pins(lock: dict[str, str]) -> list[dict]:
    pins = []
    for release in [r for r in lock["RELEASES"].split(",") if r]:
        for lane in [lane for lane in lock.get(f"LANES_{release}", "").split(",") if lane]:
            pin = base_pin(lock, release, lane)
            pins.append(
                {
                    "release": release,
                    "lane": lane,
                    "base": pin["name"],
                    "digest": pin["digest"],
                    "pinned": bool(DIGEST.match(pin["digest"])),
                    "pin_base": pin_base_command(release, lane),
                    "driver_floor": lock.get(f"DRIVER_FLOOR_{lane}", ""),
                }
            )
    return pins


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog=__doc__.split("Examples:")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="one JSON object: include (pinned), unpinned")
    args = parser.parse_args()
    pins = all_pins(read_lock())
    if args.json:
        print(
            json.dumps({"include": [p for p in pins if p["pinned"]], "unpinned": [p for p in pins if not p["pinned"]]})
        )
        return 0
    print(f"{'RELEASE':<8} {'LANE':<6} {'BASE':<32} DIGEST")
    for p in pins:
        state = p["digest"] if p["pinned"] else f"unpinned: {p['pin_base']}"
        print(f"{p['release']:<8} {p['lane']:<6} {p['base']:<32} {state}")
    return 0


if __name__ == "__main__":
    run_tool(main)
