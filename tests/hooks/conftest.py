"""SGLang's GPU code paths run on the CPU here: Triton's interpreter is enabled before any SGLang kernel
is imported, and the conv scatter's CUDA-only check is relaxed (harness.on_cpu)."""

from harness import on_cpu

on_cpu.prepare()

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def self_check_records_in_tmp(monkeypatch, tmp_path):
    """The configurator rule runs the node's self-check, which writes a record: keep it in the test's tmp."""
    from replayssm_overlay import records

    monkeypatch.setenv(records.ENV_DIR, str(tmp_path / "rso-state"))


@pytest.fixture(autouse=True)
def no_pending_warm_up():
    """A test that lifts the refusal without building a pool leaves the warm-up's wrapper of MambaPool's
    constructor pending (`replayssm_overlay.sglang_warmup`; a server builds its pool next): put the
    constructor back after each test, so no later test's pool is warmed."""
    yield
    from sglang.srt.mem_cache.memory_pool import MambaPool

    from replayssm_overlay import sglang_warmup

    original = getattr(MambaPool.__init__, sglang_warmup._MARK, None)
    if original is not None:
        MambaPool.__init__ = original
