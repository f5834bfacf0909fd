"""`replayssm-overlay plan` on the command line: the plan, its refusals (exit 1), bad input (exit 2), `--help`.

Runs in a Python without torch or SGLang where one is at hand (the controller's case), else in this one
with both hidden. The bytes themselves are held to SGLang's pool builder in test_plan_builder_bytes.py;
here the measured numbers of README's table stand as the regression check.
"""

import json
import os
import pathlib
import shlex
import subprocess
import sys

import pytest

from replayssm_overlay.cli import main
from replayssm_overlay.patcher.releases import RING_RELEASES, SUPPORTED_RELEASES

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODELS = pathlib.Path(__file__).resolve().parent / "models"
M35 = str(MODELS / "Qwen3.5-35B-A3B")
RING_RELEASE = RING_RELEASES[-1]
HIDE_HEAVY = "import sys; sys.modules.update(torch=None, triton=None, sglang=None); "


def plan(*args: str) -> tuple:
    """(exit code, stdout, stderr) of `python -m replayssm_overlay plan ARGS` where torch, Triton and SGLang
    cannot be imported."""
    code = HIDE_HEAVY + "from replayssm_overlay.cli import main; sys.exit(main(sys.argv[1:]))"
    run = subprocess.run(
        [sys.executable, "-c", code, "plan", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(ROOT / "overlay")),
    )
    return run.returncode, run.stdout, run.stderr


def plan_json(*args: str) -> tuple:
    rc, out, err = plan(*args, "--json")
    return rc, json.loads(out) if out else None, err


def test_measured_qwen35_35b_tp1_window_16_on_the_fold_release():
    """The builder's bytes (README's "Why ReplaySSM"): 1.08 GB off, 79.3 MB on per running request."""
    rc, doc, _ = plan_json("--model", M35, "--release", "0.5.19", "--algorithm", "DFLASH", "--window", "16")
    assert rc == 0 and doc["ok"]
    assert doc["per_request_bytes"] == {"off": 1_079_869_440, "on": 79_257_600}
    assert doc["ratio"] == 13.62 and doc["protocol"] == "fold" and doc["ring_fits"] is None
    assert doc["model"]["gdn_layers"] == 30 and doc["fit"] is None


def test_the_three_families_plan_on_every_release():
    for name in sorted(path.name for path in MODELS.iterdir() if path.is_dir()):
        for release in SUPPORTED_RELEASES:
            rc, doc, err = plan_json(
                "--model",
                str(MODELS / name),
                "--release",
                release,
                "--tp",
                "8",
                "--algorithm",
                "DSPARK",
                "--window",
                "8",
                "--ring-len",
                "16",
            )
            assert rc == 0, err
            assert doc["per_request_bytes"]["off"] > doc["per_request_bytes"]["on"] > 0


def test_ring_release_refuses_a_ring_that_does_not_fit_the_window():
    """The ring rule of hooks/ring_fit.py: the default ring of 16 fits a window of 16 (a ring of exactly N),
    a window of 12 needs 2N, the next power of two: 32."""
    rc, doc, _ = plan_json("--model", M35, "--release", RING_RELEASE, "--algorithm", "DFLASH", "--window", "16")
    assert rc == 0 and doc["ring_fits"] is True and doc["smallest_ring"] == 16
    rc, doc, _ = plan_json("--model", M35, "--release", RING_RELEASE, "--algorithm", "DFLASH", "--window", "12")
    assert rc == 1 and not doc["ok"] and doc["ring_fits"] is False and doc["smallest_ring"] == 32
    assert "--linear-replayssm-cache-len 32" in doc["refusals"][0]
    rc, doc, _ = plan_json(
        "--model", M35, "--release", RING_RELEASE, "--algorithm", "DFLASH", "--window", "12", "--ring-len", "32"
    )
    assert rc == 0 and doc["ring_fits"] is True


def test_fit_counts_requests_and_refuses_fewer_than_max_running_requests(tmp_path):
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": 40 * 2**30}, "weight_map": {}}))
    common = (
        "--model",
        M35,
        "--release",
        "0.5.19",
        "--algorithm",
        "DFLASH",
        "--window",
        "16",
        "--gpu-memory-gib",
        "80",
        "--weights",
        str(tmp_path),
        "--mem-fraction-static",
        "0.85",
    )
    rc, doc, _ = plan_json(*common)
    fit = doc["fit"]
    assert rc == 0 and fit["weights_gib_per_gpu"] == 40 and fit["slots_per_request"] == 3
    assert fit["requests"]["on"] > 5 * fit["requests"]["off"] > 0  # 3 state slots a request dilute the 13.6x
    wanted = fit["requests"]["on"] + 1
    rc, doc, _ = plan_json(*common, "--max-running-requests", str(wanted))
    assert rc == 1 and doc["fit"]["holds"] is False
    assert f"lower --max-running-requests to {wanted - 1}" in doc["refusals"][0]
    rc, doc, _ = plan_json(*common, "--max-running-requests", str(wanted - 1))
    assert rc == 0 and doc["fit"]["holds"] is True
    rc, doc, _ = plan_json(*common, "--mamba-radix-cache-strategy", "extra_buffer")
    assert doc["fit"]["slots_per_request"] == 5 and doc["fit"]["requests"]["on"] < wanted - 1


