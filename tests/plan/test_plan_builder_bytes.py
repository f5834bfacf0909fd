"""`replayssm-overlay plan`'s bytes are the bytes SGLang's own pool builder allocates, buffer by buffer.

For every supported release (0.5.19 installed, the later ones under the venv's sglang-releases) a
subprocess imports that release and `harness.pool_bytes` builds the mamba pool through its real
`KVCacheConfigurator._build_hybrid_req_pool` for each model family's config.json (tests/plan/models), with
ReplaySSM off and on, at several TP sizes, windows, rings and SSM dtypes; `state_bytes.buffers` must
name the same buffers with the same bytes per state slot and per running request, and nothing may be
allocated outside the slots.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from harness.errors import HarnessError
from harness.release_trees import INSTALLED_RELEASE, release_tree
from replayssm_overlay.patcher.releases import SUPPORTED_RELEASES
from replayssm_overlay.plan import model, state_bytes

pytestmark = pytest.mark.probe  # a subprocess per release imports SGLang: not in make test-fast

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODELS = pathlib.Path(__file__).resolve().parent / "models"
CASES = [
    {
        "config": str(MODELS / name / "config.json"),
        "algorithm": algorithm,
        "window": window,
        "ring_len": ring,
        "attn_tp": tp,
        "replayssm": replayssm,
        **({"mamba_ssm_dtype": dtype} if dtype else {}),
    }
    for name, tp, algorithm, window, ring, dtype in (
        ("Qwen3-Next-80B-A3B-Instruct", 2, "DFLASH", 8, 16, "bfloat16"),
        ("Qwen3.5-35B-A3B", 1, "DFLASH", 16, 32, None),
        ("Qwen3.5-397B-A17B", 8, "DSPARK", 4, 8, None),
        ("Qwen3.5-397B-A17B", 4, "DFLASH", 16, 64, "float16"),
    )
    for replayssm in (False, True)
]


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    cases_file = tmp_path_factory.mktemp("plan") / "cases.json"
    cases_file.write_text(json.dumps(CASES))
    results = {}

    def of(release: str) -> list:
        if release not in results:
            try:
                tree = release_tree(release)
            except HarnessError as error:
                pytest.fail(str(error))
            paths = ([] if release == INSTALLED_RELEASE else [str(tree.parent)]) + [str(ROOT / "overlay"), str(ROOT)]
            run = subprocess.run(
                [sys.executable, "-m", "harness.pool_bytes", str(cases_file)],
                cwd=ROOT,
                env=dict(os.environ, PYTHONPATH=os.pathsep.join(paths)),
                capture_output=True,
                text=True,
                timeout=900,
            )
            assert run.returncode == 0, run.stderr[-3000:]
            results[release] = json.loads(run.stdout.splitlines()[-1])
        return results[release]

    return of


@pytest.mark.parametrize("release", SUPPORTED_RELEASES)
def test_formula_equals_the_pool_builder(measured, release):
    for result in measured(release):
        case = result["case"]
        gdn = model.load(case["config"])
        rank = state_bytes.Rank.of(gdn, case["attn_tp"], case.get("mamba_ssm_dtype") or "float32")
        expected = state_bytes.buffers(
            rank, release=release, window=case["window"], ring_len=case["ring_len"], replayssm=case["replayssm"]
        )
        assert (result["slot"], result["request"], result["fixed"]) == (expected["slot"], expected["request"], {}), case


def test_replayssm_drops_the_per_token_snapshots_on_every_release(measured):
    """The control: the buffers the formula is held to differ between off and on, on every release."""
    for release in SUPPORTED_RELEASES:
        off, on = measured(release)[0], measured(release)[1]
        assert "intermediate_ssm" in off["request"] and "intermediate_ssm" not in on["request"], release
        assert state_bytes.per_request(off) > 3 * state_bytes.per_request(on), release
