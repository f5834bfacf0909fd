"""`replayssm-overlay status --json`'s `protocol` and `exactness` on each release's real
tree (read only: status changes nothing), and that README.md and smoke_tests/README.md say what it says.

On 0.5.19 the overlay's fold (or SGLang's) commits and the state is the ReplaySSM-off state, bitwise; on
the ring releases SGLang's own MTP commit commits and the overlay's fold kernels are not used. A serving
process's self-check record (written here by this process, which is alive) tells status the pool's state
dtype: a non-fp32 state makes no bitwise claim.
"""

import json
from pathlib import Path

import pytest

from harness.release_trees import OTHER_RELEASES
from harness.ring_cycle import RING_ERROR_BOUND
from replayssm_overlay import exactness, fold, protocol, records, selfcheck
from replayssm_overlay.cli import main

REPO = Path(__file__).resolve().parents[2]
DOCS = (REPO / "README.md", REPO / "smoke_tests" / "README.md")


@pytest.fixture(autouse=True)
def fresh_node(monkeypatch, tmp_path):
    monkeypatch.setenv(records.ENV_DIR, str(tmp_path / "state"))
    monkeypatch.setenv("RSO_KERNEL_DIR", str(tmp_path / "no-kernels"))
    monkeypatch.delenv(fold.ENV_FOLD, raising=False)
    monkeypatch.setattr(fold, "_choice", None)
    monkeypatch.setattr(selfcheck, "_checked", {})


def _status(capsys, tree, *extra):
    assert main(["status", "--sglang-dir", str(tree), *extra]) == 0
    out = capsys.readouterr().out
    return json.loads(out) if "--json" in extra else out


def test_0_5_19_commits_the_replayssm_off_state_bitwise(tree_of, capsys):
    status = _status(capsys, tree_of("0.5.19"), "--json")
    assert status["protocol"] == protocol.FOLD
    claim = status["exactness"]
    assert claim["bitwise_equal_to"] == "replayssm-off-state" and claim["commit"].startswith("SGLang's fold")
    assert any("track slot" in c for c in claim["caveats"]) and any("float16 model" in c for c in claim["caveats"])
    text = _status(capsys, tree_of("0.5.19"))
    assert f"commit:   {claim['commit']}: {claim['statement']}" in text


@pytest.mark.parametrize("release", OTHER_RELEASES)
def test_a_ring_release_commits_with_sglangs_mtp_commit(tree_of, capsys, release):
    status = _status(capsys, tree_of(release), "--json")
    assert status["protocol"] == protocol.RING
    claim = status["exactness"]
    assert claim["bitwise_equal_to"] == "sglang-mtp-commit" and protocol.MTP_COMMIT in claim["commit"]
    assert claim["caveats"] == [] and "kernels:  (not used on this release)" in _status(capsys, tree_of(release))


def test_a_live_serving_processs_pool_decides_the_claim(tree_of, capsys):
    bf16_state = selfcheck.Geometry(num_v_heads=32, num_k_heads=16, head_v_dim=128, head_k_dim=128, window=16,
                                    state_dtype="bfloat16", ring_dtype="float16")
    selfcheck.check_before_serving(bf16_state, seed=1, protocol_name=protocol.FOLD)
    status = _status(capsys, tree_of("0.5.19"), "--json")
    (record,) = status["selfcheck"]
    assert record["alive"] and status["exactness"] == record["exactness"]
    assert status["exactness"]["bitwise_equal_to"] is None and "bfloat16" in status["exactness"]["statement"]
    assert any("in the ring in float16 before the fold" in c for c in status["exactness"]["caveats"])


def test_the_stated_ring_bound_is_the_one_the_ring_cycle_holds():
    assert exactness.RING_ERROR_BOUND == RING_ERROR_BOUND


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_the_readmes_say_what_status_says(doc):
    text = " ".join(doc.read_text().split())
    claims = [exactness.describe(protocol.FOLD, fold="overlay-cuda", state_dtype="float32"),
              exactness.describe(protocol.RING)]
    for sentence in [c["statement"] for c in claims] + claims[0]["caveats"]:
        assert sentence in text, sentence
