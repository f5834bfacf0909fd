"""Patched SGLang files with the overlay package missing or broken behave exactly like stock 0.5.19.

A copy of the installed SGLang is patched, and `harness.probe` runs against it in a subprocess whose
PYTHONPATH puts first a planted `replayssm_overlay` package that raises ImportError (the overlay
"uninstalled or failing to import"). Every configurator case (KDA, Mamba2, GDN, PD decode) must give
stock's outcome and message, every commit must run SGLang's own body (the same crash stock has on a
GDN ReplaySSM pool), and each patched module must say once, at import, that the overlay is not
importable and how to fix it.
"""

import pytest

from harness import sandbox

pytestmark = pytest.mark.probe  # harness.probe against copies of SGLang: not in make test-fast

STOCK_CRASH = "AttributeError: 'NoneType' object has no attribute 'device'"


@pytest.fixture(scope="module")
def reports():
    stock = sandbox.stock_and_patched_reports()["stock"]
    with sandbox.sglang_copy() as copy:
        sandbox.apply_overlay(copy)
        hidden = sandbox.run_probe(copy, quiet=True, overlay_importable=False)
    return stock, hidden


def _without_hook_counts(results):
    return [{k: v for k, v in r.items() if k != "guard_hook_calls"} for r in results]


def test_the_probe_really_ran_without_the_overlay(reports):
    stock, hidden = reports
    assert stock["overlay_importable"] and not hidden["overlay_importable"]
    assert all(r["guard_hook_calls"] is None for r in hidden["configurator"])


def test_configurator_cases_are_stocks_outcomes_and_messages(reports):
    stock, hidden = reports
    assert _without_hook_counts(hidden["configurator"]) == _without_hook_counts(stock["configurator"])
    refused = [r for r in hidden["configurator"] if r["outcome"] == "refused"]
    assert refused and all("requires a KDA" in r["message"] for r in refused)


def test_commits_run_sglangs_own_body(reports):
    stock, hidden = reports
    for before, after in zip(stock["cycle"], hidden["cycle"]):
        assert not after["committed"] and after["error"] == before["error"], after
        assert after["error"].startswith(STOCK_CRASH)


def test_each_patched_module_says_once_why_and_how_to_fix(reports):
    _, hidden = reports
    lines = [line for line in hidden["overlay_log"] if "not importable" in line["message"]]
    loggers = [line["logger"] for line in lines]
    assert sorted(loggers) == sorted(set(loggers)), "logged more than once per file"
    assert {
        "sglang.srt.mem_cache.kv_cache_configurator",
        "sglang.srt.speculative.dflash_worker_v2",
        "sglang.srt.speculative.dspark_components.dspark_worker_v2",
    } == set(loggers)
    for line in lines:
        assert line["level"] == "ERROR"
        assert "hidden by the test" in line["message"] and "fix: install the replayssm-overlay wheel" in line["message"]
