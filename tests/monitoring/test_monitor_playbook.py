"""deploy/playbooks/monitor.yml refuses bad input on the controller, before any node is contacted: a node
without --enable-metrics, a smoke prompt file that does not parse, a thresholds file without a baseline for
the node's model, unusable settings. Each is one clear message naming the node; the node (a loopback
port nothing listens on) is never reached. (The install itself, on real nodes, is tests/deploy/test_watch.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.infra.prometheus import free_port
from tests.monitoring.conftest import ansible_playbook

NODE = {
    "ansible_host": "127.0.0.1",  # never contacted: nothing listens on the port
    "ansible_port": free_port(),
    "sglang_model_path": "/models/Qwen3.5-35B-A3B",
    "sglang_speculative_algorithm": "DFLASH",
    "sglang_flags": {"enable-linear-replayssm-spec": True, "enable-metrics": True},
}


def _monitor(tmp_path, **overrides):
    return ansible_playbook(tmp_path, "monitor.yml", {"sglang_nodes": {"hosts": {"gpu01": {**NODE, **overrides}}}})


def _cases(tmp_path: Path) -> dict:
    bad_prompts = tmp_path / "prompts.jsonl"
    bad_prompts.write_text('{"id": "c1", "class": "code", "prompt": "def f():"}\n{"id": "c2", "class": "code"}\n')
    no_baseline = tmp_path / "thresholds.yaml"
    no_baseline.write_text('profiles: [{name: site, match: ["*"], acceptance: {code: {min_mean_accept_length: 2}}}]\n')
    return {
        "no --enable-metrics": (
            {"sglang_flags": {"enable-linear-replayssm-spec": True}},
            "gpu01: sglang-overlay runs SGLang without --enable-metrics",
        ),
        "prompt file that does not parse": (
            {"sglang_monitor_smoke_prompts": str(bad_prompts)},
            f"nothing was installed: {bad_prompts}:2: give exactly one of 'prompt' or 'input_ids'",
        ),
        "thresholds without a baseline for the model": (
            {"sglang_monitor_smoke_thresholds": str(no_baseline), "sglang_monitor_smoke_args": ["--classes", "code"]},
            f"{no_baseline}: profile 'site' (model '/models/Qwen3.5-35B-A3B') has no baseline_accept_length for "
            "class(es) ['code']",
        ),
        "the built-in thresholds have no baseline for this model": (
            {"sglang_model_path": "/models/Llama-3-70B"},
            "profile 'default' (model '/models/Llama-3-70B') has no baseline_accept_length",
        ),
        "unknown scheduler": (
            {"sglang_monitor_scheduler": "cron"},
            "sglang_monitor_scheduler must be one of: systemd, none",
        ),
        "bad smoke argument": (
            {"sglang_monitor_smoke_args": ["--concurrency", "0"]},
            "--concurrency must be in [1, 64]",
        ),
    }


@pytest.mark.parametrize("case", list(_cases(Path("/tmp"))))
def test_bad_input_is_refused_before_any_node_is_contacted(tmp_path, case):
    overrides, message = _cases(tmp_path)[case]
    proc = _monitor(tmp_path, **overrides)
    assert proc.returncode != 0
    flat = " ".join(proc.stdout.split())
    assert message in flat, proc.stdout[-3000:]
    assert "UNREACHABLE" not in proc.stdout and "Look for node_exporter's textfile folder" not in proc.stdout


def test_a_good_inventory_gets_past_the_controller_checks(tmp_path):
    """The same inventory with nothing wrong (--enable-metrics as a verbatim argument here) reaches the first task
    on the node (which then cannot connect)."""
    proc = _monitor(
        tmp_path,
        ansible_ssh_common_args="-o ConnectTimeout=1",
        sglang_flags={"enable-linear-replayssm-spec": True},
        sglang_extra_args=["--enable-metrics"],
    )
    assert "The smoke inputs are valid" in proc.stdout and "Look for node_exporter's textfile folder" in proc.stdout
    assert "UNREACHABLE" in proc.stdout
