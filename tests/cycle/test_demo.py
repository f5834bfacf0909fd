"""The demo's verdict and tables, from the same stock/patched reports the end-to-end tests use (the demo
itself, `python -m harness.demo`, runs exactly these steps with progress output)."""

import copy

import pytest

from harness import demo, sandbox, verdict

pytestmark = pytest.mark.probe  # harness.probe against copies of SGLang: not in make test-fast


@pytest.fixture(scope="module")
def reports():
    return sandbox.stock_and_patched_reports()


def test_everything_as_expected_renders_a_passing_summary(reports):
    result = demo.summarize(reports, seed=0, seconds=1.0)
    assert result["ok"] and result["patched_files"] == 3
    text = demo.render(result)
    assert "everything as expected" in text and "NO" not in text.split()
    assert "SGLANG_RAGGED_VERIFY_MODE=static" in text


def test_a_patched_commit_that_is_not_bitwise_equal_fails_the_demo(reports):
    broken = copy.deepcopy(reports)
    broken["patched"]["cycle"][0]["bitwise_equal"] = False
    result = demo.summarize(broken, seed=0, seconds=1.0)
    assert not result["ok"] and not result["cycle"][0]["ok"]
    assert "SOME ROWS NOT AS EXPECTED" in demo.render(result)


def test_a_stock_commit_that_does_not_crash_fails_the_demo(reports):
    broken = copy.deepcopy(reports)
    broken["stock"]["cycle"][1].update(committed=True, error=None)
    assert not verdict.evaluate(broken["stock"], broken["patched"])["ok"]


def test_a_fold_other_than_the_one_asked_for_fails_the_demo(reports):
    """The shared reports ran with the environment's fold choice; asking for the other one must fail."""
    used = reports["patched"]["fold"]["fold"]
    asked, other = ("triton", "sglang") if used == "overlay-triton" else ("sglang", "triton")
    assert demo.summarize(reports, seed=0, seconds=1.0, fold=asked)["ok"]
    assert not demo.summarize(reports, seed=0, seconds=1.0, fold=other)["ok"]
