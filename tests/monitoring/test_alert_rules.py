"""The fleet's rules with Prometheus's own tools: `promtool check rules` on the generated file, and
`promtool test rules` with a unit test for every alert, each with a case where it must fire and one where
it must not; no alert fires on an empty database, and data that is only missing fires only alerts that say
so. Expected annotations are spelled out where they are templated; static descriptions are the rule's own.
"""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from tests.infra.prometheus import tool
from tests.monitoring.conftest import REPO, load_alert_rules

RULES = load_alert_rules()
GENERATED = yaml.safe_load(RULES.render())["groups"][0]["rules"]
ALERTS = {r["alert"]: r for r in GENERATED if "alert" in r}

# Labels the node's textfile series carry (node_exporter's target) and SGLang's own target's
NODE = {"instance": "n1:9100", "job": "node", "service": "sglang-overlay", "sglang_port": "30000"}
SGLANG = {"instance": "n1:30000", "job": "sglang", "model_name": "qwen3.5", "tp_rank": "0"}


def series(name: str, labels: dict, values: str) -> dict:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def node(name: str, values: str, host: str = "n1", **extra) -> dict:
    return series(name, {**NODE, "instance": f"{host}:9100", **extra}, values)


def sglang(name: str, values: str, host: str = "n1") -> dict:
    return series(name, {**SGLANG, "instance": f"{host}:30000"}, values)


def fired(alert: str, summary: str, **labels) -> dict:
    """One expected alert: the rule's labels plus `labels`; its description with $labels filled in."""
    rule = ALERTS[alert]
    description = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], rule["annotations"]["description"])
    assert "{{" not in description, f"spell out the description of {alert} in the test"
    return {
        "exp_labels": {**rule["labels"], **labels},
        "exp_annotations": {"summary": summary, "description": description},
    }


