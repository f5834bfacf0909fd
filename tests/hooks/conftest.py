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
