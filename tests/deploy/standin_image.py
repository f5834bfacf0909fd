"""The stand-in server image the rollout tests deploy, saved as `make save`-style tarballs.

No GPU server can run here, so the image the tests roll out is minimal Debian + python3 (the
debootstrap rootfs that the image tests' `tests/docker/standin.py` builds and caches) with the test
double of SGLang's HTTP API (`tests/doubles/sglang_server.py`) installed as a module named `sglang.launch_server`:
the role's
production command line, `python3 -m sglang.launch_server --model-path ... --host ... --port ...`,
runs unchanged. Like the real image it carries the overlay and the smoke suite (with PyYAML's pure-Python
part), so the monitoring jobs run `python3 -m replayssm_overlay metrics` and `python3 -m replayssm_smoke.cli`
in it. Two versions with different image IDs (v1, v2) let the tests roll forward and back.
Each is saved like `make save` does: `<name>_<tag>.tar.gz`, its `.sha256`, and `<name>_<tag>.image-id`.

Nothing here ships; it lives under tests/.
"""

from __future__ import annotations

import hashlib
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.docker import standin
from tests.infra.dockerd import DOCKER_CLIENT, start_dockerd

REPO = Path(__file__).resolve().parents[2]
DOUBLE = REPO / "tests" / "doubles" / "sglang_server.py"
REPOSITORY = "rso-standin-sglang-server"
APP_DIR = "/opt/rso-standin"

# `python3 -m sglang.launch_server ARGS` inside the stand-in image: SGLang's arguments mapped onto the
# double's, the rest ignored. Test-only knobs of the double pass through when given as extra args.
LAUNCH_SERVER_SHIM = (
    '''\
"""Stand-in for SGLang's launch_server in the rollout tests' image (tests/deploy; never ships)."""
import argparse
import runpy
import sys

p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
p.add_argument("--host", default="127.0.0.1")
p.add_argument("--port", default="30000")
p.add_argument("--model-path", default="model")
p.add_argument("--speculative-algorithm", default="NONE")
p.add_argument("--speculative-num-draft-tokens", default="16")
p.add_argument("--unhealthy", action="store_true")
p.add_argument("--start-delay", default="0")
p.add_argument("--exit-code", type=int, default=None)
args, ignored = p.parse_known_args()
if args.exit_code is not None:
    print("stand-in launch_server: loading the model failed (asked by --exit-code)", file=sys.stderr, flush=True)
    sys.exit(args.exit_code)
argv = ["--host", args.host, "--port", args.port, "--model-path", args.model_path,
        "--algorithm", args.speculative_algorithm, "--draft-tokens", args.speculative_num_draft_tokens,
        "--start-delay", args.start_delay, "--quiet"]
if args.unhealthy:
    argv.append("--unhealthy")
print("stand-in launch_server: ignoring", " ".join(ignored), file=sys.stderr, flush=True)
sys.argv = ["sglang_server.py", *argv]
runpy.run_path("'''
    + APP_DIR
    + """/sglang_server.py", run_name="__main__")
"""
)


def _python_packages() -> dict[str, bytes]:
    """The overlay, the smoke suite and PyYAML's Python modules, as files under APP_DIR (on PYTHONPATH)."""
    import yaml

    trees = {
        "replayssm_overlay": REPO / "overlay" / "replayssm_overlay",
        "replayssm_smoke": REPO / "smoke_tests" / "replayssm_smoke",
        "yaml": Path(yaml.__file__).parent,
    }
    return {
        f"{APP_DIR}/{name}/{path.relative_to(root)}": path.read_bytes()
        for name, root in trees.items()
        for path in sorted(root.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts and path.suffix in {".py", ".jsonl", ".yaml", ".cu"}
    }


@dataclass(frozen=True)
class SavedImage:
    """A `make save` output: the tag inside the tarball, the tarball, and the image ID it loads as."""

    ref: str
    tarball: Path
    image_id: str


def _debian_image(daemon) -> str:
    """Import `standin.rootfs_tarball()` (the cached debootstrap rootfs: minimal Debian + python3) into `daemon`."""
    ref = "rso-deploy-debian:bookworm"
    daemon.docker(
        "import",
        "--change",
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        str(standin.rootfs_tarball()),
        ref,
        timeout=600,
    )
    return ref


def build_saved_images(out_dir: Path) -> dict[str, SavedImage]:
    """Build v1 and v2 of the stand-in server image on a private builder daemon and save both."""
    out_dir.mkdir(parents=True, exist_ok=True)
    builder = start_dockerd(out_dir / "builder")
    try:
        base = _debian_image(builder)
        files = {
            f"{APP_DIR}/sglang_server.py": DOUBLE.read_bytes(),
            f"{APP_DIR}/sglang/__init__.py": b'"""Stand-in package (tests/deploy; never ships)."""\n',
            f"{APP_DIR}/sglang/launch_server.py": LAUNCH_SERVER_SHIM.encode(),
            **_python_packages(),
        }
        images = {}
        with tempfile.TemporaryDirectory(prefix="standin-server-") as ctx:
            ctx_path = Path(ctx)
            for path, data in files.items():
                dest = ctx_path / "files" / path.lstrip("/")
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(data)
            (ctx_path / "Dockerfile").write_text(
                f"FROM {base}\nCOPY files/ /\nENV PYTHONPATH={APP_DIR} PYTHONUNBUFFERED=1\n"
                "LABEL org.replayssm.test-double=sglang_server\n"
            )
            v1 = f"{REPOSITORY}:v1"
            builder.docker("build", "--network", "none", "-q", "-t", v1, ctx, timeout=600)
        v2 = f"{REPOSITORY}:v2"
        standin.derive(builder, v1, v2, {f"{APP_DIR}/VERSION": b"2\n"})
        for ref in (v1, v2):
            stem = ref.replace(":", "_")
            tarball = out_dir / f"{stem}.tar.gz"
            with tarball.open("wb") as out:  # `make save` writes gzip too
                save = subprocess.Popen([DOCKER_CLIENT, "save", ref], stdout=subprocess.PIPE, env=builder.env())
                subprocess.run(["gzip", "-1"], stdin=save.stdout, stdout=out, check=True)
                if save.wait(timeout=600) != 0:
                    raise RuntimeError(f"docker save {ref} failed")
            image_id = standin.image_id(builder, ref)
            Path(f"{tarball}.sha256").write_text(
                f"{hashlib.sha256(tarball.read_bytes()).hexdigest()}  {tarball.name}\n"
            )
            (out_dir / f"{stem}.image-id").write_text(image_id + "\n")
            images[ref.split(":")[1]] = SavedImage(ref=ref, tarball=tarball, image_id=image_id)
        return images
    finally:
        builder.stop()
