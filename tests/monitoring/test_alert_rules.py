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
WATCHDOG = "ReplaySSMWatchdog"  # fires always, by design

# Labels the node's textfile series carry (node_exporter's target) and SGLang's own target's
NODE = {"instance": "n1:9100", "job": "node", "service": "sglang-overlay", "sglang_port": "30000"}
SGLANG = {"instance": "n1:30000", "job": "sglang", "model_name": "qwen3.5", "tp_rank": "0"}


def series(name: str, labels: dict, values: str) -> dict:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def node(name: str, values: str, host: str = "n1", **extra) -> dict:
    return series(name, {**NODE, "instance": f"{host}:9100", **extra}, values)


def sglang(name: str, values: str, host: str = "n1", **extra) -> dict:
    return series(name, {**SGLANG, "instance": f"{host}:30000", **extra}, values)


def up(job: str, values: str, host: str = "n1") -> dict:
    return series("up", {"instance": f"{host}:{30000 if job == 'sglang' else 9100}", "job": job}, values)


def smoke(values: str = "0+60x60", host: str = "n1", **baselines) -> list[dict]:
    """A smoke file's run time and its baseline per class (`service=` names another service)."""
    extra = {"service": baselines.pop("service")} if "service" in baselines else {}
    return [node("replayssm_smoke_last_run_timestamp_seconds", values, host, **extra)] + [
        node("replayssm_smoke_accept_length_baseline", v, host, **extra, **{"class": c}) for c, v in baselines.items()
    ]


def live(tokens: str, calls: str, host: str = "n1", **extra) -> list[dict]:
    return [
        sglang("sglang:generation_tokens_total", tokens, host, **extra),
        sglang("sglang:spec_verify_calls_total", calls, host, **extra),
    ]


def fired(alert: str, summary: str, **labels) -> dict:
    """One expected alert: the rule's labels plus `labels`; its description with $labels filled in."""
    rule = ALERTS[alert]
    description = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], rule["annotations"]["description"])
    assert "{{" not in description, f"spell out the description of {alert} in the test"
    return {
        "exp_labels": {**rule["labels"], **labels},
        "exp_annotations": {
            "summary": summary,
            "description": description,
            "runbook_url": rule["annotations"]["runbook_url"],
        },
    }


