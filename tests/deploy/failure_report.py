"""What a failing fleet test's report shows first: the failed tasks of its playbook runs.

CI shows the start and the end of a failing test's report, not its middle, so the tasks that failed (and
each run's recap) come before the log's tail. Nothing here ships; it lives under tests/.
"""

from __future__ import annotations

import re

#: a line that starts a new block of the log: a run (the runner's header), a play, a task, a recap
_BLOCK_START = re.compile(r"^(===== |PLAY \[|TASK \[|PLAY RECAP )", re.M)
#: what a block that failed holds (ansible-core 2.19's wording, and the older one)
_FAILURE = re.compile(r"FAILED!|UNREACHABLE!|^\[ERROR\]|^ERROR!", re.M)
#: the most of one failed block, and of all of them, that the report carries
BLOCK_CHARS = 2500
TOTAL_CHARS = 8000


def _blocks(log: str) -> list[str]:
    starts = [m.start() for m in _BLOCK_START.finditer(log)]
    if not starts or starts[0] != 0:
        starts.insert(0, 0)
    return [log[a:b] for a, b in zip(starts, starts[1:] + [len(log)])]


def failed_tasks(log: str) -> str:
    """The runs' headers, the blocks that failed (each cut to BLOCK_CHARS) and the recaps, in log order;
    '' when nothing failed."""
    kept, failed = [], False
    for block in _blocks(log):
        if block.startswith("===== ") or block.startswith("PLAY RECAP "):
            kept.append(block.strip() + "\n")
        elif _FAILURE.search(block):
            failed = True
            text = block.strip()
            kept.append(text[:BLOCK_CHARS] + (" [...]" if len(text) > BLOCK_CHARS else "") + "\n")
    if not failed:
        return ""
    report = "\n".join(kept)
    if len(report) <= TOTAL_CHARS:
        return report
    return report[: TOTAL_CHARS // 2] + "\n[...]\n" + report[-TOTAL_CHARS // 2 :]
