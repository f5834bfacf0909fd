"""The verify -> commit cycle through the PATCHED `DFlashWorkerV2._update_target_mamba_state_after_verify`
and `DSparkWorkerV2._commit_target_mamba_states_after_verify`, and the stock methods on the same input.

A copy of the installed SGLang 0.5.19 is made in a temporary directory (the installed one is never
touched); `harness.probe` runs every scenario in a subprocess importing the copy before patching (stock:
the commit crashes) and after the overlay's patcher applied it (bitwise equal to token-by-token decode).
"""

import pytest

from harness import pd_decode, release_trees, sandbox
from harness.cycle import SCENARIOS
from replayssm_overlay import protocol

pytestmark = pytest.mark.probe  # harness.probe against copies of SGLang: not in make test-fast

STOCK_CRASH = "AttributeError: 'NoneType' object has no attribute 'device'"


@pytest.fixture(scope="module")
def reports():
    return sandbox.stock_and_patched_reports()


@pytest.mark.parametrize("index", range(len(SCENARIOS)), ids=[f"{s.name}-{s.algorithm}" for s in SCENARIOS])
def test_scenario(reports, index):
    stock, patched = reports["stock"]["cycle"][index], reports["patched"]["cycle"][index]
    assert stock["scenario"] == patched["scenario"] == SCENARIOS[index].name
    assert not stock["committed"] and stock["error"].startswith(STOCK_CRASH), stock
    assert patched["committed"] and patched["bitwise_equal"], patched


def test_the_pd_decode_pool_commits_bitwise_patched_and_crashes_stock(reports):
    """A `--disaggregation-mode decode` server's pool (`_build_hybrid_mamba_decode_req_pool`, real): stock
    builds it and crashes at the first commit; patched, the builder admits it (self-check included) and
    every scenario commits bitwise equal to token-by-token decode (`harness.pd_decode`)."""
    stock, patched = reports["stock"]["pd_decode_cycle"], reports["patched"]["pd_decode_cycle"]
    assert {r["algorithm"] for r in stock} == {"DFLASH", "DSPARK"}
    assert all(not r["committed"] and r["error"].startswith(STOCK_CRASH) for r in stock), stock
    assert [(r["scenario"], r["algorithm"]) for r in patched] == list(pd_decode.FOLD_SCENARIOS)
    assert all(r["committed"] and r["bitwise_equal"] for r in patched), patched
    assert any(r["checks"]["track slots == decode at track step"] and max(r["track_steps"]) >= 0 for r in patched)


def test_the_protocol_read_from_the_tree_is_the_pool_sglang_builds(reports):
    """`replayssm_overlay.protocol` (the configurator's and status's answer) agrees with the pool 0.5.19
    builds (`harness.probe.pool_protocol`); the ring releases in tests/releases."""
    assert protocol.of_tree(release_trees.installed_sglang()) == reports["stock"]["protocol"] == protocol.FOLD


def test_patched_dflash_commits_the_track_step(reports):
    tracked = [r for r in reports["patched"]["cycle"] if r["algorithm"] == "DFLASH" and max(r["track_steps"]) >= 0]
    assert tracked and all(r["checks"]["track slots == decode at track step"] for r in tracked)
    steps = reports["stock"]["dflash_track_steps"]
    assert steps["sglang_dflash_body"] == [-1] * len(steps["commit_lens"]) != steps["expected"]


def test_the_overlays_own_fold_kernel_through_the_patched_commit():
    """Where the build has the overlay's own fold kernels, the patched commit runs them (RSO_FOLD=triton,
    run by the interpreter here) for a head dim they cover (K=128), still bitwise equal to decode;
    the patched configurator ran the node's self-check on the same head shapes first, once, and it
    passed."""
    pytest.importorskip("replayssm_overlay.kernels")
    with sandbox.sglang_copy() as copy:
        sandbox.apply_overlay(copy)
        report = sandbox.run_probe(copy, quiet=True, fold="triton", head_k_dim=128)
    assert report["fold"]["fold"] == "overlay-triton", report["fold"]
    assert all(result["bitwise_equal"] for result in report["cycle"]), report["cycle"]
    (record,) = report["selfcheck"]
    assert record["outcome"] == "passed" and record["geometry"]["head_k_dim"] == 128, record
