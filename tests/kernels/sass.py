"""The SASS of a cubin's entry point and its step loops, for the CUDA kernel's CPU tests (no GPU: cuobjdump
reads the cubin NVRTC built). The step loop and its remainder are the two innermost loops with the most
FFMAs; a loop is a branch to an earlier instruction."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path


def sass_of(cubin: Path, kernel: str) -> list[tuple[int, str]]:
    """(offset, instruction) of `kernel` in `cubin`, from cuobjdump (the one Triton ships, else PATH's)."""
    try:
        from triton import knobs

        tool = knobs.nvidia.cuobjdump.path
    except Exception:  # no Triton here: the CUDA toolkit's
        tool = shutil.which("cuobjdump")
    text = subprocess.run(
        [tool, "-sass", "-fun", kernel, str(cubin)], capture_output=True, text=True, check=True
    ).stdout
    return [
        (int(m.group(1), 16), m.group(2))
        for m in (re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line) for line in text.splitlines())
        if m
    ]


def step_loops(sass: list[tuple[int, str]]) -> list[tuple[int, int]]:
    """(first offset, last offset) of the step loop and its remainder."""
    offsets, found = {a for a, _ in sass}, []
    for a, ins in sass:
        m = re.search(r"\bBRA\b.*?(0x[0-9a-f]+)", ins)
        if m and int(m.group(1), 16) < a and int(m.group(1), 16) in offsets:
            first = int(m.group(1), 16)
            found.append((first, a, sum(1 for b, i in sass if first <= b <= a and re.search(r"\bFFMA\b", i))))
    innermost = [x for x in found if not any(x[0] <= y[0] and y[1] <= x[1] and y != x for y in found)]
    loops = sorted((f, last) for f, last, n in sorted(innermost, key=lambda x: -x[2])[:2] if n)
    if len(loops) < 2:
        raise ValueError("no step loop and remainder found: is this the commit kernel's cubin?")
    return loops