WHERE = {"host": "n1", "service": "sglang-overlay", "instance": "n1:9100", "job": "node", "sglang_port": "30000"}
# one case per few lines (a table) reads better than one value per line
# fmt: off
# name -> (input series, eval time, alert, expected alerts)
CASES = {
    "live acceptance collapsed on one node": (
        [sglang("sglang:generation_tokens_total", "0+120x40"), sglang("sglang:spec_verify_calls_total", "0+100x40"),
         sglang("sglang:generation_tokens_total", "0+300x40", host="n2"),
         sglang("sglang:spec_verify_calls_total", "0+100x40", host="n2"),
         *(node("replayssm_smoke_accept_length_baseline", v, host=h, **{"class": c})
           for h in ("n1", "n2") for c, v in (("code", "3x40"), ("prose", "2.5x40")))],
        "30m", "ReplaySSMDraftAcceptanceCollapsed",
        [fired("ReplaySSMDraftAcceptanceCollapsed",
               "n1 (sglang-overlay): live accept length 1.20 is below 0.6 x its baseline",
               instance="n1:30000", host="n1", sglang_port="30000", service="sglang-overlay")]),
    "live acceptance: not before its for: duration": (
        [sglang("sglang:generation_tokens_total", "0+300x25 7620+120x15"),
         sglang("sglang:spec_verify_calls_total", "0+100x40"),
         node("replayssm_smoke_accept_length_baseline", "3x40", **{"class": "code"})],
        "30m", "ReplaySSMDraftAcceptanceCollapsed", []),
    "live acceptance: an idle node fires nothing": (
        [sglang("sglang:generation_tokens_total", "500x40"), sglang("sglang:spec_verify_calls_total", "400x40"),
         node("replayssm_smoke_accept_length_baseline", "3x40", **{"class": "code"})],
        "30m", "ReplaySSMDraftAcceptanceCollapsed", []),
    "smoke acceptance below its class baseline": (
        [node("replayssm_smoke_accept_length", "1.1x5", **{"class": "code"}),
         node("replayssm_smoke_accept_length_baseline", "2.8x5", **{"class": "code"}),
         node("replayssm_smoke_accept_length", "2.4x5", **{"class": "prose"}),
         node("replayssm_smoke_accept_length_baseline", "2.8x5", **{"class": "prose"})],
        "2m", "ReplaySSMSmokeAcceptanceBelowBaseline",
        [fired("ReplaySSMSmokeAcceptanceBelowBaseline",
               "n1 (sglang-overlay): periodic smoke accept length of class code is 1.10, below 0.6 x its baseline",
               **WHERE, **{"class": "code"})]),
    "smoke acceptance within its baseline": (
        [node("replayssm_smoke_accept_length", "2.0x5", **{"class": "code"}),
         node("replayssm_smoke_accept_length_baseline", "2.8x5", **{"class": "code"})],
        "2m", "ReplaySSMSmokeAcceptanceBelowBaseline", []),
    "serving with SGLang's fold": (
        [node("replayssm_overlay_fold_in_use", "1x10", fold="sglang"),
         node("replayssm_overlay_fold_in_use", "0x10", fold="overlay-cuda")],
        "8m", "ReplaySSMServingWithSGLangFold",
        [fired("ReplaySSMServingWithSGLangFold",
               "n1 (sglang-overlay): a serving process commits with SGLang's fold, not the overlay's",
               **WHERE, fold="sglang")]),
    "serving with the overlay's fold": (
        [node("replayssm_overlay_fold_in_use", "0x10", fold="sglang"),
         node("replayssm_overlay_fold_in_use", "1x10", fold="overlay-cuda")],
        "8m", "ReplaySSMServingWithSGLangFold", []),
    "self-check mismatch": (
        [node("replayssm_overlay_selfcheck_processes", "1x5", outcome="mismatch")],
        "1m", "ReplaySSMSelfCheckNotBitwise",
        [fired("ReplaySSMSelfCheckNotBitwise",
               "n1 (sglang-overlay): the self-check before serving ended in mismatch", **WHERE, outcome="mismatch")]),
    "self-check passed": (
        [node("replayssm_overlay_selfcheck_processes", "4x5", outcome="passed")],
        "1m", "ReplaySSMSelfCheckNotBitwise", []),
    "a new fallback shape": (
        [node("replayssm_overlay_fallback_shape", "_x2 1x3", shape="B=8 T=16 HV=32")],
        "4m", "ReplaySSMFallbackShape",
        [fired("ReplaySSMFallbackShape", "n1 (sglang-overlay): commit shape B=8 T=16 HV=32 runs SGLang's fold",
               **WHERE, shape="B=8 T=16 HV=32")]),
    "no fallback shape": (
        [node("replayssm_overlay_fallback_shapes", "0x5")], "4m", "ReplaySSMFallbackShape", []),
    "smoke failed": (
        [node("replayssm_smoke_success", "1 1 0 0")], "3m", "ReplaySSMSmokeFailed",
        [fired("ReplaySSMSmokeFailed", "n1 (sglang-overlay): the periodic smoke run failed", **WHERE)]),
    "smoke passed": (
        [node("replayssm_smoke_success", "0 0 1 1")], "3m", "ReplaySSMSmokeFailed", []),
    "smoke stale": (
        [node("replayssm_smoke_last_run_timestamp_seconds", "0x300")], "4h", "ReplaySSMSmokeStale",
        [fired("ReplaySSMSmokeStale", "Missing data: n1 (sglang-overlay): no periodic smoke result for 4h 0m 0s",
               **WHERE)]),
    "smoke fresh": (
        [node("replayssm_smoke_last_run_timestamp_seconds", "0+60x300")], "4h", "ReplaySSMSmokeStale", []),
    "a node left on another image": (
        [node("replayssm_node_image_info", "1x40", host=h, image_id=i, image=r)
         for h, i, r in (("n1", "sha256:aaa", "rso:v2"), ("n2", "sha256:aaa", "rso:v2"),
                         ("n3", "sha256:bbb", "rso:v1"))],
        "35m", "ReplaySSMNodeImageDiffers",
        [fired("ReplaySSMNodeImageDiffers",
               "n3 (sglang-overlay): runs image rso:v1, not the one most nodes of the service run",
               **{**WHERE, "host": "n3", "instance": "n3:9100"}, image_id="sha256:bbb", image="rso:v1")]),
    "image: no majority singles out nobody": (
        [node("replayssm_node_image_info", "1x40", host=h, image_id=i, image=r)
         for h, i, r in (("n1", "sha256:aaa", "rso:v2"), ("n2", "sha256:bbb", "rso:v1"))],
        "35m", "ReplaySSMNodeImageDiffers", []),
    "image: a rollout shorter than its for: duration": (
        [node("replayssm_node_image_info", v, host=h, image_id=i, image=r)
         for h, i, r, v in (("n1", "sha256:aaa", "rso:v2", "_x20 1x20"), ("n1", "sha256:bbb", "rso:v1", "1x20"),
                            ("n2", "sha256:bbb", "rso:v1", "1x40"), ("n3", "sha256:bbb", "rso:v1", "1x40"))],
        "35m", "ReplaySSMNodeImageDiffers", []),
    "node job stale": (
        [node("replayssm_node_job_timestamp_seconds", "0x40")], "30m", "ReplaySSMNodeJobStale",
        [fired("ReplaySSMNodeJobStale", "Missing data: n1 (sglang-overlay): the node job has not reported for 30m 0s",
               **WHERE)]),
    "node job fresh": (
        [node("replayssm_node_job_timestamp_seconds", "0+60x40")], "30m", "ReplaySSMNodeJobStale", []),
    "overlay metrics unavailable": (
        [node("replayssm_node_overlay_metrics_ok", "0x20", reason="container-not-running")], "16m",
        "ReplaySSMOverlayMetricsUnavailable",
        [fired("ReplaySSMOverlayMetricsUnavailable",
               "Missing data: n1 (sglang-overlay): no overlay facts from the container (container-not-running)",
               **WHERE, reason="container-not-running")]),
    "overlay metrics available": (
        [node("replayssm_node_overlay_metrics_ok", "1x20", reason="")], "16m",
        "ReplaySSMOverlayMetricsUnavailable", []),
    "SGLang without --enable-metrics": (
        [node("replayssm_node_sglang_metrics_enabled", "0x20")], "16m", "ReplaySSMSGLangMetricsDisabled",
        [fired("ReplaySSMSGLangMetricsDisabled",
               "Missing data: n1 (sglang-overlay): SGLang runs without --enable-metrics",
               **WHERE)]),
    "SGLang with --enable-metrics": (
        [node("replayssm_node_sglang_metrics_enabled", "1x20")], "16m", "ReplaySSMSGLangMetricsDisabled", []),
    "a speculating server without a baseline": (
        [sglang("sglang:spec_verify_calls_total", "0+10x20"), sglang("sglang:spec_verify_calls_total", "0+10x20", "n2"),
         node("replayssm_smoke_accept_length_baseline", "3x20", host="n2", **{"class": "code"})],
        "16m", "ReplaySSMAcceptanceUnwatched",
        [fired("ReplaySSMAcceptanceUnwatched", "Missing data: n1:30000 speculates but has no accept-length baseline",
               instance="n1:30000", host="n1", sglang_port="30000")]),
    "a speculating server with its baseline": (
        [sglang("sglang:spec_verify_calls_total", "0+10x20"),
         node("replayssm_smoke_accept_length_baseline", "3x20", **{"class": "code"})],
        "16m", "ReplaySSMAcceptanceUnwatched", []),
    "a node whose SGLang Prometheus does not scrape": (
        [node("replayssm_node_job_timestamp_seconds", "0+60x20"),
         node("replayssm_node_job_timestamp_seconds", "0+60x20", host="n2"),
         sglang("sglang:generation_tokens_total", "0+10x20", "n2")],
        "16m", "ReplaySSMSGLangNotScraped",
        [fired("ReplaySSMSGLangNotScraped",
               "Missing data: n1 (sglang-overlay): Prometheus has no SGLang metrics from port 30000", **WHERE)]),
    "a node whose SGLang is scraped": (
        [node("replayssm_node_job_timestamp_seconds", "0+60x20"), sglang("sglang:generation_tokens_total", "0+10x20")],
        "16m", "ReplaySSMSGLangNotScraped", []),
    "smoke scheduled but never written": (
        [node("replayssm_node_smoke_scheduled", "1x20"), node("replayssm_node_smoke_scheduled", "0x20", host="n2")],
        "16m", "ReplaySSMSmokeMissing",
        [fired("ReplaySSMSmokeMissing",
               "Missing data: n1 (sglang-overlay): the periodic smoke is scheduled but has never written a result",
               **WHERE)]),
    "smoke scheduled and written": (
        [node("replayssm_node_smoke_scheduled", "1x20"), node("replayssm_smoke_last_run_timestamp_seconds", "0+60x20")],
        "16m", "ReplaySSMSmokeMissing", []),
}
# fmt: on