def test_table_names_both_sides_and_the_ratio():
    rc, out, _ = plan("--model", M35, "--release", "0.5.19", "--algorithm", "DFLASH", "--window", "16")
    assert rc == 0
    assert "ReplaySSM off" in out and "ReplaySSM on" in out and "1079.9 MB" in out and "79.3 MB" in out
    assert "ratio off/on: 13.62x" in out


def _config(tmp_path, **changes) -> str:
    config = json.loads((MODELS / "Qwen3-Next-80B-A3B-Instruct" / "config.json").read_text())
    config.update(changes)
    config = {k: v for k, v in config.items() if v is not None}
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


@pytest.mark.parametrize(
    "change, args, words",
    [
        ({"model_type": "llama"}, (), ("model_type 'llama' is not a hybrid GDN model",)),
        ({"linear_num_value_heads": None}, (), ("linear_num_value_heads is missing",)),
        ({}, ("--window", "1"), ("--window 1", "at least 2")),
        ({}, ("--algorithm", "EAGLE"), ("--algorithm EAGLE", "DFLASH")),
        ({}, ("--ring-len", "24"), ("--ring-len 24", "power of two", "fix: pass 16")),
        ({}, ("--tp", "3"), ("attention TP 3 does not divide", "linear_num_key_heads (16)", "1, 2, 4, 8, 16")),
        ({}, ("--tp", "8", "--dp", "3"), ("--dp 3",)),
        ({}, ("--release", "0.5.18"), ("SGLang 0.5.18 is not a release", ", ".join(SUPPORTED_RELEASES))),
        ({}, ("--gpu-memory-gib", "80"), ("--weights",)),
        ({}, ("--gpu-memory-gib", "80", "--weights", "/nonexistent/model"), ("/nonexistent/model",)),
        ({}, ("--gpu-memory-gib", "80", "--weights-gib", "200"), ("leave nothing", "--mem-fraction-static above")),
    ],
)
def test_bad_input_names_the_field_and_the_fix_and_exits_2(tmp_path, change, args, words):
    base = {"--release": "0.5.19", "--algorithm": "DFLASH", "--window": "8", "--ring-len": "16"}
    base.update(dict(zip(args[::2], args[1::2])))
    flat = [item for pair in base.items() for item in pair if item is not None]
    rc, doc, err = plan_json("--model", _config(tmp_path, **change), *flat)
    assert rc == 2, err
    assert doc["ok"] is False and doc["fix"]
    for word in words:
        assert word in err, err


def test_help_has_an_example_for_each_family_and_each_runs(capsys, tmp_path):
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    text = capsys.readouterr().out
    examples = [
        line.strip()
        for line in text.replace("\\\n", " ").splitlines()
        if line.strip().startswith("replayssm-overlay plan")
    ]
    names = sorted(path.name for path in MODELS.iterdir() if path.is_dir())
    assert len(examples) == 3 and all(any(name in example for example in examples) for name in names)
    for example in examples:
        argv = shlex.split(example.replace("/models/", str(MODELS) + "/"))[2:]
        if "--weights" in argv:  # no weights here: their size instead
            at = argv.index("--weights")
            argv[at : at + 2] = ["--weights-gib", "150"]
        rc, _, err = plan(*argv)
        assert rc in (0, 1), (example, err)


def test_readme_table_is_the_plans():
    """Every row of README's "Why ReplaySSM" table, recomputed by the plan (0.5.19, and 0.5.23 for the rings)."""
    text = (ROOT / "README.md").read_text().split("## Why ReplaySSM", 1)[1].split("\n## ", 1)[0]
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("| Qwen")
    ]
    assert len(rows) >= 9
    names = {path.name.split("-Instruct")[0]: path for path in MODELS.iterdir() if path.is_dir()}

    def shown(size: int) -> str:
        return f"{size / 1e6:,.1f} MB" if size < 1e9 else f"{size / 1e9:.2f} GB"

    for name, tp, window, off, on, ratio, ring, ring_on, ring_ratio in rows:
        common = ("--model", str(names[name]), "--tp", tp, "--algorithm", "DFLASH", "--window", window)
        _, fold, _ = plan_json(*common, "--release", "0.5.19")
        _, ringed, _ = plan_json(*common, "--release", RING_RELEASE, "--ring-len", ring)
        assert int(ring) == ringed["smallest_ring"]
        assert [off, on, ratio, ring_on, ring_ratio] == [
            shown(fold["per_request_bytes"]["off"]),
            shown(fold["per_request_bytes"]["on"]),
            f"{fold['ratio']:.1f}x",
            shown(ringed["per_request_bytes"]["on"]),
            f"{ringed['ratio']:.1f}x",
        ], name
