"""The smoke suite as a periodic job: `--prom-out` (the result as Prometheus text, also on a failed or
stopped run, with the last success and the baselines carried over), `--prom-label`, `--no-metrics-gate`, and
`--check-inputs` (the files and the model's baseline validated without a server)."""

from __future__ import annotations

import subprocess

import pytest

from replayssm_overlay.promtext import value_of


def _prom(tmp_path, smoke, url, *extra):
    out = tmp_path / "textfile" / "smoke.prom"
    out.parent.mkdir(exist_ok=True)
    code, doc, text = smoke(
        "--target",
        url,
        "--prom-out",
        str(out),
        "--prom-label",
        "service=sglang-overlay",
        "--prom-label",
        "sglang_port=30000",
        *extra,
    )
    return code, doc, out.read_text()


def test_a_passing_run_writes_its_result_as_prometheus_text(tmp_path, double, smoke):
    code, doc, text = _prom(tmp_path, smoke, double())
    assert code == 0, text
    labels = 'service="sglang-overlay",sglang_port="30000"'
    assert f"replayssm_smoke_success{{{labels}}} 1\n" in text
    assert f'replayssm_smoke_accept_length_baseline{{class="code",{labels}}} 2.8\n' in text  # the built-in profile's
    for cls, stats in doc["acceptance"].items():
        assert f'replayssm_smoke_accept_length{{class="{cls}",{labels}}} {stats["mean_accept_length"]!r}' in text
    finished = value_of(text, "replayssm_smoke_last_run_timestamp_seconds")
    assert value_of(text, "replayssm_smoke_last_success_timestamp_seconds") == finished
    assert f'replayssm_smoke_divergences{{kind="teacher_forced_violation",{labels}}} 0' in text
    promtool = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert promtool.returncode == 0, promtool.stdout + promtool.stderr
    assert sorted(p.name for p in (tmp_path / "textfile").iterdir()) == ["smoke.prom"]


def test_failed_and_stopped_runs_keep_the_last_success(tmp_path, double, smoke):
    _, _, passed = _prom(tmp_path, smoke, double())
    success = value_of(passed, "replayssm_smoke_last_success_timestamp_seconds")
    code, _, failed = _prom(tmp_path, smoke, double("--accept-length", "1.0"))
    assert code == 1
    assert value_of(failed, "replayssm_smoke_success") == 0 and value_of(failed, "replayssm_smoke_exit_code") == 1
    assert (
        'replayssm_smoke_gate_passed{gate="acceptance.code",service="sglang-overlay",sglang_port="30000"} 0' in failed
    )
    assert value_of(failed, "replayssm_smoke_last_success_timestamp_seconds") == success
    assert value_of(failed, "replayssm_smoke_last_run_timestamp_seconds") > success
    code, doc, stopped = _prom(tmp_path, smoke, "http://127.0.0.1:9")  # nothing listens: exit 2
    assert code == 2 and doc["exit_code"] == 2
    assert value_of(stopped, "replayssm_smoke_exit_code") == 2 and value_of(stopped, "replayssm_smoke_success") == 0
    assert value_of(stopped, "replayssm_smoke_last_success_timestamp_seconds") == success
    assert "replayssm_smoke_accept_length{" not in stopped
    # the baselines stay: the dead-draft alerts compare the live accept length with them
    baselines = [line for line in passed.splitlines() if line.startswith("replayssm_smoke_accept_length_baseline{")]
    assert len(baselines) == 4 and all(line + "\n" in stopped for line in baselines)


def test_without_a_baseline_no_baseline_series_is_written(tmp_path, double, smoke):
    thresholds = tmp_path / "t.yaml"
    thresholds.write_text(
        'profiles: [{name: plain, match: ["*"], acceptance: {code: {min_mean_accept_length: 1.5}}}]\n'
    )
    code, _, text = _prom(tmp_path, smoke, double(), "--thresholds", str(thresholds), "--classes", "code")
    assert code == 0
    assert "replayssm_smoke_accept_length{" in text and "replayssm_smoke_accept_length_baseline" not in text


def test_no_metrics_gate_reports_the_cross_check_without_gating(double, smoke):
    url = double()
    _, gated, _ = smoke("--target", url)
    _, reported, _ = smoke("--target", url, "--no-metrics-gate")
    assert gated["metrics_cross_check"]["passed"] is True
    assert reported["metrics_cross_check"]["passed"] is None
    assert reported["metrics_cross_check"]["accept_length_from_metrics"] is not None


def test_check_inputs_accepts_good_files(smoke, capsys):
    from replayssm_smoke import cli

    assert (
        cli.main(
            ["--check-inputs", "--model", "/models/Qwen3.5-35B-A3B", "--algorithm", "DFLASH", "--require-baseline"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "inputs OK: 20 prompts in classes code, json, math, prose" in out
    assert "profile 'qwen3-next-gdn-dflash' for /models/Qwen3.5-35B-A3B, baseline for code, json, math, prose" in out


@pytest.mark.parametrize("case", ["prompt file that does not parse", "no baseline for the model"])
def test_check_inputs_refuses_with_a_clear_message(tmp_path, capsys, case):
    from replayssm_smoke import cli

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"id": "a", "class": "code", "prompt": "x"}\n{"id": "b", "class": "code", "prompt": \n')
    argv, message = {
        "prompt file that does not parse": (["--prompts", str(prompts)], f"{prompts}:2: not valid JSON"),
        "no baseline for the model": (
            ["--model", "/models/Llama-3-8B", "--require-baseline"],
            "profile 'default' (model '/models/Llama-3-8B') has no baseline_accept_length "
            "for class(es) ['code', 'json', 'math', 'prose']",
        ),
    }[case]
    assert cli.main(["--check-inputs", *argv]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--check-inputs", "--require-baseline"], "--require-baseline needs --model"),
        (["--target", "http://x:1", "--record", "g.json", "--prom-out", "x.prom"], "--prom-out goes with a smoke run"),
        (["--target", "http://x:1", "--prom-label", "service"], "--prom-label 'service' is not KEY=VALUE"),
        (
            ["--target", "http://x:1", "--model", "m"],
            "--model, --algorithm and --require-baseline go with --check-inputs",
        ),
        ([], "--target is required (unless --check-inputs)"),
    ],
)
def test_usage_errors(capsys, argv, message):
    from replayssm_smoke import cli

    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
