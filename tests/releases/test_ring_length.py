"""The ring-length rule's proof on each circular-ring release's real code (0.5.20 on), CPU, Triton interpreter:
`harness.ring_length` runs each scenario on a ring of L (the smallest power of two >= N) and of 2L from the
same seed, both committed by that release's own MTP commit, and compares after every step, bit for bit, the
verify's outputs, every slot's state (tracks and spares), the conv states, the cursors and the state the
ring stands for. Equal for the power-of-two windows of 8 and 16 (DFLASH's default block on SGLang's default
ring), over mixed lengths, padded rows, track crossings of both algorithms and a ring holding stale rows;
different for a window of 4 (the interpreter's reductions over 4 and 8 rows are different trees) and a
window that is not a power of two (a ring of 8 flushes every commit, one of 16 defers). `hooks/ring_fit.py`
takes a ring of exactly N only for windows of 16 and 32 (also compared on an H100: benchmarks/gpu_ring.py
--pairs): on the GPU SGLang's commit kernel does not compile for a ring below 16. The four releases run two
at a time (one process each).
"""

import concurrent.futures
import json
import subprocess
import sys

import pytest

from harness import sandbox
from harness.release_trees import OTHER_RELEASES
from harness.ring_length import CASES, COMPARED, STALE
from replayssm_overlay.hooks import ring_fit

pytestmark = pytest.mark.probe  # SGLang's kernels under the interpreter, a process per release


def _report(release: str) -> dict:
    with sandbox.sglang_copy(release) as tree:
        run = subprocess.run(
            [sys.executable, "-m", "harness.ring_length", "--json"],
            env=sandbox.probe_env(tree),
            cwd=sandbox.REPO_ROOT,
            stdout=subprocess.PIPE,
            text=True,
            check=False,
            timeout=1800,
        )
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["sglang"] == str(tree), report["sglang"]
    return report


@pytest.fixture(scope="module")
def reports(tree_of):
    for release in OTHER_RELEASES:
        tree_of(release)  # fail early, naming `make setup`, if one is missing
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {release: pool.submit(_report, release) for release in OTHER_RELEASES}
        return {release: future.result() for release, future in futures.items()}


def _rows(report) -> dict:
    return {(r["scenario"], r["algorithm"], r["draft_tokens"]): r for r in report["rows"]}


@pytest.mark.parametrize("release", OTHER_RELEASES)
def test_a_ring_of_n_commits_what_a_ring_of_2n_commits_at_every_step(reports, release):
    rows = _rows(reports[release])
    assert set(reports[release]["compared"]) == set(COMPARED)
    equal = [r for r in rows.values() if r["draft_tokens"] >= 8]
    assert {r["draft_tokens"] for r in equal} == {8, 16}
    for r in equal:
        assert r["rings"][0] == r["draft_tokens"] and r["bitwise_equal"] and not r["differing"] and not r["errors"], r
        assert r["compared_steps"] == r["steps"] and r["flushes"] == [r["steps"], r["steps"]], r  # every commit
        # the rule takes the ring of N where it compiles on the GPU (16 on), 2N below
        assert ring_fit.fits(r["draft_tokens"], r["rings"][0]) is (r["draft_tokens"] in ring_fit.SHORT_RING_WINDOWS)


@pytest.mark.parametrize("release", OTHER_RELEASES)
def test_the_cases_cover_padded_rows_tracks_stale_rows_and_many_steps(reports, release):
    rows = _rows(reports[release])
    equal = [r for r in rows.values() if r["bitwise_equal"]]
    assert any(r["padded_rows"] for r in equal) and any(r["stale_ring"] for r in equal)
    assert {r["algorithm"] for r in equal if r["tracked_steps"] >= 3} == {"DFLASH", "DSPARK"}
    assert max(r["steps"] for r in equal) >= 10 and (STALE, "DFLASH", 8) in rows
    assert all(len(c.schedule) == rows[(c.name, c.algorithm, c.draft_tokens)]["steps"] for c in CASES)


@pytest.mark.parametrize("release", OTHER_RELEASES)
def test_the_windows_that_keep_2n_are_the_ones_whose_short_ring_differs(reports, release):
    """A window of 4 (the reductions over 4 and 8 ring rows differ) and of 5 (a ring of 8 flushes every commit,
    one of 16 defers): the rule refuses their short ring and takes SGLang's 2N (at least 16)."""
    rows = _rows(reports[release])
    for key in (("window of 4", "DFLASH", 4), ("window not a power of two", "DSPARK", 5)):
        row = rows[key]
        assert not row["bitwise_equal"] and row["differing"], row
        window = row["draft_tokens"]
        assert not ring_fit.fits(window, row["rings"][0]) and ring_fit.smallest_ring(window) == max(16, 2 * window)
