#!/usr/bin/env python3
"""The fleet's Prometheus rules (recording rules and alerts), generated from a few settings.

Why generated: the thresholds (how far below its baseline an accept length may fall, how old a smoke
result may get) and the `for:` durations are the operator's, and the tests shorten them to seconds; one
function builds every rule from them, so the file the playbook installs, the one `promtool test rules`
checks and the one the end-to-end test loads differ only in those numbers. The baselines themselves are
not in the rules: the periodic smoke exports its thresholds profile's `baseline_accept_length` as a
metric (`replayssm_smoke_accept_length_baseline`, chosen by the smoke suite's own profile selection for
the model and algorithm the node serves) and PromQL compares with it (notes/decisions.md says why).

Series the rules read, by who writes them:
  SGLang (--enable-metrics)    sglang:generation_tokens_total, sglang:spec_verify_calls_total
  node job (sglang_monitor)    replayssm_node_* (the container as the host sees it), and through
                               `replayssm-overlay metrics` replayssm_overlay_* (fold, self-check, shapes)
  periodic smoke (--prom-out)  replayssm_smoke_* (outcome, accept length and baseline per class)
The textfile series carry `service` and `sglang_port`; the SGLang and node_exporter targets of a node must
be scraped under the same host (the part of `instance` before the port), which is how they are joined.
Every alert that fires because data is missing or stale says so (category "missing-data", a summary that
starts with "Missing data:"); the others compare data that is there, so an absent series fires nothing.

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
    "accept_ratio": 0.6,  # "well below the baseline": under this fraction of it
    "live_window": "10m",  # rate window of the live accept length
    "for_live_acceptance": "15m",
    "for_smoke_acceptance": "0m",  # a smoke result is already an aggregate over its prompts
    "for_fold": "5m",
    "for_selfcheck": "0m",
    "for_fallback_shape": "0m",
    "for_smoke_failed": "0m",
    "for_image": "30m",  # a rollout in progress runs two images for a while
    "for_missing": "15m",
    "smoke_stale_after": "3h",  # no smoke result for this long: the periodic job stopped
    "job_stale_after": "15m",  # no node job result for this long
    "evaluation_interval": "1m",
}
_DURATION = re.compile(r"^(?:[0-9]+(?:ms|s|m|h|d|w|y))+$")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def settings(overrides: dict | None = None) -> dict:
    """DEFAULTS with `overrides` (values as given on the command line or in YAML), validated."""
    merged = dict(DEFAULTS)
    for key, value in (overrides or {}).items():
        if key not in DEFAULTS:
            raise ValueError(f"unknown setting {key!r}; known: {', '.join(sorted(DEFAULTS))}")
        merged[key] = value
    try:
        ratio = float(merged["accept_ratio"])
    except (TypeError, ValueError):
        ratio = -1.0
    if not 0 < ratio <= 1:
        raise ValueError(f"accept_ratio must be a number in (0, 1], got {merged['accept_ratio']!r}")
    merged["accept_ratio"] = ratio
    for key, value in merged.items():
        if key != "accept_ratio" and not _DURATION.match(str(value)):
            raise ValueError(f"{key} must be a Prometheus duration such as 30s, 15m or 3h, got {value!r}")
        if key != "accept_ratio":
            merged[key] = str(value)
    return merged


def seconds(duration: str) -> float:
    return sum(float(n) * _UNIT_S[unit] for n, unit in re.findall(r"([0-9]+)(ms|s|m|h|d|w|y)", duration))


def _host(expr: str) -> str:
    """`expr` with a `host` label: the part of `instance` before the port."""
    return f'label_replace({expr}, "host", "$1", "instance", "(.+):[0-9]+")'


def _host_port(expr: str) -> str:
    """`expr` with `host` and `sglang_port` from `instance` (a series scraped from SGLang itself)."""
    return f'label_replace({_host(expr)}, "sglang_port", "$1", "instance", ".+:([0-9]+)")'


LIVE = "replayssm:sglang_accept_length:ratio_rate"
BASELINE = "replayssm:smoke_accept_length_baseline:min"
WHERE = "{{ $labels.host }} ({{ $labels.service }})"
MISSING = "Missing data: "


def _alert(name, expr, duration, severity, category, summary, description) -> dict:
    return {
        "alert": name,
        "expr": expr,
        "for": duration,
        "labels": {"severity": severity, "category": category},
        "annotations": {"summary": summary, "description": " ".join(description.split())},
    }


def rules(overrides: dict | None = None) -> dict:
    """The rules file (one group) for `settings(overrides)`."""
    s = settings(overrides)
    ratio = f"{s['accept_ratio']:g}"
    window = s["live_window"]
    speculating = _host_port("count by (instance) (sglang:spec_verify_calls_total)")
    scraped = _host_port("count by (instance) (sglang:generation_tokens_total)")
    per_fleet = "count by (service, image_id) (replayssm_node_image_info)"
    recorded = [
        {
            "record": LIVE,
            "expr": _host_port(
                f"sum by (instance) (rate(sglang:generation_tokens_total[{window}]))\n"
                f"  / (sum by (instance) (rate(sglang:spec_verify_calls_total[{window}])) > 0)"
            ),
        },
        {
            "record": BASELINE,
            "expr": _host("min by (instance, service, sglang_port) (replayssm_smoke_accept_length_baseline)"),
        },
    ]
    alerts = [
        _alert(
            "ReplaySSMDraftAcceptanceCollapsed",
            f"{LIVE}\n  < on (host, sglang_port) group_left (service)\n  ({ratio} * {BASELINE})",
            s["for_live_acceptance"],
            "critical",
            "acceptance",
            f'{WHERE}: live accept length {{{{ $value | printf "%.2f" }}}} is below {ratio} x its baseline',
            f"The token-weighted accept length of the traffic the SGLang server on port "
            f"{{{{ $labels.sglang_port }}}} served over {window} fell under {ratio} of the lowest "
            f"baseline_accept_length of its thresholds profile. Outputs stay correct, speculation stops "
            f"paying: the draft no longer matches its target (wrong or changed draft weights, another "
            f"target revision, a changed chat template). Check the draft model path and run replayssm-smoke "
            f"against the node.",
        ),
        _alert(
            "ReplaySSMSmokeAcceptanceBelowBaseline",
            _host(f"replayssm_smoke_accept_length\n  < {ratio} * replayssm_smoke_accept_length_baseline"),
            s["for_smoke_acceptance"],
            "warning",
            "acceptance",
            f"{WHERE}: periodic smoke accept length of class {{{{ $labels.class }}}} is "
            f'{{{{ $value | printf "%.2f" }}}}, below {ratio} x its baseline',
            "The last periodic smoke run measured a mean accept length for this workload class under the "
            "fraction of the class's baseline_accept_length. The draft no longer matches its target on this "
            "node; compare with the other nodes' smoke results and check the draft model.",
        ),
        _alert(
            "ReplaySSMServingWithSGLangFold",
            _host('replayssm_overlay_fold_in_use{fold="sglang"} == 1'),
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
            "ReplaySSMSelfCheckNotBitwise",
            _host('replayssm_overlay_selfcheck_processes{outcome=~"mismatch|error"} > 0'),
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
            "ReplaySSMFallbackShape",
            _host("replayssm_overlay_fallback_shape == 1"),
            s["for_fallback_shape"],
            "warning",
            "fold",
            f"{WHERE}: commit shape {{{{ $labels.shape }}}} runs SGLang's fold",
            "A live serving process met a commit shape that the overlay's kernel does not cover and runs SGLang's "
            "fold for its calls. Build kernels that cover it (replayssm-overlay kernels build) and roll out the image.",
        ),
        _alert(
            "ReplaySSMSmokeFailed",
            _host("replayssm_smoke_success == 0"),
            s["for_smoke_failed"],
            "warning",
            "smoke",
            f"{WHERE}: the periodic smoke run failed",
            "The last periodic replayssm-smoke run against this node did not pass (exit 1: a gate failed, see "
            "replayssm_smoke_gate_passed; exit 2: it could not run). Its report.json is on the node in the "
            "monitor's report folder.",
        ),
        _alert(
            "ReplaySSMSmokeStale",
            _host(f"time() - replayssm_smoke_last_run_timestamp_seconds > {seconds(s['smoke_stale_after']):g}"),
            "0m",
            "warning",
            "missing-data",
            f"{MISSING}{WHERE}: no periodic smoke result for {{{{ $value | humanizeDuration }}}}",
            f"The periodic smoke has not finished a run for longer than {s['smoke_stale_after']}: its timer "
            f"stopped or the runs hang. Look at the node's sglang-monitor smoke timer and journal.",
        ),
        _alert(
            "ReplaySSMNodeImageDiffers",
            _host(
                f"replayssm_node_image_info\n  unless on (service, image_id)\n  ({per_fleet}\n"
                f"    == on (service) group_left max by (service) ({per_fleet}))"
            ),
            s["for_image"],
            "warning",
            "image",
            f"{WHERE}: runs image {{{{ $labels.image }}}}, not the one most nodes of the service run",
            "This node's container runs another image ID than the majority of the service's nodes: a node left "
            "behind by a rollout, or rolled back alone. `make fleet-status` lists every node's image. With as "
            "many nodes on one image as on another there is no majority and no node is singled out.",
        ),
        _alert(
            "ReplaySSMNodeJobStale",
            _host(f"time() - replayssm_node_job_timestamp_seconds > {seconds(s['job_stale_after']):g}"),
            "0m",
            "warning",
            "missing-data",
            f"{MISSING}{WHERE}: the node job has not reported for {{{{ $value | humanizeDuration }}}}",
            "The sglang-monitor metrics job has not rewritten its file for too long: the fold, self-check "
            "and image facts of this node are stale. Look at its timer and journal on the node.",
        ),
        _alert(
            "ReplaySSMOverlayMetricsUnavailable",
            _host("replayssm_node_overlay_metrics_ok == 0"),
            s["for_missing"],
            "warning",
            "missing-data",
            f"{MISSING}{WHERE}: no overlay facts from the container ({{{{ $labels.reason }}}})",
            "The node job could not run `replayssm-overlay metrics` in the service's container: it is not "
            "running, or its image has no overlay that knows the command. Fold and self-check alerts cannot "
            "fire for this node.",
        ),
        _alert(
            "ReplaySSMSGLangMetricsDisabled",
            _host("replayssm_node_sglang_metrics_enabled == 0"),
            s["for_missing"],
            "warning",
            "missing-data",
            f"{MISSING}{WHERE}: SGLang runs without --enable-metrics",
            "The service's container runs SGLang without --enable-metrics, so its live accept length is not "
            "exported and the dead-draft alert cannot fire. Add enable-metrics: true to sglang_flags and "
            "deploy.",
        ),
        _alert(
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
            "ReplaySSMSGLangNotScraped",
            _host("replayssm_node_job_timestamp_seconds") + f"\n  unless on (host, sglang_port)\n  {scraped}",
            s["for_missing"],
            "warning",
            "missing-data",
            f"{MISSING}{WHERE}: Prometheus has no SGLang metrics from port {{{{ $labels.sglang_port }}}}",
            "The node job reports a service on this port, but Prometheus scrapes no SGLang metrics from it under "
            "the same host: add the server to the scrape config (deploy/monitoring/prometheus-scrape.example.yml) "
            "or start it with --enable-metrics.",
        ),
        _alert(
            "ReplaySSMSmokeMissing",
            _host("replayssm_node_smoke_scheduled == 1")
            + "\n  unless on (instance, service)\n  replayssm_smoke_last_run_timestamp_seconds",
            s["for_missing"],
            "warning",
            "missing-data",
            f"{MISSING}{WHERE}: the periodic smoke is scheduled but has never written a result",
            "The node job says a periodic smoke is installed for this service, but node_exporter serves no smoke "
            "result for it: the first run failed to start (look at the smoke unit's journal) or wrote elsewhere.",
        ),
    ]
    return {"groups": [{"name": GROUP, "interval": s["evaluation_interval"], "rules": recorded + alerts}]}


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
