"""Time to detect per tier, measured live with the default settings (deploy/monitoring/runbook.md quotes it).

Two SGLang test doubles on 127.0.0.1 under steady traffic (accept length 3.0), each with its smoke baseline (its
measured healthy live accept length, as a periodic smoke file in node_exporter's textfile folder), a real
node_exporter and a real Prometheus at the example scrape intervals (SGLang 15 s, node_exporter 30 s) with the
generated rules at their defaults. Once both servers' live accept length is recorded, the draft goes bad on both
at the same moment: to 1.0 on one (a dead draft: both tiers) and to 2.1 on the other (a slide to 70%: the
warning tier only). The tool polls Prometheus's alerts and writes when each alert went pending and firing,
counted from that moment, as JSON.

    python3 tests/monitoring/detection_time.py --out detection.json [--timeout-min 45]

Takes about 35 minutes (the warning tier's `for:` is 30 minutes); CPU use is a few percent. Nothing here ships.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.infra.prometheus import NodeExporter, Prometheus, free_port  # noqa: E402
from tests.monitoring.conftest import load_alert_rules  # noqa: E402

BASELINE = 3.0
DROPS = {"dead": 1.0, "slide": 2.1}  # service -> accept length after the drop
TIERS = ("ReplaySSMDraftAcceptanceCollapsed", "ReplaySSMDraftAcceptanceLow")


def _smoke_file(service: str, port: int, baseline: float) -> str:
    labels = f'service="{service}",sglang_port="{port}"'
    return (
        f"# TYPE replayssm_smoke_last_run_timestamp_seconds gauge\n"
        f"replayssm_smoke_last_run_timestamp_seconds{{{labels}}} {time.time()}\n"
        f"# TYPE replayssm_smoke_accept_length_baseline gauge\n"
        f'replayssm_smoke_accept_length_baseline{{class="code",{labels}}} {baseline}\n'
    )


def _load(urls: list[str], stop: threading.Event) -> None:
    body = json.dumps({"text": "def f(x):", "sampling_params": {"max_new_tokens": 32}}).encode()
    while not stop.is_set():
        for url in urls:
            request = urllib.request.Request(url + "/generate", body, {"Content-Type": "application/json"})
            try:
                urllib.request.urlopen(request, timeout=10).read()
            except OSError:
                pass
        stop.wait(0.5)


def measure(root: Path, timeout_s: float) -> dict:
    textfile = root / "textfile"
    textfile.mkdir()
    servers, ports = {}, {}
    for service in DROPS:
        ports[service] = free_port()
        (root / f"{service}.accept").unlink(missing_ok=True)
        servers[service] = subprocess.Popen(
            [
                sys.executable,
                str(REPO / "tests" / "doubles" / "sglang_server.py"),
                "--host",
                "127.0.0.1",
                "--port",
                str(ports[service]),
                "--speculative-algorithm",
                "DFLASH",
                "--enable-linear-replayssm-spec",
                "--enable-metrics",
                "--quiet",
                "--accept-length",
                str(BASELINE),
                "--accept-length-file",
                str(root / f"{service}.accept"),
            ],
            stderr=subprocess.DEVNULL,
        )
    rules = root / "rules.yml"
    rules.write_text(load_alert_rules().render())
    exporter = NodeExporter(root / "exporter", textfile)
    config = {
        "global": {"evaluation_interval": "1m"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {
                "job_name": "sglang",
                "scrape_interval": "15s",
                "static_configs": [{"targets": [f"127.0.0.1:{p}" for p in ports.values()]}],
            },
            {
                "job_name": "node",
                "scrape_interval": "30s",
                "static_configs": [{"targets": [exporter.url.split("//")[1]]}],
            },
        ],
    }
    prom = Prometheus(root / "prometheus", config)
    stop = threading.Event()
    load = threading.Thread(target=_load, args=([f"http://127.0.0.1:{p}" for p in ports.values()], stop))
    try:
        exporter.wait_ready()
        prom.wait_ready()
        load.start()
        live = []
        while len(live) < len(DROPS):
            time.sleep(30)
            live = prom.query("replayssm:sglang_accept_length:ratio_rate")["data"]["result"]
        # the healthy live accept length is each server's baseline (the double varies it per prompt)
        baselines = {
            s: float(next(r["value"][1] for r in live if r["metric"]["sglang_port"] == str(p)))
            for s, p in ports.items()
        }
        for service, port in ports.items():
            (textfile / f"replayssm_smoke_{service}.prom").write_text(_smoke_file(service, port, baselines[service]))
        time.sleep(60)  # node_exporter scraped, the baselines recorded
        dropped = time.time()
        for service, value in DROPS.items():
            (root / f"{service}.accept").write_text(f"{value}\n")
        seen: dict[str, dict[str, float]] = {}
        while time.time() - dropped < timeout_s and len([1 for s in seen.values() if "firing" in s]) < 3:
            for service, port in ports.items():  # the smoke file stays fresh, as the hourly smoke keeps it
                smoke = _smoke_file(service, port, baselines[service])
                (textfile / f"replayssm_smoke_{service}.prom").write_text(smoke)
            for alert in prom.get("/api/v1/alerts")["data"]["alerts"]:
                name = alert["labels"]["alertname"]
                if name in TIERS:
                    service = next(s for s, p in ports.items() if alert["labels"].get("sglang_port") == str(p))
                    seen.setdefault(f"{name} {service}", {}).setdefault(alert["state"], round(time.time() - dropped))
            time.sleep(5)
        live = prom.query("replayssm:sglang_accept_length:ratio_rate")["data"]["result"]
        return {
            "baselines": baselines,
            "live_at_the_end": {
                s: float(next(r["value"][1] for r in live if r["metric"]["sglang_port"] == str(p)))
                for s, p in ports.items()
            },
            "drops": DROPS,
            "settings": load_alert_rules().settings(),
            "scrape_intervals": {"sglang": "15s", "node": "30s"},
            "seconds_after_the_drop": seen,
            "not_firing_after_s": round(time.time() - dropped),
        }
    finally:
        stop.set()
        prom.stop()
        exporter.stop()
        for server in servers.values():
            server.terminate()
            server.wait(timeout=30)


def main() -> int:
    summary = __doc__.partition("\n\n")[0]
    parser = argparse.ArgumentParser(description=summary)
    parser.add_argument("--out", required=True)
    parser.add_argument("--timeout-min", type=float, default=45.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rso-detection-") as folder:
        result = measure(Path(folder), args.timeout_min * 60)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["seconds_after_the_drop"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
