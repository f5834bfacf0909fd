#!/usr/bin/env python3
"""The fleet's Prometheus rules (recording rules and alerts), generated from a few settings.

Why generated: the thresholds (how far below its baseline an accept length may fall, how old a smoke
result may get) and the `for:` durations are the operator's, and the tests shorten them to seconds; one
function builds every rule from them, so the file the playbook installs, the one `promtool test rules`
checks and the one the end-to-end test loads differ only in those numbers. The baselines themselves are
not in the rules: the periodic smoke exports its thresholds profile's `baseline_accept_length` as a
metric (`replayssm_smoke_accept_length_baseline`, chosen by the smoke suite's own profile selection for
the model and algorithm the node serves) and PromQL compares with it (notes/decisions.md says why).

Series the rules read, by who writes them (each selected by the settings' label matchers, injected into
every series as the kubernetes mixins do, so a server outside the fleet's scrape jobs is never read):
  SGLang (--enable-metrics)    sglang:generation_tokens_total, sglang:spec_verify_calls_total (labelled
                               counters: no sample before the first request; per class where the
                               requests carry a `class` custom label), and its target's `up`
  node job (sglang_monitor)    replayssm_node_* (the container as the host sees it), and through
                               `replayssm-overlay metrics` replayssm_overlay_* (fold, self-check, shapes)
  periodic smoke (--prom-out)  replayssm_smoke_* (outcome, accept length and baseline per class)
  node_exporter, Prometheus    `up`, node_textfile_scrape_error, prometheus_rule_evaluation_failures_total
The textfile series carry `service` and `sglang_port`; the SGLang and node_exporter targets of a node must
be scraped under the same host (the part of `instance` before the port), which is how they are joined. The
joins cannot break on a leftover file: per host and port only the service whose smoke ran last counts.
Losing data resolves nothing: the node facts an alert compares keep their last value for `hold` after
node_exporter stops answering, and a target that does not answer is an alert of its own. Every alert that
fires because data is missing or stale says so (category "missing-data", a summary that starts with
"Missing data:"); the others compare data that is there, so an absent series fires nothing. Every alert
links its section of deploy/monitoring/runbook.md (annotation runbook_url).

    python3 deploy/monitoring/alert_rules.py [--set KEY=VALUE ...] [--settings JSON] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile

import yaml

GROUP = "replayssm"
DEFAULTS = {
    "accept_ratio": 0.6,  # critical: "well below the baseline", under this fraction of it
    "warn_ratio": 0.8,  # warning: a slide under this fraction of it
    "live_window": "10m",  # rate window of the live accept length
    "for_live_acceptance": "15m",
    "for_live_acceptance_warning": "30m",
    "for_smoke_acceptance": "0m",  # a smoke result is already an aggregate over its prompts
    "for_fold": "5m",
    "for_selfcheck": "0m",
    "for_fallback_shape": "0m",
    "for_smoke_failed": "0m",
    "for_image": "30m",  # a rollout in progress runs two images for a while
    "image_window": "10m",  # the image majority counts every node seen in this window (an exporter blip is no vote)
    "for_missing": "15m",
    "for_down": "3m",  # a target that does not answer, a container that does not run
    "for_scrape_error": "5m",
    "hold": "1h",  # a node's facts stay in force this long after node_exporter stops answering
    "smoke_stale_after": "3h",  # no smoke result for this long: the periodic job stopped
    "job_stale_after": "15m",  # no node job result for this long
    "evaluation_interval": "1m",
    # label matchers injected into every series the rules read (the scrape config's jobs)
    "sglang_selector": 'job="sglang"',
    "node_selector": 'job="node"',
    "prometheus_selector": 'job="prometheus"',
    # where the runbook is served; each alert links <runbook_url>#<its name in lower case>
    "runbook_url": "deploy/monitoring/runbook.md",
}
RATIOS = ("accept_ratio", "warn_ratio")
SELECTORS = ("sglang_selector", "node_selector", "prometheus_selector")
_DURATION = re.compile(r"^(?:[0-9]+(?:ms|s|m|h|d|w|y))+$")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_MATCHER = r'\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*'
_SELECTOR = re.compile(rf"^(?:{_MATCHER}(?:,{_MATCHER})*)?$")


def _ratio(key: str, value) -> float:
    try:
        ratio = float(value)
    except (TypeError, ValueError):
        ratio = -1.0
    if not 0 < ratio <= 1:
        raise ValueError(f"{key} must be a number in (0, 1], got {value!r}")
    return ratio


def settings(overrides: dict | None = None) -> dict:
    """DEFAULTS with `overrides` (values as given on the command line or in YAML), validated."""
    merged = dict(DEFAULTS)
    for key, value in (overrides or {}).items():
        if key not in DEFAULTS:
            raise ValueError(f"unknown setting {key!r}; known: {', '.join(sorted(DEFAULTS))}")
        merged[key] = value
    for key, value in merged.items():
        if key in RATIOS:
            merged[key] = _ratio(key, value)
        elif key in SELECTORS:
            if not isinstance(value, str) or not _SELECTOR.match(value):
                raise ValueError(
                    f'{key} must be PromQL label matchers such as job="sglang" or job=~"gpu-.+",env="prod", '
                    f"got {value!r}"
                )
        elif key == "runbook_url":
            if not isinstance(value, str) or not value or any(c.isspace() for c in value):
                raise ValueError(f"runbook_url must be a URL or path without spaces, got {value!r}")
        elif not _DURATION.match(str(value)):
            raise ValueError(f"{key} must be a Prometheus duration such as 30s, 15m or 3h, got {value!r}")
        else:
            merged[key] = str(value)
    if merged["accept_ratio"] > merged["warn_ratio"]:
        raise ValueError(
            f"warn_ratio ({merged['warn_ratio']:g}) must not be below accept_ratio ({merged['accept_ratio']:g}): "
            "the warning tier comes first"
        )
    return merged


def seconds(duration: str) -> float:
    return sum(float(n) * _UNIT_S[unit] for n, unit in re.findall(r"([0-9]+)(ms|s|m|h|d|w|y)", duration))


def _host(expr: str) -> str:
    """`expr` with a `host` label: the part of `instance` before the port."""
    return f'label_replace({expr}, "host", "$1", "instance", "(.+):[0-9]+")'


def _host_port(expr: str) -> str:
    """`expr` with `host` and `sglang_port` from `instance` (a series scraped from SGLang itself)."""
    return f'label_replace({_host(expr)}, "sglang_port", "$1", "instance", ".+:([0-9]+)")'


class _Series:
    """Series selectors with the settings' matchers injected (each job's series only, as the mixins do)."""

    def __init__(self, s: dict):
        self.s = s

    def _pick(self, selector: str, name: str, extra: str) -> str:
        matchers = ", ".join(m for m in (self.s[selector].strip(), extra) if m)
        return f"{name}{{{matchers}}}" if matchers else name

    def sglang(self, name: str, extra: str = "") -> str:
        return self._pick("sglang_selector", name, extra)

    def node(self, name: str, extra: str = "") -> str:
        return self._pick("node_selector", name, extra)

    def prometheus(self, name: str, extra: str = "") -> str:
        return self._pick("prometheus_selector", name, extra)

    def held(self, name: str, extra: str = "", hold: str | None = None) -> str:
        """A node series that keeps its last value for `hold` when node_exporter stops answering."""
        return f"last_over_time({self.node(name, extra)}[{hold or self.s['hold']}])"


LIVE = "replayssm:sglang_accept_length:ratio_rate"
LIVE_CLASS = "replayssm:sglang_accept_length_by_class:ratio_rate"
SMOKE_LATEST = "replayssm:smoke_last_run_timestamp_seconds:latest"
BASELINE_CLASS = "replayssm:smoke_accept_length_baseline:latest"
BASELINE = "replayssm:smoke_accept_length_baseline:min"
SERVICE = "replayssm:node_service:latest"
WHERE = "{{ $labels.host }} ({{ $labels.service }})"
CLASS = "{{ with $labels.class }}, class {{ . }}{{ end }}"
MISSING = "Missing data: "


def _alert(s, name, expr, duration, severity, category, summary, description) -> dict:
    return {
        "alert": name,
        "expr": expr,
        "for": duration,
        "labels": {"severity": severity, "category": category},
        "annotations": {
            "summary": summary,
            "description": " ".join(description.split()),
            "runbook_url": f"{s['runbook_url']}#{name.lower()}",
        },
    }


def _recorded(s: dict, n: _Series) -> list[dict]:
    window = s["live_window"]
    by_class = 'class!=""'
    return [
        {  # the token-weighted accept length of all traffic
            "record": LIVE,
            "expr": _host_port(
                f"sum by (instance) (rate({n.sglang('sglang:generation_tokens_total')}[{window}]))\n"
                f"  / (sum by (instance) (rate({n.sglang('sglang:spec_verify_calls_total')}[{window}])) > 0)"
            ),
        },
        {  # per class, where the requests carry one (SGLang's tokenizer custom labels)
            "record": LIVE_CLASS,
            "expr": _host_port(
                f"sum by (instance, class) (rate({n.sglang('sglang:generation_tokens_total', by_class)}[{window}]))\n"
                f"  / (sum by (instance, class) (rate({n.sglang('sglang:spec_verify_calls_total', by_class)}"
                f"[{window}])) > 0)"
            ),
        },
        {  # the service that last ran a smoke on each port: a leftover file of an old service name loses
            "record": SMOKE_LATEST,
            "expr": "topk by (host, sglang_port) (1,\n  max by (host, sglang_port, service) ("
            + _host(n.held("replayssm_smoke_last_run_timestamp_seconds"))
            + "))",
        },
        {
            "record": BASELINE_CLASS,
            "expr": "max by (host, sglang_port, service, class) ("
            + _host(n.held("replayssm_smoke_accept_length_baseline"))
            + f")\n  and on (host, sglang_port, service) {SMOKE_LATEST}",
        },
        {"record": BASELINE, "expr": f"min by (host, sglang_port, service) ({BASELINE_CLASS})"},
        {  # the service a node job last reported on each port (the dashboard's $service for SGLang's series)
            "record": SERVICE,
            "expr": "topk by (host, sglang_port) (1,\n  max by (host, sglang_port, service) ("
            + _host(n.node("replayssm_node_job_timestamp_seconds"))
            + "))\n  * 0 + 1",
        },
    ]


def _acceptance_alerts(s: dict, n: _Series) -> list[dict]:
    window = s["live_window"]

    def below(ratio: float) -> str:
        return (
            f"({LIVE}\n  < on (host, sglang_port) group_left (service)\n  ({ratio:g} * {BASELINE}))\nor\n"
            f"({LIVE_CLASS}\n  < on (host, sglang_port, class) group_left (service)\n  ({ratio:g} * {BASELINE_CLASS}))"
        )

    def tier(name, ratio, duration, severity, meaning):
        return _alert(
            s,
            name,
            below(ratio),
            duration,
            severity,
            "acceptance",
            f'{WHERE}: live accept length {{{{ $value | printf "%.2f" }}}}{CLASS} is below {ratio:g} x its baseline',
            f"The token-weighted accept length of the traffic the SGLang server on port "
            f"{{{{ $labels.sglang_port }}}} served over {window} fell under {ratio:g} of the baseline_accept_length "
            f"of its thresholds profile (of the request class where the requests carry one, else the lowest "
            f"class baseline). {meaning} Outputs stay correct; speculation pays less: the draft no longer "
            f"matches its target (wrong or changed draft weights, another target revision, a changed chat "
            f"template).",
        )

    return [
        tier(
            "ReplaySSMDraftAcceptanceCollapsed",
            s["accept_ratio"],
            s["for_live_acceptance"],
            "critical",
            "Speculation has all but stopped paying.",
        ),
        tier(
            "ReplaySSMDraftAcceptanceLow",
            s["warn_ratio"],
            s["for_live_acceptance_warning"],
            "warning",
            "An early warning: the draft is sliding.",
        ),
        _alert(
            s,
            "ReplaySSMSmokeAcceptanceBelowBaseline",
            _host(
                f"{n.held('replayssm_smoke_accept_length')}\n"
                f"  < {s['accept_ratio']:g} * {n.held('replayssm_smoke_accept_length_baseline')}"
            ),
            s["for_smoke_acceptance"],
            "warning",
            "acceptance",
            f"{WHERE}: periodic smoke accept length of class {{{{ $labels.class }}}} is "
            f'{{{{ $value | printf "%.2f" }}}}, below {s["accept_ratio"]:g} x its baseline',
            "The last periodic smoke run measured a mean accept length for this workload class under the "
            "fraction of the class's baseline_accept_length. The draft no longer matches its target on this "
            "node; compare with the other nodes' smoke results and check the draft model.",
        ),
    ]


def _node_alerts(s: dict, n: _Series) -> list[dict]:
    image = f"last_over_time({n.node('replayssm_node_image_info')}[{s['image_window']}])"
    per_fleet = f"count by (service, image_id) ({image})"
    sglang_up = _host_port(n.sglang("up"))
    return [
        _alert(
            s,
            "ReplaySSMContainerNotRunning",
            _host(f"{n.held('replayssm_node_container_running')} == 0"),
            s["for_down"],
            "critical",
            "availability",
            f"{WHERE}: the serving container is not running",
            "The node job finds the service's container stopped, exited or gone: the node serves nothing on port "
            "{{ $labels.sglang_port }}. Its fold, self-check and smoke alerts are held back while it is down.",
        ),
        _alert(
            s,
            "ReplaySSMServingWithoutFold",
            _host(n.node("replayssm_overlay_fold_in_use", 'fold=~"none|unknown"') + " == 1")
            + f"\n  and on (host, sglang_port)\n  ({sglang_up} == 1)",
            s["for_fold"],
            "warning",
            "fold",
            f"{WHERE}: SGLang serves but no serving process recorded a fold ({{{{ $labels.fold }}}})",
            "SGLang answers on this port, yet no live serving process in the container recorded the self-check "
            "before serving that chooses its commit path: the overlay did not take part in starting the server "
            "(not installed, not patched, ReplaySSM off) or its records are unreadable.",
        ),
        _alert(
            s,
            "ReplaySSMOverlayNotPatched",
            _host(n.node("replayssm_overlay_info", 'patch_state!="patched"') + " == 1"),
            s["for_fold"],
            "warning",
            "fold",
            f"{WHERE}: the overlay's patch state is '{{{{ $labels.patch_state }}}}', not patched",
            "`replayssm-overlay metrics` in the container reports SGLang's files as not patched (pristine, "
            "partial, unknown or missing): the image was built without the overlay applied, or SGLang was "
            "replaced under it.",
        ),
        _alert(
            s,
            "ReplaySSMServingWithSGLangFold",
            _host(n.held("replayssm_overlay_fold_in_use", 'fold="sglang"') + " == 1"),
            s["for_fold"],
            "warning",
            "fold",
            f"{WHERE}: a serving process commits with SGLang's fold, not the overlay's",
            "A live serving process on this node commits the GDN state with SGLang's own fold: its self-check "
            "before serving failed or found the pool not covered, the SSM state is not float32, RSO_FOLD=sglang "
            "is set, or the CUDA commit kernel does not load on the node. Outputs are correct, commits are slower. "
            "`replayssm-overlay status` in the container says why (selfcheck[].detail).",
        ),
        _alert(
            s,
            "ReplaySSMSelfCheckNotBitwise",
            _host(n.node("replayssm_overlay_selfcheck_processes", 'outcome=~"mismatch|error"') + " > 0"),
            s["for_selfcheck"],
            "warning",
            "fold",
            f"{WHERE}: the self-check before serving ended in {{{{ $labels.outcome }}}}",
            "The node's check of the overlay's fold against SGLang's recurrence did not pass (mismatch: not "
            "bitwise; error: it could not run), so the process switched to SGLang's fold. Something below the "
            "overlay changed (Triton, driver, ptxas): the node is safe but slower. See "
            "`replayssm-overlay status --json` in the container.",
        ),
        _alert(
            s,
            "ReplaySSMFallbackShape",
            _host(f"{n.held('replayssm_overlay_fallback_shapes')} > 0"),
            s["for_fallback_shape"],
            "warning",
            "fold",
            f"{WHERE}: {{{{ $value }}}} commit shape(s) run SGLang's fold",
            "Live serving processes met commit shapes that the overlay's kernel does not cover and run SGLang's "
            "fold for their calls; replayssm_overlay_fallback_shape names them. Build kernels that cover them "
            "(replayssm-overlay kernels build) and roll out the image.",
        ),
        _alert(
            s,
            "ReplaySSMSmokeFailed",
            _host(f"{n.held('replayssm_smoke_success')} == 0"),
            s["for_smoke_failed"],
            "warning",
            "smoke",
            f"{WHERE}: the periodic smoke run failed",
            "The last periodic replayssm-smoke run against this node did not pass (exit 1: a gate failed, see "
            "replayssm_smoke_gate_passed; exit 2: it could not run). Its report.json is on the node in the "
            "monitor's report folder.",
        ),
        _alert(
            s,
            "ReplaySSMNodeImageDiffers",
            _host(
                f"{image}\n  unless on (service, image_id)\n  ({per_fleet}\n"
                f"    == on (service) group_left max by (service) ({per_fleet}))"
            ),
            s["for_image"],
            "warning",
            "image",
            f"{WHERE}: runs image {{{{ $labels.image }}}}, not the one most nodes of the service run",
            f"This node's container runs another image ID than the majority of the service's nodes (every node "
            f"seen in the last {s['image_window']} counts): a node left behind by a rollout, or rolled back alone. "
            f"`make fleet-status` lists every node's image. With as many nodes on one image as on another there "
            f"is no majority and no node is singled out.",
        ),
    ]


def _missing_data_alerts(s: dict, n: _Series) -> list[dict]:
    speculating = _host_port(f"count by (instance) ({n.sglang('sglang:spec_verify_calls_total')})")
    return [
        _alert(
            s,
            "ReplaySSMSGLangDown",
            _host_port(f"{n.sglang('up')} == 0"),
            s["for_down"],
            "critical",
            "availability",
            "{{ $labels.host }}: Prometheus cannot scrape SGLang on port {{ $labels.sglang_port }}",
            "The SGLang target does not answer its metrics scrape: the host is down, the server stopped or "
            "hangs, or a firewall blocks the port. Nothing on this port is served or watched.",
        ),
        _alert(
            s,
            "ReplaySSMNodeExporterDown",
            _host(f"{n.node('up')} == 0"),
            s["for_down"],
            "warning",
            "missing-data",
            f"{MISSING}{{{{ $labels.host }}}}: Prometheus cannot scrape node_exporter ({{{{ $labels.instance }}}})",
            f"The node's node_exporter does not answer: its fold, self-check, image and smoke facts keep their "
            f"last values for {s['hold']} and then go, and no new ones arrive. Start prometheus-node-exporter on "
            f"the node or fix the scrape target.",
        ),
        _alert(
            s,
            "ReplaySSMTextfileScrapeError",
            _host(f"{n.node('node_textfile_scrape_error')} > 0"),
            s["for_scrape_error"],
            "warning",
            "missing-data",
            f"{MISSING}{{{{ $labels.host }}}}: node_exporter drops a textfile it cannot parse",
            "node_exporter's textfile collector refuses a file in its folder (a line it cannot parse, a metric "
            "written twice, client-side timestamps) and serves none of that file's series: the node's facts "
            "are silently gone. Its log names the file.",
        ),
        _alert(
            s,
            "ReplaySSMRuleEvaluationFailures",
            "increase("
            + n.prometheus("prometheus_rule_evaluation_failures_total", f'rule_group=~".*;{GROUP}"')
            + "[5m]) > 0",
            "0m",
            "warning",
            "missing-data",
            f"{MISSING}Prometheus {{{{ $labels.instance }}}} fails to evaluate the {GROUP} rules",
            "Some of the fleet's rules fail at every evaluation (Prometheus's log says why, e.g. many-to-many "
            "matching), so the alerts they define cannot fire anywhere. Fix the series that break the join or "
            "the rules.",
        ),
        _alert(
            s,
            "ReplaySSMSmokeStale",
            _host(
                f"time() - {n.node('replayssm_smoke_last_run_timestamp_seconds')} > {seconds(s['smoke_stale_after']):g}"
            ),
            "0m",
            "warning",
            "missing-data",
            f"{MISSING}{WHERE}: no periodic smoke result for {{{{ $value | humanizeDuration }}}}",
            f"The periodic smoke has not finished a run for longer than {s['smoke_stale_after']}: its timer "
            f"stopped or the runs hang. Look at the node's sglang-monitor smoke timer and journal.",
        ),
        _alert(
            s,
            "ReplaySSMNodeJobStale",
            _host(f"time() - {n.node('replayssm_node_job_timestamp_seconds')} > {seconds(s['job_stale_after']):g}"),
            "0m",
            "warning",
            "missing-data",
            f"{MISSING}{WHERE}: the node job has not reported for {{{{ $value | humanizeDuration }}}}",
            "The sglang-monitor metrics job has not rewritten its file for too long: the fold, self-check "
            "and image facts of this node are stale. Look at its timer and journal on the node.",
        ),
        _alert(
            s,
            "ReplaySSMOverlayMetricsUnavailable",
            _host(f"{n.node('replayssm_node_overlay_metrics_ok')} == 0"),
            s["for_missing"],
            "warning",
            "missing-data",
            f"{MISSING}{WHERE}: no overlay facts from the container ({{{{ $labels.reason }}}})",
            "The node job could not use `replayssm-overlay metrics` in the service's container: it is not "
            "running, its image has no overlay that knows the command, or the command's output did not parse "
            "(bad-exposition). Fold and self-check alerts cannot fire for this node.",
        ),
        _alert(
            s,
            "ReplaySSMSGLangMetricsDisabled",
            _host(f"{n.node('replayssm_node_sglang_metrics_enabled')} == 0"),
            s["for_missing"],
            "warning",
            "missing-data",
            f"{MISSING}{WHERE}: SGLang runs without --enable-metrics",
            "The service's container runs SGLang without --enable-metrics, so its live accept length is not "
            "exported and the dead-draft alert cannot fire. Add enable-metrics: true to sglang_flags and "
            "deploy.",
        ),
        _alert(
            s,
            "ReplaySSMAcceptanceUnwatched",
            f"{speculating}\n  unless on (host, sglang_port)\n  {BASELINE}",
            s["for_missing"],
            "warning",
            "missing-data",
            f"{MISSING}{{{{ $labels.host }}}}:{{{{ $labels.sglang_port }}}} speculates but has no accept-length "
            f"baseline",
            "Prometheus scrapes a speculating SGLang server here but no periodic smoke on the same host exports "
            "a baseline for its port: the smoke job is not installed, its thresholds profile has no "
            "baseline_accept_length, or node_exporter is scraped under another host name than SGLang (both "
            "must share the host part of instance). The dead-draft alert cannot fire for it.",
        ),
        _alert(
            s,
            "ReplaySSMSGLangNotScraped",
            _host(n.node("replayssm_node_job_timestamp_seconds"))
            + f"\n  unless on (host, sglang_port)\n  {_host_port(n.sglang('up'))}",
            s["for_missing"],
            "warning",
            "missing-data",
            f"{MISSING}{WHERE}: Prometheus has no SGLang target on port {{{{ $labels.sglang_port }}}}",
            "The node job reports a service on this port, but no SGLang scrape target of Prometheus (the "
            "sglang_selector's job) has the same host and port: add the server to the scrape config "
            "(deploy/monitoring/prometheus-scrape.example.yml).",
        ),
        _alert(
            s,
            "ReplaySSMSmokeMissing",
            _host(f"{n.node('replayssm_node_smoke_scheduled')} == 1")
            + f"\n  unless on (instance, service)\n  {n.node('replayssm_smoke_last_run_timestamp_seconds')}",
            s["for_missing"],
            "warning",
            "missing-data",
            f"{MISSING}{WHERE}: the periodic smoke is scheduled but has never written a result",
            "The node job says a periodic smoke is installed for this service, but node_exporter serves no smoke "
            "result for it: the first run failed to start (look at the smoke unit's journal) or wrote elsewhere.",
        ),
        _alert(
            s,
            "ReplaySSMWatchdog",
            "vector(1)",
            "0m",
            "none",
            "watchdog",
            "The alerting pipeline works: this alert always fires",
            "Always firing, so that its absence at the receiver says that Prometheus, its rules or Alertmanager "
            "stopped delivering. Route it to a dead man's switch, never to people.",
        ),
    ]


def rules(overrides: dict | None = None) -> dict:
    """The rules file (one group) for `settings(overrides)`."""
    s = settings(overrides)
    n = _Series(s)
    alerts = _acceptance_alerts(s, n) + _node_alerts(s, n) + _missing_data_alerts(s, n)
    return {"groups": [{"name": GROUP, "interval": s["evaluation_interval"], "rules": _recorded(s, n) + alerts}]}


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the expressions) as literal blocks, so the file reads like a hand-written one."""


