"""The verify-kernel column of "What is bitwise where" against each release's own code, on the CPU.

`replayssm_overlay.verify_kernel.stock_verify_kernel` (which status, the self-check record and the smoke
suite's `--parity auto` use) is held equal to SGLang's own GDN dispatcher (`GDNKernelDispatcher`, after
`resolve_linear_attn_backends`), run by `harness.verify_selection` in a process importing that release,
for every combination of the linear-attention flags the release accepts with the ReplaySSM spec flag, on
SM80, SM90 and SM100 (and, GPU unknown, on any of them). And the ring bound's restriction to a float32
state: with a bfloat16 state the ring's distance from the recurrence leaves RING_ERROR_BOUND
(`harness.ring_state_dtype`), which the table says instead of the bound.
"""

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.release_trees import INSTALLED_RELEASE, OTHER_RELEASES
from replayssm_overlay import exactness

pytestmark = pytest.mark.probe  # a process importing each release: not in make test-fast

REPO = Path(__file__).resolve().parents[2]


def _run(tree: Path, *module: str) -> str:
    env = dict(
        os.environ,
        PYTHONDONTWRITEBYTECODE="1",
        TRITON_INTERPRET="1",
        PYTHONPATH=os.pathsep.join([str(tree.parent), str(REPO / "overlay"), str(REPO)]),
    )
    proc = subprocess.run([sys.executable, "-m", *module], capture_output=True, text=True, env=env, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


@pytest.mark.parametrize("release", (INSTALLED_RELEASE, *OTHER_RELEASES))
def test_the_overlays_rule_is_sglangs_dispatcher(tree_of, release):
    tree = tree_of(release)
    report = json.loads(_run(tree, "harness.verify_selection"))
    assert Path(report["sglang"]).resolve().is_relative_to(tree.resolve())
    rows = report["rows"]
    assert len(rows) > 400 and any(r["sglang"] for r in rows) and not all(r["sglang"] for r in rows)
    wrong = [r for r in rows if r["sglang"] != r["overlay"]]
    assert not wrong, wrong[:5]
    on_some_gpu = collections.defaultdict(bool)
    for r in rows:
        on_some_gpu[json.dumps(r["flags"], sort_keys=True)] |= r["sglang"]
    assert all(r["overlay_any_gpu"] == on_some_gpu[json.dumps(r["flags"], sort_keys=True)] for r in rows)


def test_a_bfloat16_state_leaves_the_float32_ring_bound(tree_of):
    lines = _run(tree_of(OTHER_RELEASES[0]), "harness.ring_state_dtype", "bfloat16").splitlines()
    results = [json.loads(line) for line in lines]
    assert results and all(r["error"] is None and r["committed_steps"] == r["steps"] for r in results), results
    worst = max(r["max_relative_rms"] for r in results)
    assert exactness.RING_ERROR_BOUND < worst <= exactness.RING_BF16_DISTANCE, worst
