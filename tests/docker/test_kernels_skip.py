"""`KERNELS=skip` says what the node then does (not a first-use compilation, which the
default fold choice never makes). The kernel stage's record is read as the image would carry it, and the
fold the node reports with no prebuilt kernels is the overlay's own answer (`fold.describe()`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from replayssm_overlay.kernels import loader

SCRIPT = Path(__file__).resolve().parents[2] / "docker" / "scripts" / "kernels_stage.py"


def test_skip_says_the_node_commits_with_sglangs_own_fold(tmp_path):
    stage = tmp_path / "stage"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--mode", "skip", "--stage", str(stage)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    detail = json.loads((stage / "kernels-stage.json").read_text())["detail"]
    assert "the node commits with SGLang's own fold" in detail and "first use" not in detail
    env = dict(os.environ, **{loader.ENV_DIR: str(stage / "kernels")})
    env.pop("RSO_FOLD", None)
    described = subprocess.run(
        [sys.executable, "-c", "import json; from replayssm_overlay import fold; print(json.dumps(fold.describe()))"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert json.loads(described.stdout)["fold"] == "sglang", described.stdout + described.stderr