_Dumper.add_representer(
    str,
    lambda dumper, value: dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None),
)


def render(overrides: dict | None = None) -> str:
    header = (
        "# Generated by deploy/monitoring/alert_rules.py (the playbook deploy/playbooks/alerts.yml installs it);\n"
        "# edit the settings, not this file.\n"
    )
    return header + yaml.dump(rules(overrides), Dumper=_Dumper, sort_keys=False, width=1000)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Print the ReplaySSM fleet's Prometheus rules (recording rules and alerts). Settings and "
        "defaults: " + ", ".join(f"{k}={v}" for k, v in DEFAULTS.items()) + "."
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a setting")
    parser.add_argument(
        "--settings", metavar="JSON", help="settings to override as one JSON object (the playbook's way)"
    )
    parser.add_argument("--out", help="write to this file instead of stdout")
    args = parser.parse_args(argv)
    try:
        bad = [item for item in args.set if "=" not in item]
        if bad:
            raise ValueError(f"--set takes KEY=VALUE, got {', '.join(bad)}")
        overrides = json.loads(args.settings) if args.settings else {}
        if not isinstance(overrides, dict):
            raise ValueError(f"--settings must be a JSON object, got {args.settings}")
        text = render({**overrides, **dict(item.split("=", 1) for item in args.set)})
    except ValueError as err:
        print(f"alert_rules: {err}", file=sys.stderr)
        return 2
    if not args.out:
        sys.stdout.write(text)
        return 0
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(args.out)), prefix=".alert-rules.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:  # whole or not at all: a temp file, then a rename
        handle.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
