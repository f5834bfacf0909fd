"""`replayssm-overlay metrics`: the facts of `status --json` a fleet watches, as Prometheus text that
`promtool check metrics` accepts and as JSON; from records that serving processes wrote in $RSO_STATE_DIR."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from replayssm_overlay import fold, metrics, promtext, records
from tests.monitoring.conftest import REPO

SGLANG_DIR = next((REPO / ".venv" / "lib").glob("python3*/site-packages/sglang"))


def _record(pid: int, outcome: str, kind: str, protocol: str = "fold") -> dict:
    return {
        "schema": 1,
        "pid": pid,
        "protocol": protocol,
        "time": 1.0,
        "outcome": outcome,
        "detail": "test",
        "seed": 0,
        "geometry": {},
        "fold": {"fold": kind, "reason": "test", "decided": True},
        "seconds": 0.1,
    }


def _status(selfcheck: list, fallbacks: list | None = None) -> dict:
    return {
        "overlay_version": "0.1.0",
        "release": "0.5.19",
        "declared_version": "0.5.19",
        "state": "patched",
        "unverified": False,
        "protocol": "fold",
        "exactness": {"bitwise_equal_to": "replayssm-off-state"},
        "kernels": {"fold": "overlay-cuda", "fallbacks_recorded": fallbacks or []},
        "selfcheck": selfcheck,
    }


def test_facts_come_from_the_live_serving_processes():
    found = metrics.facts(
        _status(
            [
                {**_record(11, "passed", "overlay-cuda"), "alive": True},
                {**_record(12, "mismatch", "sglang"), "alive": True},
                {**_record(13, "passed", "overlay-cuda"), "alive": True},
                {**_record(9, "passed", "overlay-triton"), "alive": False},
                {"problem": "unreadable record: not a JSON object", "path": "/x"},
            ],
            [{"shape": "B=8 T=16", "pid": 11}, {"shape": "B=8 T=16", "pid": 13}, {"shape": "B=4 T=9", "pid": 12}],
        )
    )
    assert found["fold_in_use"] == ["overlay-cuda", "sglang"]  # the dead process's overlay-triton is not in use
    assert found["selfcheck_outcomes"] == {"passed": 2, "mismatch": 1}
    assert found["serving_processes"] == 3 and found["unreadable_records"] == 1
    assert found["fallback_shapes"] == ["B=4 T=9", "B=8 T=16"]
    assert found["fold_expected"] == "overlay-cuda"
    assert found["protocol"] == "fold" and found["bitwise_equal_to"] == "replayssm-off-state"


def test_a_ring_release_commits_with_sglangs_mtp_commit_not_a_fold():
    ring = {
        **_status([{**_record(7, "ring-commit", "none", protocol="ring"), "alive": True}]),
        "protocol": "ring",
        "exactness": {"bitwise_equal_to": "sglang-mtp-commit"},
    }
    text = metrics.exposition(metrics.facts(ring))
    assert 'replayssm_overlay_fold_in_use{fold="sglang-mtp-commit"} 1\n' in text
    assert 'replayssm_overlay_fold_in_use{fold="sglang"} 0\n' in text and 'fold_in_use{fold="none"} 0\n' in text
    assert 'bitwise_equal_to="sglang-mtp-commit"' in text and 'protocol="ring"' in text


def test_no_serving_process_is_fold_none_and_every_kind_is_a_gauge(tmp_path):
    text = metrics.exposition(metrics.facts(_status([])), {"service": "svc"})
    for kind in (*fold.FOLDS, metrics.RING_COMMIT, metrics.NO_FOLD):
        expected = 1 if kind == metrics.NO_FOLD else 0
        assert f'replayssm_overlay_fold_in_use{{fold="{kind}",service="svc"}} {expected}\n' in text
    assert "replayssm_overlay_fallback_shape{" not in text


def test_the_text_passes_promtool_and_escapes_label_values(tmp_path):
    odd = 'B=8 "T"=16 \\ raw\nnext'
    text = metrics.exposition(
        metrics.facts(_status([{**_record(5, "not-covered", "sglang"), "alive": True}], [{"shape": odd, "pid": 5}])),
        {"service": 'a"b'},
    )
    promtool = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert promtool.returncode == 0, promtool.stdout + promtool.stderr
    assert 'shape="B=8 \\"T\\"=16 \\\\ raw\\nnext"' in text
    assert promtext.value_of(text, "replayssm_overlay_fallback_shapes") == 1.0


def _cli(*args: str, state_dir) -> subprocess.CompletedProcess:
    env = dict(os.environ, RSO_STATE_DIR=str(state_dir), PYTHONPATH=str(REPO / "overlay"))
    return subprocess.run(
        [sys.executable, "-m", "replayssm_overlay", "metrics", "--sglang-dir", str(SGLANG_DIR), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_the_command_reads_the_records_and_writes_a_file_whole(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    # as a serving process writes them: each names its process (this test's, alive; and one that is gone)
    tree = str(SGLANG_DIR.resolve())
    live = {**_record(os.getpid(), "mismatch", "sglang"), "process": records.identity(), "sglang_dir": tree}
    gone = {
        **_record(999999, "passed", "overlay-cuda"),
        "process": {**records.identity(), "pid": 999999},
        "sglang_dir": tree,
    }
    (state / "selfcheck-live.json").write_text(json.dumps(live))
    (state / "selfcheck-gone.json").write_text(json.dumps(gone))
    out = tmp_path / "textfile" / "replayssm.prom"
    out.parent.mkdir()
    proc = _cli("--label", "service=sglang-overlay", "--out", str(out), state_dir=state)
    assert proc.returncode == 0 and proc.stdout == "", proc.stderr
    text = out.read_text()
    assert 'replayssm_overlay_fold_in_use{fold="sglang",service="sglang-overlay"} 1' in text
    assert 'replayssm_overlay_fold_in_use{fold="overlay-cuda",service="sglang-overlay"} 0' in text
    assert 'replayssm_overlay_selfcheck_processes{outcome="mismatch",service="sglang-overlay"} 1' in text
    assert 'sglang_release="0.5.19"' in text
    assert sorted(p.name for p in out.parent.iterdir()) == ["replayssm.prom"]  # no temp file left
    facts = json.loads(_cli("--json", state_dir=state).stdout)
    assert facts["fold_in_use"] == ["sglang"] and facts["selfcheck_outcomes"] == {"mismatch": 1}


@pytest.mark.parametrize(
    "args, message",
    [
        (["--label", "service"], "--label 'service' is not KEY=VALUE"),
        (["--label", "__name__=x"], "is not KEY=VALUE with a Prometheus label name"),
        (["--out", "/nonexistent/folder/x.prom"], "/nonexistent/folder"),
    ],
)
def test_bad_arguments_are_one_clear_message(tmp_path, args, message):
    proc = _cli(*args, state_dir=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
