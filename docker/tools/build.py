"""`make build`: the overlay image, from the locked base, in four steps with progress on stderr.

Why it exists: the Dockerfile alone cannot know the patched files' sha256 (its labels) nor check the
base before pulling. So: (1) preflight (daemon, lock, base; docker/tools/preflight.py); (2) stage a
build context that holds only the overlay wheel (`pip wheel --no-deps` of the project's tracked files at
the commit, docker/tools/git_source.py; a dirty checkout is refused unless --allow-dirty) and docker/scripts/, so no
secret or stray file can reach a layer; (3) build the `base-check` stage and
read its report (the dry run's sha256 of each file after patching); (4) build the image with those
values as labels, which the last build step cross-checks against the patched files.

    python3 docker/tools/build.py --image NAME:TAG [--release R] [--lane L] [--kernels build|skip]
        [--base-image REF --standin] [--python PY] [--build-dir DIR] [--allow-dirty]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from git_source import Source, export
from preflight import resolve_base

from common import DOCKER_DIR, REPO, Refusal, docker, image_id, log, overlay_version, run_tool

IN_IMAGE_SCRIPTS = ("check_base.py", "kernels_stage.py", "write_manifest.py")
PROJECT_FILES = ("pyproject.toml", "README.md", "overlay", "smoke_tests")
BASE_CHECK_REPORT = "/opt/replayssm-overlay/base-check.json"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
STEP = re.compile(r"^Step \d+/\d+ : ")  # the classic builder starts a step


def build_wheel(python: str, wheels: Path, allow_dirty: bool) -> tuple[Path, Source]:
    """`pip wheel --no-deps` of the project's tracked files at the commit (git_source.export): no
    untracked file, stale build/ or egg-info can reach the wheel."""
    version = overlay_version()
    with tempfile.TemporaryDirectory(prefix="rso-wheel-src-") as src:
        source = export(REPO, PROJECT_FILES, Path(src), allow_dirty)
        # offline first (the python's own setuptools), then with pip's isolated build env (needs PyPI)
        for isolation in (["--no-build-isolation"], []):
            proc = subprocess.run(
                [
                    python,
                    "-m",
                    "pip",
                    "wheel",
                    "--no-deps",
                    *isolation,
                    "--disable-pip-version-check",
                    "-q",
                    "-w",
                    str(wheels),
                    src,
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            if proc.returncode == 0:
                break
    if proc.returncode != 0:
        raise Refusal(
            f"building the overlay wheel with {python} failed:\n{proc.stdout.strip()}",
            "run `make setup` (.venv has pip and setuptools), or pass WHEEL_PYTHON=<a python with "
            "pip and setuptools>=70.1>",
        )
    found = sorted(wheels.glob("sglang_replayssm_overlay-*.whl"))
    if [w.name.split("-")[1] for w in found] != [version]:
        raise Refusal(
            f"expected one overlay wheel of version {version} in {wheels}, found {[w.name for w in found]}",
            "remove the build directory and run the build again",
        )
    return found[0], source


def stage_context(context: Path, python: str, allow_dirty: bool) -> tuple[Path, Source]:
    """A fresh build context: wheels/<overlay wheel> and scripts/<in-image scripts>, nothing else."""
    if context.exists():
        shutil.rmtree(context)
    (context / "scripts").mkdir(parents=True)
    for name in IN_IMAGE_SCRIPTS:
        shutil.copy2(DOCKER_DIR / "scripts" / name, context / "scripts" / name)
    return build_wheel(python, context / "wheels", allow_dirty)


def _git(*args: str) -> str:
    proc = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def provenance(source: Source) -> dict[str, str]:
    """OCI created/revision/source from git (commit time, so a rebuild of one commit labels the same);
    a build from uncommitted changes has the revision `<commit>-dirty`."""
    created = _git("log", "-1", "--format=%cI") or datetime.datetime.now(datetime.timezone.utc).isoformat()
    return {
        "RSO_CREATED": created,
        "RSO_REVISION": source.revision,
        "RSO_SOURCE": _git("remote", "get-url", "origin") or "unknown",
    }


def docker_build(context: Path, args: dict[str, str], *extra: str) -> None:
    """`docker build` with its log streamed through; a failed step's own output is repeated at the end."""
    cmd = [
        os.environ.get("DOCKER", "docker"),
        "build",
        "--network",
        "none",
        "-f",
        str(DOCKER_DIR / "Dockerfile"),
        *extra,
    ]
    for key, value in args.items():
        cmd += ["--build-arg", f"{key}={value}"]
    proc = subprocess.Popen([*cmd, str(context)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    step_output = []  # what the current (last) build step printed
    for line in proc.stdout:
        sys.stderr.write(line)
        clean = ANSI.sub("", line).rstrip()
        if STEP.match(clean):
            step_output = []
        elif clean and not clean.startswith(("The command '", " ---> ", "Removing intermediate")):
            step_output.append(clean)
    if proc.wait() != 0:
        tail = "\n  ".join(step_output[-15:])
        if any(line.startswith("base-check failed [") for line in step_output):
            raise Refusal(
                f"the base check refused this base:\n  {tail}", "see docker/README.md, 'When the base check fails'"
            )
        raise Refusal(f"docker build failed; the failed step printed:\n  {tail}", "see the build log above")


def read_patched_files(check_image: str) -> str:
    """`relpath=sha256,...` of the files after patching, from the base-check stage's dry run."""
    proc = docker("run", "--rm", "--network", "none", "--entrypoint", "cat", check_image, BASE_CHECK_REPORT)
    report = json.loads(proc.stdout)
    return ",".join(f"{relpath}={entry['sha256_after']}" for relpath, entry in sorted(report["pristine"].items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--image", required=True, help="NAME:TAG to give the image")
    parser.add_argument("--release", help="SGLang release (default: SGLANG_RELEASE of docker/base.lock)")
    parser.add_argument("--lane", help="CUDA lane (default: CUDA_LANE of docker/base.lock)")
    parser.add_argument("--base-image", default="")
    parser.add_argument("--base-digest", default="")
    parser.add_argument("--standin", action="store_true")
    parser.add_argument("--kernels", default="build", choices=("build", "skip"))
    parser.add_argument("--python", default=sys.executable, help="python with pip+setuptools to build the wheel")
    parser.add_argument("--base-python", default="python3", help="the base image's python (RSO_PYTHON)")
    parser.add_argument("--build-dir", default=str(REPO / "build" / "docker"))
    parser.add_argument(
        "--allow-dirty",
        action="store_true",
        help="build although tracked files have uncommitted changes (labelled <commit>-dirty)",
    )
    args = parser.parse_args()

    log("[1/4] preflight: daemon, docker/base.lock, base image")
    base = resolve_base(args.release, args.lane, args.base_image, args.base_digest, args.standin)
    log(f"      base {base['from']} ({'stand-in' if base['standin'] else 'release'}, {base['digest']})")
    log("[2/4] build context: overlay wheel + docker/scripts")
    context = Path(args.build_dir) / "context"
    wheel, source = stage_context(context, args.python, args.allow_dirty)
    version = overlay_version()
    tag = args.image.rsplit(":", 1)[-1]
    build_args = {
        "BASE_IMAGE": base["from"],
        "BASE_NAME": base["name"],
        "BASE_DIGEST": base["digest"],
        "BASE_STANDIN": "true" if base["standin"] else "false",
        "SGLANG_RELEASE": base["release"],
        "CUDA_LANE": base["lane"],
        "OVERLAY_VERSION": version,
        "IMAGE_VERSION": tag,
        "RSO_KERNELS": args.kernels,
        "RSO_PYTHON": args.base_python,
    }
    log(f"      {wheel.name} from {source.revision}")
    log("[3/4] base check (stage base-check)")
    iidfile = Path(args.build_dir) / "base-check.iid"
    docker_build(context, build_args, "--target", "base-check", "--iidfile", str(iidfile))
    check_image = iidfile.read_text().strip()
    build_args["RSO_PATCHED_FILES"] = read_patched_files(check_image)
    log(f"[4/4] image {args.image} (overlay {version}, kernels: {args.kernels})")
    docker_build(context, {**build_args, **provenance(source)}, "-t", args.image)
    docker("image", "rm", check_image, check=False)  # the stage's own tag-less image; its layers stay cached
    built = image_id(args.image)
    (Path(args.build_dir) / "last-image").write_text(f"{args.image} {built}\n")
    print(f"built {args.image} {built}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("DOCKER_BUILDKIT", "0")
    run_tool(main)