def _promtool_test(tmp_path, promtool, tests: list[dict], overrides: dict | None = None) -> subprocess.CompletedProcess:
    (tmp_path / "rules.yml").write_text(RULES.render(overrides))
    (tmp_path / "test.yml").write_text(
        yaml.safe_dump({"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": tests}, sort_keys=False)
    )
    return subprocess.run(
        [promtool, "test", "rules", str(tmp_path / "test.yml")], capture_output=True, text=True, timeout=120
    )


def test_generated_rules_pass_promtool_check(tmp_path, promtool):
    path = tmp_path / "rules.yml"
    path.write_text(RULES.render())
    proc = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(GENERATED)} rules found" in proc.stdout


def test_every_alert_has_a_case_that_fires_and_one_that_does_not():
    firing = {alert for _, _, alert, expected in CASES.values() if expected}
    quiet = {alert for _, _, alert, expected in CASES.values() if not expected}
    assert firing == quiet == set(ALERTS)


@pytest.mark.parametrize("case", list(CASES))
def test_alert(case, tmp_path, promtool):
    inputs, at, alert, expected = CASES[case]
    test = {
        "interval": "1m",
        "input_series": inputs,
        "alert_rule_test": [{"eval_time": at, "alertname": alert, "exp_alerts": expected}],
    }
    proc = _promtool_test(tmp_path, promtool, [test])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _quiet_everywhere(inputs: list[dict], alerts) -> dict:
    return {
        "interval": "1m",
        "input_series": inputs,
        "alert_rule_test": [
            {"eval_time": at, "alertname": a, "exp_alerts": []} for a in alerts for at in ("5m", "1h", "5h")
        ],
    }


