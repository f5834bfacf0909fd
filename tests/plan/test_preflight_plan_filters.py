"""The preflight's plan filters (deploy/roles/sglang_preflight/filter_plugins/sglang_plan.py) without Ansible
running: the `replayssm-overlay plan` arguments taken from an inventory's SGLang flags, and the table. The
playbook around them runs in tests/deploy/test_static.py."""

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location(
    "sglang_plan", ROOT / "deploy" / "roles" / "sglang_preflight" / "filter_plugins" / "sglang_plan.py"
)
plan_filters = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plan_filters)


def test_flags_become_plan_arguments():
    flags = {
        "--enable-linear-replayssm-spec": True,
        "speculative-dspark-block-size": 7,
        "mem-fraction-static": 0.8,
        "max-running-requests": 64,
        "linear-replayssm-cache-len": 32,
        "mamba-ssm-dtype": "bfloat16",
        "enable-dp-attention": True,
        "dp-size": 2,
        "disable-radix-cache": True,
        "mamba-scheduler": None,
    }
    setup = plan_filters.sglang_plan_setup(flags, "dspark", 8, "0.5.23")
    assert setup == {
        "skip": "",
        "fit": True,
        "args": [
            "--release",
            "0.5.23",
            "--tp",
            "8",
            "--dp",
            "2",
            "--algorithm",
            "DSPARK",
            "--window",
            "8",
            "--ring-len",
            "32",
            "--mamba-ssm-dtype",
            "bfloat16",
            "--disable-radix-cache",
            "--max-running-requests",
            "64",
            "--mem-fraction-static",
            "0.8",
        ],
    }


def test_no_plan_without_replayssm_a_release_or_a_window():
    on = {"enable-linear-replayssm-spec": True, "speculative-num-draft-tokens": 16}
    assert (
        "DFLASH/DSPARK"
        in plan_filters.sglang_plan_setup({**on, "enable-linear-replayssm-spec": False}, "DFLASH", 1, "0.5.19")["skip"]
    )
    assert "release unknown" in plan_filters.sglang_plan_setup(on, "DFLASH", 1, "")["skip"]
    assert (
        "verify window"
        in plan_filters.sglang_plan_setup({"enable-linear-replayssm-spec": True}, "DFLASH", 1, "0.5.19")["skip"]
    )
    assert plan_filters.sglang_plan_setup(on, "DFLASH", 1, "0.5.19")["fit"] is False


def test_fit_arguments_take_the_smallest_gpu_and_every_weight_file():
    assert plan_filters.sglang_plan_fit_args(["81559", "143771"], [2**30, 2**31]) == [
        "--gpu-memory-gib",
        "79.647",
        "--weights-gib",
        "3.000",
    ]
    assert plan_filters.sglang_plan_fit_args(["NVIDIA H100, 9.0, 580.65.06"], [1]) == []


def test_table_has_one_line_per_group():
    plan = {
        "tp": 4,
        "window": 16,
        "ring_len": 32,
        "per_request_bytes": {"off": 270_000_000, "on": 19_800_000},
        "requests_per_gb": {"off": 3.7, "on": 50.47},
        "fit": {"requests": {"on": 288}, "max_running_requests": 48},
    }
    rows = [
        {"group": "dflash_gdn", "model": "Qwen3.5-35B-A3B", "plan": plan, "note": ""},
        {"group": "dflash_gdn", "model": "Qwen3.5-35B-A3B", "plan": plan, "note": ""},
        {"group": "dspark", "model": "Qwen3-Next", "plan": None, "note": "SGLang release unknown"},
    ]
    lines = plan_filters.sglang_plan_table(rows)
    assert len(lines) == 3 and lines[0].split()[:2] == ["GROUP", "MODEL"]
    assert lines[1].split() == ["dflash_gdn", "Qwen3.5-35B-A3B", "4", "16", "32", "270.0/19.8", "3.70/50.47", "288/48"]
    assert lines[2].endswith("no plan: SGLang release unknown")
