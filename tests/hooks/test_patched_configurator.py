"""The PATCHED `KVCacheConfigurator._build_hybrid_req_pool`, end to end.

A copy of the installed SGLang 0.5.19 is patched with the overlay's patcher in a temporary directory
(the installed one is never touched) and `harness.probe` runs the configurator cases in a subprocess that
imports the copy, once before patching (stock) and once after (`harness.sandbox.stock_and_patched_reports`,
shared with tests/cycle/test_patched_cycle.py).
"""

import pytest

from harness import sandbox
from harness.configurator_probe import CASES, matches

pytestmark = pytest.mark.probe  # harness.probe against copies of SGLang: not in make test-fast


@pytest.fixture(scope="module")
def reports():
    reports = sandbox.stock_and_patched_reports()
    return {side: reports[side]["configurator"] for side in ("stock", "patched")}


@pytest.mark.parametrize("index", range(len(CASES)), ids=[case.name for case in CASES])
def test_case(reports, index):
    case = CASES[index]
    stock, patched = reports["stock"][index], reports["patched"][index]
    assert stock["case"] == patched["case"] == case.name
    assert matches(case.stock, stock), stock
    assert matches(case.overlay, patched), patched
    assert stock["guard_hook_calls"] == 0


def test_lifted_cases_build_a_gdn_replayssm_fold_pool(reports):
    for result in reports["patched"]:
        if result["outcome"] == "accepted" and result["case"].startswith("GDN +") and "off" not in result["case"]:
            assert result["pool"] == {
                "replayssm_spec_fold": True,
                "replayssm_is_kda": False,
                "replayssm_ring": False,
            }, result


def test_guard_hook_is_asked_only_where_stock_refuses(reports):
    for stock, patched in zip(reports["stock"], reports["patched"]):
        asked = patched["guard_hook_calls"] == 1
        assert asked == (stock["outcome"] == "refused"), (stock, patched)


def test_stock_accepted_cases_are_unchanged(reports):
    """Except the PD-decode pools the overlay refuses (stock builds them, then crashes at the first commit)."""
    for case, stock, patched in zip(CASES, reports["stock"], reports["patched"]):
        if stock["outcome"] == "accepted" and case.overlay == "accepted":
            assert patched == {**stock, "guard_hook_calls": 0}


def test_stock_builds_a_gdn_replayssm_fold_pool_on_a_pd_decode_server(reports):
    """Why the PD decode builder needs the overlay's hook: stock 0.5.19 has no guard there."""
    for case, stock in zip(CASES, reports["stock"]):
        if case.pd_decode and case.model == "qwen3-next" and case.replayssm_spec:
            assert stock["pool"] == {"replayssm_spec_fold": True, "replayssm_is_kda": False, "replayssm_ring": False}, (
                stock
            )
