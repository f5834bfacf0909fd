"""Where the commit kernel's warps wait, by region of the kernel: Nsight Compute's per-instruction stall
samples summed over the setup before the first item, the per-item code and the step loop.

Why: the kernel's time is its instruction count over its issue rate, and the instruction count alone
misled (notes/perf.md, v12: a step loop 7% shorter was slower). The per-instruction samples say where the
warps spend their cycles; grouping them by loop makes two profiles comparable even though their SASS
addresses differ. Runs anywhere (no GPU): it reads the profile's source page and the profiled cubin.

    ncu --clock-control none -k regex:gdn_fold -s 1 -c 1 --section WarpStateStats --section SourceCounters \\
        -o prof python3 benchmarks/profile_fold.py --cuda gdn_fold.cubin
    ncu -i prof.ncu-rep --page source --csv --print-source sass > prof.csv
    python3 benchmarks/ncu_regions.py --csv prof.csv --cubin gdn_fold.cubin [--json out.json]

The regions, from the cubin's loops (a backward branch closes a loop): the step loop and its remainder are
the two innermost loops with the most FFMAs, the item loop the smallest loop that contains both; "setup" is
what runs before the item loop (conv units, the first item), "per-item" the item loop less the step loops.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

KERNEL = "gdn_fold_conv2"
REGIONS = ("setup", "per-item", "step loop")


def sass_of(cubin: Path, kernel: str = KERNEL) -> list[tuple[int, str]]:
    """(offset, instruction) of `kernel` in `cubin`, from cuobjdump (the one Triton ships, else PATH's)."""
    try:
        from triton import knobs

        tool = knobs.nvidia.cuobjdump.path
    except Exception:  # no Triton here: the CUDA toolkit's
        tool = shutil.which("cuobjdump")
    if not tool:
        sys.exit("no cuobjdump: install triton (it ships one) or the CUDA toolkit")
    text = subprocess.run([tool, "-sass", "-fun", kernel, str(cubin)], capture_output=True, text=True, check=True).stdout
    return parse_sass(text)


def parse_sass(text: str) -> list[tuple[int, str]]:
    found = []
    for line in text.splitlines():
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m:
            found.append((int(m.group(1), 16), m.group(2)))
    return found


def loops(sass: list[tuple[int, str]]) -> list[tuple[int, int, int]]:
    """(first offset, last offset, FFMAs in it) of each loop: a branch to an earlier instruction."""
    offsets = {a for a, _ in sass}
    found = []
    for a, ins in sass:
        m = re.search(r"\bBRA\b.*?(0x[0-9a-f]+)", ins)
        if m and int(m.group(1), 16) < a and int(m.group(1), 16) in offsets:
            first = int(m.group(1), 16)
            ffma = sum(1 for b, i in sass if first <= b <= a and re.search(r"\bFFMA\b", i))
            found.append((first, a, ffma))
    return found


def region_bounds(sass: list[tuple[int, str]]) -> tuple[tuple[int, int], list[tuple[int, int]]]:
    """The item loop's bounds and the step loops': of the innermost loops, the two with the most FFMAs."""
    found = loops(sass)
    innermost = [x for x in found if not any(x[0] <= y[0] and y[1] <= x[1] and y != x for y in found)]
    step_loops = sorted((f, l) for f, l, n in sorted(innermost, key=lambda x: -x[2])[:2] if n)
    if len(step_loops) < 2:
        raise ValueError("no step loop and remainder found: is this the commit kernel's cubin?")
    lo, hi = step_loops[0][0], step_loops[-1][1]
    around = [(f, l) for f, l, _ in found if f < lo and l > hi]
    if not around:
        raise ValueError("no item loop around the step loops")
    return min(around, key=lambda b: b[1] - b[0]), step_loops


def region(offset: int, item: tuple[int, int], steps: list[tuple[int, int]]) -> str | None:
    if any(f <= offset <= l for f, l in steps):
        return "step loop"
    if item[0] <= offset <= item[1]:
        return "per-item"
    return "setup" if offset < item[0] else None  # after the item loop: the exit


def summarize(rows: list[dict], sass: list[tuple[int, str]]) -> dict:
    """{region: {"samples_pct", "instructions_pct", "stalls_pct": the 6 largest reasons}} of a source page."""
    item, steps = region_bounds(sass)
    base = min(int(r["Address"], 16) for r in rows)
    stalls = [k for k in rows[0] if k.startswith("stall_") and "Not Issued" not in k]
    per = {name: Counter() for name in REGIONS}
    for r in rows:
        name = region(int(r["Address"], 16) - base, item, steps)
        if name:
            per[name].update({k: int(r[k] or 0) for k in stalls})
            per[name]["instructions"] += int(r["Instructions Executed"] or 0)
    samples = sum(sum(c[k] for k in stalls) for c in per.values()) or 1
    executed = sum(c["instructions"] for c in per.values()) or 1
    return {name: {"samples_pct": round(100 * sum(c[k] for k in stalls) / samples, 2),
                   "instructions_pct": round(100 * c["instructions"] / executed, 2),
                   "stalls_pct": {k[len("stall_"):]: round(100 * c[k] / samples, 2)
                                  for k in sorted(stalls, key=lambda k: -c[k])[:6]}}
            for name, c in per.items()}


def read_source_page(path: Path) -> list[dict]:
    """The rows of ncu's `--page source --csv` export (its first line names the kernel)."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"Address"'))
    return list(csv.DictReader(lines[start:]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", type=Path, required=True, help="ncu -i REP --page source --csv --print-source sass")
    ap.add_argument("--cubin", type=Path, required=True, help="the cubin that was profiled")
    ap.add_argument("--kernel", default=KERNEL)
    ap.add_argument("--json", type=Path, help="also write the summary here")
    args = ap.parse_args(argv)
    summary = summarize(read_source_page(args.csv), sass_of(args.cubin, args.kernel))
    print(f"{'region':<10} {'samples':>8} {'instructions':>13}  largest stall reasons (% of all samples)")
    for name, s in summary.items():
        reasons = ", ".join(f"{k} {v}" for k, v in s["stalls_pct"].items())
        print(f"{name:<10} {s['samples_pct']:>7}% {s['instructions_pct']:>12}%  {reasons}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
