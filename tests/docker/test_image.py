"""The overlay image, built for real (`make build`) on the stand-in base, inspected from the outside and
from the inside: patched and verified, nothing else changed, labelled, runs like the base, small."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.docker.conftest import UNTRACKED_SECRET
from tests.docker.helpers import REPO, fs_snapshot, make, run_in

pytestmark = pytest.mark.slow

SGLANG_DIR = "/sgl-workspace/sglang/python/sglang"
TARGETS = (
    "srt/mem_cache/kv_cache_configurator.py",
    "srt/speculative/dflash_worker_v2.py",
    "srt/speculative/dspark_components/dspark_worker_v2.py",
)
# everything the overlay may add; anything else in the image that is not in the base fails the test
ALLOWED_NEW = re.compile(
    r"^(/opt/replayssm-overlay(/.*)?"
    r"|/usr/local/lib/python3\.\d+/dist-packages/(replayssm_overlay|replayssm_smoke|sglang_replayssm_overlay-[^/]+\.dist-info)(/.*)?"
    r"|/usr/local/bin/replayssm-(overlay|smoke)"
    r"|/sgl-workspace/sglang/python/sglang-replayssm-overlay(/.*)?)$"
)
OCI_LABELS = (
    "title",
    "description",
    "version",
    "created",
    "revision",
    "source",
    "licenses",
    "base.name",
    "base.digest",
)


def _labels(dockerd, ref):
    return json.loads(dockerd.docker("image", "inspect", "--format", "{{json .Config.Labels}}", ref).stdout)


def test_image_is_tagged_with_release_and_overlay_version(built_image, overlay_version):
    assert built_image.ref == f"sglang-replayssm:0.5.19-{overlay_version}"
    assert "[4/4] image" in built_image.log and "base-check identity: ok" in built_image.log


def test_three_files_patched_and_verified_inside_the_container(dockerd, built_image):
    status = json.loads(
        dockerd.docker(
            "run", "--rm", "--network", "none", built_image.ref, "replayssm-overlay", "status", "--json"
        ).stdout
    )
    assert status["state"] == "patched" and status["release"] == "0.5.19" and not status["unverified"]
    assert status["sglang_dir"] == SGLANG_DIR
    assert sorted(f["relpath"] for f in status["files"]) == sorted(TARGETS)
    assert all(f["state"] == "patched" for f in status["files"])
    verify = dockerd.docker(
        "run", "--rm", "--network", "none", built_image.ref, "replayssm-overlay", "verify", check=False
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_everything_else_is_byte_identical_to_the_base(dockerd, built_image):
    before, after = fs_snapshot(dockerd, built_image.base), fs_snapshot(dockerd, built_image.ref)
    changed = sorted(p for p in before if p in after and before[p] != after[p])
    assert changed == sorted(f"{SGLANG_DIR}/{t}" for t in TARGETS)
    assert [p for p in before if p not in after] == []
    unexpected = sorted(p for p in after if p not in before and not ALLOWED_NEW.match(p))
    assert unexpected == [], "files the overlay must not add (secrets, caches, stray build files)"
    assert any(p.startswith("/opt/replayssm-overlay/") for p in after if p not in before)


def _git(*args):
    return subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True, text=True).stdout


def test_only_tracked_files_reach_the_image_and_the_revision_says_so(dockerd, built_image):
    """The build ran with an untracked module in overlay/replayssm_overlay/ (conftest.UNTRACKED_SECRET):
    the installed package holds exactly the tracked modules, the wheel in the image lists no other file,
    and the revision label is the commit, `-dirty` exactly when tracked files differ from it."""
    after = fs_snapshot(dockerd, built_image.ref)
    installed = re.compile(r"^/usr/local/lib/python3\.\d+/dist-packages/replayssm_overlay/(.+\.py)$")
    in_image = {m.group(1) for p in after if (m := installed.match(p))}
    tracked = {
        p.removeprefix("overlay/replayssm_overlay/")
        for p in _git("ls-files", "overlay/replayssm_overlay").split()
        if p.endswith(".py")
    }
    assert in_image == tracked
    assert not [p for p in after if UNTRACKED_SECRET.stem in p]
    names = run_in(
        dockerd,
        built_image.ref,
        "python3",
        "-c",
        "import glob, zipfile; print('\\n'.join(n for w in glob.glob('/opt/replayssm-overlay/build/wheels/*.whl')"
        " for n in zipfile.ZipFile(w).namelist()))",
    ).stdout.split()
    assert names and not [n for n in names if UNTRACKED_SECRET.stem in n]
    dirty = bool(_git("diff", "--name-only", "HEAD", "--").strip())
    revision = _labels(dockerd, built_image.ref)["org.opencontainers.image.revision"]
    assert revision == _git("rev-parse", "HEAD").strip() + ("-dirty" if dirty else "")


def test_labels_describe_base_overlay_and_patched_files(dockerd, built_image, overlay_version):
    labels = _labels(dockerd, built_image.ref)
    for key in OCI_LABELS:
        assert labels.get(f"org.opencontainers.image.{key}"), key
    assert labels["org.opencontainers.image.base.name"] == built_image.base
    assert labels["org.opencontainers.image.base.digest"] == built_image.base_id
    assert labels["org.replayssm.base.standin"] == "true"
    assert labels["org.replayssm.overlay.version"] == overlay_version
    assert labels["org.replayssm.sglang.release"] == "0.5.19"
    assert labels["org.replayssm.kernels"] == "build"
    status = json.loads(
        run_in(dockerd, built_image.ref, "python3", "-m", "replayssm_overlay", "status", "--json").stdout
    )
    patched = dict(item.split("=") for item in labels["org.replayssm.overlay.patched-files"].split(","))
    assert patched == {f["relpath"]: f["sha256"] for f in status["files"]}


def test_manifest_at_its_fixed_path(dockerd, built_image, overlay_version):
    path = _labels(dockerd, built_image.ref)["org.replayssm.overlay.manifest"]
    assert path == "/opt/replayssm-overlay/manifest.json"
    manifest = json.loads(run_in(dockerd, built_image.ref, "cat", path).stdout)
    assert manifest["image"]["overlay_version"] == overlay_version
    assert manifest["image"]["base_digest"] == built_image.base_id
    assert manifest["overlay"]["state"] == "patched"
    assert manifest["overlay"]["manifest"]["files"]  # the patcher's own record, embedded
    assert manifest["kernels"]["status"] == "built"
    assert manifest["base_check"]["sglang"]["package_dir"] == SGLANG_DIR
    assert manifest["base_check"]["sglang"]["declared"] == {"distribution": "0.5.19", "source": "0.5.19"}
    assert set(manifest["base_check"]["pristine"]) == set(TARGETS)


def test_image_runs_exactly_like_the_base(dockerd, built_image):
    fields = (
        "{{json .Config.Entrypoint}} {{json .Config.Cmd}} {{json .Config.WorkingDir}} {{json .Config.Env}} "
        "{{json .Config.User}}"
    )
    ours = dockerd.docker("image", "inspect", "--format", fields, built_image.ref).stdout
    theirs = dockerd.docker("image", "inspect", "--format", fields, built_image.base).stdout
    assert ours == theirs
    assert (
        dockerd.docker("run", "--rm", "--network", "none", built_image.ref).stdout
        == dockerd.docker("run", "--rm", "--network", "none", built_image.base).stdout
    )


def test_image_diff_shows_the_effective_diff_and_small_added_layers(dockerd, built_image):
    proc = make(dockerd, "image-diff", f"IMAGE={built_image.ref}")
    assert proc.returncode == 0, proc.stdout[-3000:]
    for target in TARGETS:
        assert f"+++ b/sglang/{target}" in proc.stdout
    assert "replayssm-overlay" in proc.stdout and "== manifest" in proc.stdout
    added = re.search(r"layers added to the base: (\d+), ([\d.]+) MB", proc.stdout)
    assert added and int(added.group(1)) >= 2
    assert float(added.group(2)) < 50.0


def test_image_holds_the_cuda_kernel_that_kernels_check_accepts_for_sm90(dockerd, built_image):
    """KERNELS=build ran the kernels stage as on the real image (with its NVRTC): the loader's default folder
    holds the CUDA commit kernel, and the overlay's own check accepts it for sm_90 (no GPU here: --arch 90)."""
    stage = json.loads(run_in(dockerd, built_image.ref, "cat", "/opt/replayssm-overlay/kernels-stage.json").stdout)
    assert stage["status"] == "built" and stage["dir"] == "/opt/replayssm-overlay/kernels", stage
    proc = run_in(
        dockerd,
        built_image.ref,
        "replayssm-overlay",
        "kernels",
        "check",
        "/opt/replayssm-overlay/kernels",
        "--arch",
        "90",
        "--json",
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check = json.loads(proc.stdout)
    image_nvrtc = run_in(
        dockerd,
        built_image.ref,
        "python3",
        "-c",
        "import importlib.metadata as m; print(m.version('nvidia-cuda-nvrtc'))",
    ).stdout.strip()
    assert check["ok"] and check["problems"] == []
    assert check["manifest"]["cuda"].startswith(f"built with NVRTC {'.'.join(image_nvrtc.split('.')[:2])} for sm_90")
    # the same folder is refused for another GPU generation: the check is not a rubber stamp
    other = run_in(
        dockerd,
        built_image.ref,
        "replayssm-overlay",
        "kernels",
        "check",
        "/opt/replayssm-overlay/kernels",
        "--arch",
        "80",
        check=False,
    )
    assert other.returncode == 1, other.stdout + other.stderr


def test_kernel_stage_reports_a_failed_build_and_a_wrong_mode(dockerd, built_image):
    """The stage script, run in the image: a build the kernels CLI refuses (no NVRTC where it looks) fails
    with the stage's message after the CLI's own; a wrong mode is a usage error."""
    script = "/opt/replayssm-overlay/build/scripts/kernels_stage.py"
    build = run_in(
        dockerd,
        built_image.ref,
        "env",
        "RSO_NVRTC=/nonexistent/libnvrtc.so",
        "python3",
        script,
        "--mode",
        "build",
        "--stage",
        "/tmp/s",
        check=False,
    )
    assert build.returncode == 1 and "the AOT build failed" in build.stderr, build.stdout + build.stderr
    assert "no NVRTC library" in build.stderr and "KERNELS=skip" in build.stderr  # the CLI's, then the stage's
    wrong = run_in(dockerd, built_image.ref, "python3", script, "--mode", "fast", "--stage", "/tmp/t", check=False)
    assert wrong.returncode == 2 and "must be `build` or `skip`" in wrong.stderr


def test_manifest_step_refuses_labels_that_do_not_match_the_image(dockerd, built_image):
    """The last build step cross-checks the labels' values against the image; run it with wrong ones."""
    script = "/opt/replayssm-overlay/build/scripts/write_manifest.py"
    common = [
        "--base-check",
        "/opt/replayssm-overlay/base-check.json",
        "--kernels",
        "/opt/replayssm-overlay/kernels-stage.json",
        "--out",
        "/tmp/m.json",
    ]
    wrong_sha = ",".join(f"{t}={'0' * 64}" for t in TARGETS)
    proc = run_in(dockerd, built_image.ref, "python3", script, *common, "--patched-files", wrong_sha, check=False)
    assert proc.returncode == 1 and "differ from the labels' values" in proc.stderr, proc.stderr
    labels = _labels(dockerd, built_image.ref)
    proc = run_in(
        dockerd,
        built_image.ref,
        "python3",
        script,
        *common,
        "--patched-files",
        labels["org.replayssm.overlay.patched-files"],
        "--field",
        "overlay_version=9.9.9",
        check=False,
    )
    assert proc.returncode == 1 and "the build says 9.9.9" in proc.stderr, proc.stderr