def test_an_empty_database_fires_nothing(tmp_path, promtool):
    proc = _promtool_test(tmp_path, promtool, [_quiet_everywhere([], ALERTS)])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_missing_data_fires_only_alerts_that_say_so(tmp_path, promtool):
    """A fleet where only SGLang is scraped, or only the node jobs: every alert that can fire is a
    missing-data alert whose summary says so, and the others stay quiet."""
    missing = {name for name, rule in ALERTS.items() if rule["labels"]["category"] == "missing-data"}
    assert all(ALERTS[name]["annotations"]["summary"].startswith("Missing data: ") for name in missing)
    assert not any(
        rule["annotations"]["summary"].startswith("Missing data")
        for name, rule in ALERTS.items()
        if name not in missing
    )
    only_sglang = [
        sglang("sglang:generation_tokens_total", "0+90x400"),
        sglang("sglang:spec_verify_calls_total", "0+30x400"),
    ]
    only_node = [
        node("replayssm_node_job_timestamp_seconds", "0+60x400"),
        node("replayssm_node_smoke_scheduled", "1x400"),
        node("replayssm_node_sglang_metrics_enabled", "1x400"),
        node("replayssm_node_overlay_metrics_ok", "1x400"),
    ]
    proc = _promtool_test(
        tmp_path,
        promtool,
        [_quiet_everywhere(only_sglang, set(ALERTS) - missing), _quiet_everywhere(only_node, set(ALERTS) - missing)],
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_settings_change_the_rules_and_bad_ones_are_refused(tmp_path, promtool):
    fast = {"for_live_acceptance": "10s", "live_window": "30s", "accept_ratio": "0.5", "evaluation_interval": "2s"}
    rules = yaml.safe_load(RULES.render(fast))["groups"][0]
    assert rules["interval"] == "2s"
    live = next(r for r in rules["rules"] if r.get("alert") == "ReplaySSMDraftAcceptanceCollapsed")
    assert live["for"] == "10s" and "(0.5 * replayssm:smoke_accept_length_baseline:min)" in live["expr"]
    assert "[30s]" in next(r for r in rules["rules"] if r.get("record"))["expr"]
    for bad, message in (
        ({"accept_ratio": "1.5"}, "accept_ratio must be a number in (0, 1]"),
        ({"for_fold": "soon"}, "for_fold must be a Prometheus duration"),
        ({"for_folds": "5m"}, "unknown setting 'for_folds'"),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            RULES.rules(bad)
    proc = subprocess.run(
        ["python3", str(RULES.__file__), "--set", "accept_ratio=0", "--out", str(tmp_path / "x.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "accept_ratio must be a number in (0, 1]" in proc.stderr
    assert not (tmp_path / "x.yml").exists()


def test_the_example_scrape_config_is_valid(tmp_path, promtool):
    example = REPO / "deploy" / "monitoring" / "prometheus-scrape.example.yml"
    proc = subprocess.run([promtool, "check", "config", str(example)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    jobs = {job["job_name"]: job for job in yaml.safe_load(example.read_text())["scrape_configs"]}
    hosts = {
        name: {t.rsplit(":", 1)[0] for c in job["static_configs"] for t in c["targets"]} for name, job in jobs.items()
    }
    assert hosts["sglang"] == hosts["node"]  # the rules join a node's two targets by this host part


@pytest.mark.parametrize(
    "alert, receiver",
    [
        ("ReplaySSMDraftAcceptanceCollapsed", "sglang-page"),
        ("ReplaySSMServingWithSGLangFold", "sglang-oncall"),
        ("ReplaySSMSmokeStale", "monitoring-owners"),
        ("ReplaySSMAcceptanceUnwatched", "monitoring-owners"),
    ],
)
def test_the_example_alertmanager_routes_by_the_rules_labels(alert, receiver):
    example = REPO / "deploy" / "monitoring" / "alertmanager.example.yml"
    amtool = tool("amtool")
    assert subprocess.run([amtool, "check-config", str(example)], capture_output=True, timeout=60).returncode == 0
    labels = [f"{key}={value}" for key, value in {"alertname": alert, **ALERTS[alert]["labels"]}.items()]
    proc = subprocess.run(
        [amtool, "config", "routes", "test", f"--config.file={example}", *labels],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.stdout.strip() == receiver, proc.stdout + proc.stderr
