"""Stock and patched on each circular-ring release's real code (0.5.20 on), CPU, Triton interpreter.

For every release a copy of its SGLang tree is made in a temporary directory; `harness.probe` runs in a
subprocess importing the copy before the overlay is applied (stock) and after (patched):
- the configurator: stock refuses DFLASH/DSPARK + --enable-linear-replayssm-spec on GDN ("requires a
  KDA"), the patched one accepts DFLASH and DSPARK static on GDN and builds the ring pool, refuses
  DSPARK compact/cap-accept naming SGLANG_RAGGED_VERIFY_MODE=static, and is stock for everything else;
- the commit: stock DFLASH and DSPARK crash on the ring pool; patched, every multi-step scenario
  (`harness.ring_cycle.RING_SCENARIOS`: bonus only, all accepted, 42 steps of mixed lengths, padded
  rows, track crossings, flush on every commit) leaves the state, ring and cursors bitwise equal after
  EVERY step to what SGLang's own MTP commit of that release produces on the same pool and inputs, and
  the ring's distance from the verify recurrence replayed token by token stays within
  `RING_ERROR_BOUND`.
The four releases run two at a time (each probe is one process).
"""

import concurrent.futures

import pytest

from harness import pd_decode, sandbox
from harness.configurator_probe import CASES, matches
from harness.release_trees import OTHER_RELEASES
from harness.ring_cycle import RING_ERROR_BOUND, RING_SCENARIOS
from replayssm_overlay import protocol

pytestmark = pytest.mark.probe  # harness.probe against copies of SGLang: not in make test-fast

STOCK_CRASH = "'NoneType' object has no attribute 'device'"


@pytest.fixture(scope="module")
def reports(tree_of):
    for release in OTHER_RELEASES:
        tree_of(release)  # fail early, naming `make setup`, if one is missing
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {r: pool.submit(sandbox.stock_and_patched_reports, 0, r) for r in OTHER_RELEASES}
        return {release: future.result() for release, future in futures.items()}


@pytest.mark.parametrize("release", OTHER_RELEASES)
def test_the_patcher_identifies_the_release(reports, release):
    patch = reports[release]["patch"]
    assert patch["release"] == release and not patch["unverified"]


@pytest.mark.parametrize("release", OTHER_RELEASES)
def test_configurator_stock_refuses_and_the_overlay_rule_holds(reports, release):
    for part, side in (("stock", "stock"), ("patched", "overlay")):
        results = {r["case"]: r for r in reports[release][part]["configurator"]}
        for case in CASES:
            expected = case.expected(side, "ring")
            assert matches(expected, results[case.name]), (part, case.name, results[case.name])
    accepted_gdn = [
        r for r in reports[release]["patched"]["configurator"] if r["outcome"] == "accepted" and "GDN" in r["case"]
    ]
    assert all(
        r["pool"]["replayssm_ring"] and not r["pool"]["replayssm_spec_fold"]
        for r in accepted_gdn
        if "ReplaySSM off" not in r["case"]
    ), accepted_gdn


@pytest.mark.parametrize("release", OTHER_RELEASES)
def test_stock_dflash_and_dspark_commits_crash_on_the_ring_pool(reports, release):
    stock = reports[release]["stock"]
    assert stock["protocol"] == "ring"
    assert {r["algorithm"] for r in stock["ring_cycle"]} == {"DFLASH", "DSPARK"}
    for result in stock["ring_cycle"]:
        assert result["committed_steps"] == 0 and STOCK_CRASH in result["error"], result


@pytest.mark.parametrize("release", OTHER_RELEASES)
def test_patched_commits_are_sglangs_mtp_commit_bitwise_at_every_step(reports, release):
    results = reports[release]["patched"]["ring_cycle"]
    assert [(r["scenario"], r["algorithm"]) for r in results] == [(s.name, s.algorithm) for s in RING_SCENARIOS]
    for result in results:
        assert result["error"] is None and result["committed_steps"] == result["steps"], result
        assert result["bitwise_equal_to_mtp"] and not result["mismatched_tensors"], result


@pytest.mark.parametrize("release", OTHER_RELEASES)
def test_the_pd_decode_pool_commits_as_mtp_patched_and_crashes_stock(reports, release):
    """A `--disaggregation-mode decode` server's pool, built by the release's own
    `_build_hybrid_mamba_decode_req_pool`: stock crashes at the first commit; patched, every step is bitwise
    SGLang's MTP commit on that pool (`harness.pd_decode`)."""
    stock, patched = reports[release]["stock"]["pd_decode_cycle"], reports[release]["patched"]["pd_decode_cycle"]
    assert {r["algorithm"] for r in stock} == {"DFLASH", "DSPARK"}
    assert all(r["committed_steps"] == 0 and STOCK_CRASH in r["error"] for r in stock), stock
    assert [(r["scenario"], r["algorithm"]) for r in patched] == list(pd_decode.RING_SCENARIOS)
    for result in patched:
        assert result["error"] is None and result["bitwise_equal_to_mtp"], result
        assert max(result["relative_rms"]) <= RING_ERROR_BOUND


@pytest.mark.parametrize("release", OTHER_RELEASES)
def test_the_protocol_read_from_the_tree_is_the_pool_sglang_builds(reports, release, tree_of):
    """`replayssm_overlay.protocol` (the configurator's and status's answer, read from the files) agrees
    with the pool the release's own code builds (`harness.probe.pool_protocol`); 0.5.19 in tests/cycle."""
    assert protocol.of_tree(tree_of(release)) == reports[release]["stock"]["protocol"] == protocol.RING


@pytest.mark.parametrize("release", OTHER_RELEASES)
def test_the_scenarios_cover_flushes_wraps_tracks_and_a_long_run(reports, release):
    results = {(r["scenario"], r["algorithm"]): r for r in reports[release]["patched"]["ring_cycle"]}
    assert results[("bonus only", "DFLASH")]["flushes"] >= 1
    assert results[("all accepted", "DFLASH")]["wraps"] >= 1
    assert results[("flush every commit (L = N)", "DFLASH")]["flushes"] == 2
    assert all(results[("track crossing", a)]["tracked_steps"] >= 3 for a in ("DFLASH", "DSPARK"))
    long_run = results[("mixed lengths", "DSPARK")]
    assert long_run["steps"] >= 40 and long_run["flushes"] >= 10 and long_run["wraps"] >= 1


@pytest.mark.parametrize("release", OTHER_RELEASES)
def test_the_distance_from_the_recurrence_stays_within_the_documented_bound(reports, release):
    for result in reports[release]["patched"]["ring_cycle"]:
        distances = result["relative_rms"] + result["track_relative_rms"]
        assert distances and max(distances) <= RING_ERROR_BOUND, (result["scenario"], max(distances))
        assert max(result["relative_rms"]) > 0  # the ring is not the recurrence: a 0 means nothing was measured