WHERE = {"host": "n1", "service": "sglang-overlay", "instance": "n1:9100", "job": "node", "sglang_port": "30000"}
LIVE_AT = {"instance": "n1:30000", "host": "n1", "sglang_port": "30000", "service": "sglang-overlay"}
COLLAPSED, LOW = "ReplaySSMDraftAcceptanceCollapsed", "ReplaySSMDraftAcceptanceLow"
# one case per few lines (a table) reads better than one value per line
# fmt: off
# name -> (input series, eval time, alert, expected alerts)
CASES = {
    "live acceptance collapsed on one node": (
        [*live("0+120x40", "0+100x40"), *live("0+300x40", "0+100x40", "n2"),
         *smoke(code="3x40", prose="2.5x40"), *smoke(host="n2", code="3x40", prose="2.5x40")],
        "30m", COLLAPSED,
        [fired(COLLAPSED, "n1 (sglang-overlay): live accept length 1.20 is below 0.6 x its baseline", **LIVE_AT)]),
    "live acceptance: not before its for: duration": (
        [sglang("sglang:generation_tokens_total", "0+300x25 7620+120x15"),
         sglang("sglang:spec_verify_calls_total", "0+100x40"), *smoke(code="3x40")],
        "30m", COLLAPSED, []),
    "live acceptance: an idle node fires nothing": (
        [*live("500x40", "400x40"), *smoke(code="3x40")], "30m", COLLAPSED, []),
    "live acceptance: a leftover smoke file of an old service name on the same port": (
        [*live("0+120x40", "0+100x40"), *smoke(code="3x40"),
         *smoke("600x40", code="1x40", service="sglang-old")],
        "30m", COLLAPSED,
        [fired(COLLAPSED, "n1 (sglang-overlay): live accept length 1.20 is below 0.6 x its baseline", **LIVE_AT)]),
    "live acceptance: the baseline is held when node_exporter stops answering": (
        [*live("0+120x40", "0+100x40"), *smoke("0+60x10", code="3x10")],
        "30m", COLLAPSED,
        [fired(COLLAPSED, "n1 (sglang-overlay): live accept length 1.20 is below 0.6 x its baseline", **LIVE_AT)]),
    "live acceptance per class: code at half its baseline, prose fine": (
        [*live("0+225x40", "0+100x40", **{"class": "code"}), *live("0+190x40", "0+100x40", **{"class": "prose"}),
         *smoke(code="4.5x40", prose="2x40")],
        "30m", COLLAPSED,
        [fired(COLLAPSED, "n1 (sglang-overlay): live accept length 2.25, class code is below 0.6 x its baseline",
               **LIVE_AT, **{"class": "code"})]),
    "live acceptance slides to 70%: the warning tier": (
        [*live("0+210x60", "0+100x60"), *smoke(code="3x60")], "45m", LOW,
        [fired(LOW, "n1 (sglang-overlay): live accept length 2.10 is below 0.8 x its baseline", **LIVE_AT)]),
    "live acceptance at 90%: no warning": (
        [*live("0+270x60", "0+100x60"), *smoke(code="3x60")], "45m", LOW, []),
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
    "the serving container stopped": (
        [node("replayssm_node_container_running", "1x5 0x10")], "10m", "ReplaySSMContainerNotRunning",
        [fired("ReplaySSMContainerNotRunning", "n1 (sglang-overlay): the serving container is not running", **WHERE)]),
    "the serving container runs": (
        [node("replayssm_node_container_running", "1x10")], "10m", "ReplaySSMContainerNotRunning", []),
    "serving with no fold recorded": (
        [node("replayssm_overlay_fold_in_use", "1x10", fold="none"), up("sglang", "1x10")],
        "8m", "ReplaySSMServingWithoutFold",
        [fired("ReplaySSMServingWithoutFold",
               "n1 (sglang-overlay): SGLang serves but no serving process recorded a fold (none)",
               **WHERE, fold="none")]),
    "serving with a recorded fold": (
        [node("replayssm_overlay_fold_in_use", "0x10", fold="none"),
         node("replayssm_overlay_fold_in_use", "1x10", fold="overlay-cuda"), up("sglang", "1x10")],
        "8m", "ReplaySSMServingWithoutFold", []),
    "the overlay is not patched": (
        [node("replayssm_overlay_info", "1x10", patch_state="pristine")], "8m", "ReplaySSMOverlayNotPatched",
        [fired("ReplaySSMOverlayNotPatched",
               "n1 (sglang-overlay): the overlay's patch state is 'pristine', not patched", **WHERE,
               patch_state="pristine")]),
    "the overlay is patched": (
        [node("replayssm_overlay_info", "1x10", patch_state="patched")], "8m", "ReplaySSMOverlayNotPatched", []),
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
    "fallback shapes: one alert per node, however many shapes": (
        [node("replayssm_overlay_fallback_shapes", "_x2 3x3"),
         *(node("replayssm_overlay_fallback_shape", "_x2 1x3", shape=f"B={b} T=16 HV=32") for b in (1, 2, 3))],
        "4m", "ReplaySSMFallbackShape",
        [fired("ReplaySSMFallbackShape", "n1 (sglang-overlay): 3 commit shape(s) run SGLang's fold", **WHERE)]),
    "no fallback shape": (
        [node("replayssm_overlay_fallback_shapes", "0x5")], "4m", "ReplaySSMFallbackShape", []),
    "smoke failed": (
        [node("replayssm_smoke_success", "1 1 0 0")], "3m", "ReplaySSMSmokeFailed",
        [fired("ReplaySSMSmokeFailed", "n1 (sglang-overlay): the periodic smoke run failed", **WHERE)]),
    "smoke failed: still firing while node_exporter does not answer": (
        [node("replayssm_smoke_success", "1 0 0 stale")], "20m", "ReplaySSMSmokeFailed",
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
    "image: a node left behind still fires when another node's exporter blips": (
        [node("replayssm_node_image_info", v, host=h, image_id=i, image=r)
         for h, i, r, v in (("n1", "sha256:aaa", "rso:v2", "1x40"), ("n2", "sha256:aaa", "rso:v2", "1x20 stale 1x19"),
                            ("n3", "sha256:bbb", "rso:v1", "1x40"))],
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
         *smoke("0+60x20", host="n2", code="3x20")],
        "16m", "ReplaySSMAcceptanceUnwatched",
        [fired("ReplaySSMAcceptanceUnwatched", "Missing data: n1:30000 speculates but has no accept-length baseline",
               instance="n1:30000", host="n1", sglang_port="30000")]),
    "a speculating server with its baseline": (
        [sglang("sglang:spec_verify_calls_total", "0+10x20"), *smoke("0+60x20", code="3x20")],
        "16m", "ReplaySSMAcceptanceUnwatched", []),
    "a speculating server outside the fleet's jobs": (
        [series("sglang:spec_verify_calls_total", {**SGLANG, "instance": "lab:30000", "job": "lab-sglang"},
                "0+10x20")],
        "16m", "ReplaySSMAcceptanceUnwatched", []),
    "a node whose SGLang Prometheus does not scrape": (
        [node("replayssm_node_job_timestamp_seconds", "0+60x20"),
         node("replayssm_node_job_timestamp_seconds", "0+60x20", host="n2"), up("sglang", "1x20", "n2")],
        "16m", "ReplaySSMSGLangNotScraped",
        [fired("ReplaySSMSGLangNotScraped",
               "Missing data: n1 (sglang-overlay): Prometheus has no SGLang target on port 30000", **WHERE)]),
    "a restarted SGLang without traffic yet (no labelled counter) is scraped": (
        [node("replayssm_node_job_timestamp_seconds", "0+60x40"), up("sglang", "1x40")],
        "30m", "ReplaySSMSGLangNotScraped", []),
    "SGLang does not answer its scrape": (
        [up("sglang", "1x3 0x10")], "10m", "ReplaySSMSGLangDown",
        [fired("ReplaySSMSGLangDown", "n1: Prometheus cannot scrape SGLang on port 30000",
               instance="n1:30000", job="sglang", host="n1", sglang_port="30000")]),
    "SGLang answers its scrape": (
        [up("sglang", "1x10"), series("up", {"instance": "lab:30000", "job": "lab-sglang"}, "0x10")],
        "10m", "ReplaySSMSGLangDown", []),
    "node_exporter does not answer": (
        [up("node", "1x3 0x10")], "10m", "ReplaySSMNodeExporterDown",
        [fired("ReplaySSMNodeExporterDown", "Missing data: n1: Prometheus cannot scrape node_exporter (n1:9100)",
               instance="n1:9100", job="node", host="n1")]),
    "node_exporter answers": (
        [up("node", "1x10")], "10m", "ReplaySSMNodeExporterDown", []),
    "a textfile node_exporter cannot parse": (
        [node("node_textfile_scrape_error", "0x3 1x10")], "10m", "ReplaySSMTextfileScrapeError",
        [fired("ReplaySSMTextfileScrapeError", "Missing data: n1: node_exporter drops a textfile it cannot parse",
               **WHERE)]),
    "every textfile parses": (
        [node("node_textfile_scrape_error", "0x10")], "10m", "ReplaySSMTextfileScrapeError", []),
    "the fleet's rules fail to evaluate": (
        [series("prometheus_rule_evaluation_failures_total",
                {"instance": "prom:9090", "job": "prometheus", "rule_group": "/etc/prometheus/r.yml;replayssm"},
                "0x5 0+1x10")],
        "10m", "ReplaySSMRuleEvaluationFailures",
        [fired("ReplaySSMRuleEvaluationFailures",
               "Missing data: Prometheus prom:9090 fails to evaluate the replayssm rules",
               instance="prom:9090", job="prometheus", rule_group="/etc/prometheus/r.yml;replayssm")]),
    "another group's rules fail, ours evaluate": (
        [series("prometheus_rule_evaluation_failures_total",
                {"instance": "prom:9090", "job": "prometheus", "rule_group": "/etc/prometheus/r.yml;other"},
                "0+1x10"),
         series("prometheus_rule_evaluation_failures_total",
                {"instance": "prom:9090", "job": "prometheus", "rule_group": "/etc/prometheus/r.yml;replayssm"},
                "0x10")],
        "10m", "ReplaySSMRuleEvaluationFailures", []),
    "the watchdog always fires": (
        [], "1m", "ReplaySSMWatchdog",
        [fired("ReplaySSMWatchdog", "The alerting pipeline works: this alert always fires")]),
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
    assert firing == set(ALERTS) and quiet == set(ALERTS) - {WATCHDOG}


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


def test_an_empty_database_fires_nothing_but_the_watchdog(tmp_path, promtool):
    proc = _promtool_test(tmp_path, promtool, [_quiet_everywhere([], set(ALERTS) - {WATCHDOG})])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_missing_data_fires_only_alerts_that_say_so(tmp_path, promtool):
    """A fleet where only SGLang is scraped, or only the node jobs: every alert that can fire is a
    missing-data alert whose summary says so, and the others stay quiet."""
    missing = {name for name, rule in ALERTS.items() if rule["labels"]["category"] == "missing-data"}
    quiet = set(ALERTS) - missing - {WATCHDOG}
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
        [_quiet_everywhere(only_sglang, quiet), _quiet_everywhere(only_node, quiet)],
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
        ({"accept_ratio": "0.9"}, "warn_ratio (0.8) must not be below accept_ratio (0.9)"),
        ({"for_fold": "soon"}, "for_fold must be a Prometheus duration"),
        ({"for_folds": "5m"}, "unknown setting 'for_folds'"),
        ({"node_selector": "job=node"}, "node_selector must be PromQL label matchers"),
        ({"sglang_selector": 'job="a"} or vector(1) #'}, "sglang_selector must be PromQL label matchers"),
        ({"runbook_url": "http://wiki/run book"}, "runbook_url must be a URL or path without spaces"),
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


def test_selectors_reach_every_series_the_rules_read(tmp_path, promtool):
    """With the fleet's jobs named otherwise, every series read carries the matchers, and a case fires
    only on the selected jobs (a server of another job is not the fleet's)."""
    chosen = {"sglang_selector": 'job="gpu-sglang", env="prod"', "node_selector": 'job=~"gpu-node"'}
    exprs = [r["expr"] for r in yaml.safe_load(RULES.render(chosen))["groups"][0]["rules"]]
    read = re.compile(r"\b(sglang:[a-z_]+|replayssm_[a-z_]+|node_textfile_[a-z_]+|prometheus_[a-z_]+|up)(\{[^}]*\})?")
    wanted = {
        "sglang": ['job="gpu-sglang", env="prod"'],
        "replayssm": ['job=~"gpu-node"'],
        "node": ['job=~"gpu-node"'],
        "prometheus": ['job="prometheus"'],
        "up": ['job="gpu-sglang", env="prod"', 'job=~"gpu-node"'],
    }
    found = 0
    for expr in exprs:
        for name, matchers in read.findall(expr):
            found += 1
            assert any(m in matchers for m in wanted[re.split("[:_]", name)[0]]), (name, expr)
    assert found > 30
    selected = {**SGLANG, "instance": "n1:30000", "job": "gpu-sglang", "env": "prod"}
    lab = {**SGLANG, "instance": "n2:30000", "job": "sglang", "env": "prod"}
    test = {
        "interval": "1m",
        "input_series": [
            series("sglang:spec_verify_calls_total", selected, "0+10x20"),
            series("sglang:spec_verify_calls_total", lab, "0+10x20"),
        ],
        "alert_rule_test": [
            {
                "eval_time": "16m",
                "alertname": "ReplaySSMAcceptanceUnwatched",
                "exp_alerts": [
                    fired(
                        "ReplaySSMAcceptanceUnwatched",
                        "Missing data: n1:30000 speculates but has no accept-length baseline",
                        instance="n1:30000",
                        host="n1",
                        sglang_port="30000",
                    )
                ],
            }
        ],
    }
    proc = _promtool_test(tmp_path, promtool, [test], chosen)
    assert proc.returncode == 0, proc.stdout + proc.stderr


RUNBOOK = REPO / "deploy" / "monitoring" / "runbook.md"


def _runbook_sections() -> dict[str, str]:
    """anchor (a heading as GitHub links it) -> the section's text."""
    parts = re.split(r"^## (.+)$", RUNBOOK.read_text(), flags=re.M)
    heads = [re.sub(r"[^a-z0-9 -]", "", head.lower()).replace(" ", "-") for head in parts[1::2]]
    return dict(zip(heads, parts[2::2]))


def test_every_alert_links_a_runbook_section_that_says_what_it_means_and_what_to_do():
    sections = _runbook_sections()
    for name, rule in ALERTS.items():
        url = rule["annotations"]["runbook_url"]
        assert url == f"deploy/monitoring/runbook.md#{name.lower()}"
        body = sections.get(name.lower())
        assert body is not None, f"no runbook section for {name}"
        checks = re.search(r"\*\*First checks\*\*\n(.+)\*\*Fix\*\*\n.", body, flags=re.S)
        assert "**What it means**\n" in body and checks, name
        assert re.findall(r"^(\d)\. ", checks.group(1), flags=re.M) == ["1", "2", "3"], name
    assert set(sections) - {n.lower() for n in ALERTS} <= {"time-to-detect"}
    assert (
        yaml.safe_load(RULES.render({"runbook_url": "https://wiki.example/rso"}))["groups"][0]["rules"][-1][
            "annotations"
        ]["runbook_url"]
        == "https://wiki.example/rso#replayssmwatchdog"
    )


ALERTMANAGER = REPO / "deploy" / "monitoring" / "alertmanager.example.yml"


def _receiver(labels: dict) -> str:
    amtool = tool("amtool")
    proc = subprocess.run(
        [
            amtool,
            "config",
            "routes",
            "test",
            f"--config.file={ALERTMANAGER}",
            *(f"{key}={value}" for key, value in labels.items()),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.stdout.strip() or proc.stderr


def test_the_example_alertmanager_config_is_valid():
    proc = subprocess.run(
        [tool("amtool"), "check-config", str(ALERTMANAGER)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _expected_receiver(rule: dict) -> str:
    labels = rule["labels"]
    if labels["category"] == "watchdog":
        return "watchdog"
    if labels["severity"] == "critical":
        return "sglang-page"
    return "monitoring-owners" if labels["category"] == "missing-data" else "sglang-oncall"


@pytest.mark.parametrize("alert", sorted(ALERTS))
def test_the_example_alertmanager_routes_every_alert_by_its_labels(alert):
    assert _receiver({"alertname": alert, **ALERTS[alert]["labels"]}) == _expected_receiver(ALERTS[alert])


def test_a_stopped_container_pages_and_nothing_on_call_is_inhibited():
    """The on-call receivers get what takes a node out of service; inhibitions only quiet what a stopped
    container or a worse tier already says, never a page, the watchdog or anything availability."""
    assert _receiver({"alertname": "ReplaySSMContainerNotRunning", **ALERTS["ReplaySSMContainerNotRunning"]["labels"]})
    assert _expected_receiver(ALERTS["ReplaySSMContainerNotRunning"]) == "sglang-page"
    assert _expected_receiver(ALERTS["ReplaySSMSGLangDown"]) == "sglang-page"
    inhibits = yaml.safe_load(ALERTMANAGER.read_text())["inhibit_rules"]
    for rule in inhibits:
        targets = rule["target_matchers"]
        for name, alert in ALERTS.items():
            labels = {"alertname": name, **alert["labels"]}
            if _matches(targets, labels):
                assert labels["category"] not in ("watchdog", "availability") and labels["severity"] != "critical", (
                    name,
                    rule,
                )
    quieted = {
        name
        for name, alert in ALERTS.items()
        for rule in inhibits
        if _matches(rule["target_matchers"], {"alertname": name, **alert["labels"]})
    }
    assert "ReplaySSMDraftAcceptanceLow" in quieted and "ReplaySSMSmokeFailed" in quieted


def _matches(matchers: list[str], labels: dict) -> bool:
    for matcher in matchers:
        key, op, value = re.match(r'(\w+)(=~|!~|!=|=)"(.*)"$', matcher).groups()
        have = labels.get(key, "")
        hit = re.fullmatch(value, have) is not None if "~" in op else have == value
        if hit == op.startswith("!"):
            return False
    return True
