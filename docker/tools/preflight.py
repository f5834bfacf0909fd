"""Preflight for every image target: refuse bad input before any long step starts.

Why it exists: a build that pulls 20 GB and then fails on a stale digest wastes an hour. This checks, in
order and in seconds: a Docker daemon answers; the CUDA lane is in docker/base.lock and its digest is
pinned (not the placeholder); the base is the locked one (or an explicitly marked local stand-in); the
base is on this machine with the locked digest, or else the registry answers for it. Only then does it
pull (the first long step). `resolve_base()` returns what the build passes as arguments.

    python3 docker/tools/preflight.py [--lane L] [--base-image REF] [--base-digest D] [--standin] [--no-pull]
"""

from __future__ import annotations

import argparse
import os

from common import (DIGEST, Refusal, check_registry_reachable, docker, image_id, lane_pin, log, read_lock,
                    registry_host, run_tool)


def check_daemon() -> str:
    """The daemon's version; refuses when no daemon answers."""
    proc = docker("version", "--format", "{{.Server.Version}}", check=False, timeout=30)
    if proc.returncode != 0 or not proc.stdout.strip():
        where = os.environ.get("DOCKER_HOST") or "the default socket /var/run/docker.sock"
        detail = (proc.stderr or "").strip().splitlines()[-1:] or [""]
        raise Refusal(f"no Docker daemon answers at {where} ({detail[0]})",
                      "start one (`systemctl start docker`, or dockerd as in docker/README.md) or point "
                      "DOCKER_HOST at a running daemon")
    return proc.stdout.strip()


def _standin(base_image: str, base_digest: str | None) -> dict:
    found = image_id(base_image)
    if found is None:
        raise Refusal(f"the stand-in base {base_image} is not in this Docker daemon",
                      "build or load it first (tests/docker/standin.py builds one)")
    if base_digest and base_digest != found:
        raise Refusal(f"mismatched digest: the stand-in {base_image} is {found}, BASE_DIGEST says {base_digest}",
                      "drop BASE_DIGEST or pass the image's ID")
    return {"from": base_image, "name": base_image, "digest": found, "standin": True}


def check_release_pin(pin: dict, base_image: str) -> str:
    """Static checks (no daemon needed): the base is the locked one and its digest is pinned."""
    name, digest = pin["name"], pin["digest"]
    ref = f"{name}@{digest}"
    if base_image and base_image not in (ref, name):
        raise Refusal(f"unknown base {base_image!r}: docker/base.lock pins {ref} for lane {pin['lane']}",
                      "build on the locked base (leave BASE_IMAGE unset), pin another digest with "
                      "`make -f docker/docker.mk pin-base`, or, for tests only, pass BASE_STANDIN=true "
                      "(the image is then labelled as built on a stand-in)")
    if not DIGEST.match(digest):
        raise Refusal(f"docker/base.lock has no pinned digest for lane {pin['lane']} "
                      f"(BASE_DIGEST_{pin['lane']}={digest})",
                      "run `make -f docker/docker.mk pin-base` where the registry is reachable, or "
                      "`make -f docker/docker.mk pin-base DIGEST=sha256:...` with the digest your registry shows")
    return ref


def _release(pin: dict, ref: str, pull: bool) -> dict:
    """The pinned base on this machine (by registry digest, or by the locked image ID after a
    `docker load`, which drops registry digests), or pulled after the registry answered for it."""
    name, digest = pin["name"], pin["digest"]
    if image_id(ref) is not None:
        return {"from": ref, "name": name, "digest": digest, "standin": False}
    local_id = image_id(name)
    if local_id is not None and local_id == pin.get("image_id"):
        log(f"{name} matches the locked image ID {local_id} (loaded from a tarball: no registry digest)")
        return {"from": name, "name": name, "digest": digest, "standin": False}
    if local_id is not None:
        local = docker("image", "inspect", "--format", "{{join .RepoDigests \" \"}}", name).stdout.split()
        raise Refusal(f"mismatched digest: the local {name} is {', '.join(local) or 'unpinned (no registry digest)'}"
                      f" with image ID {local_id}; docker/base.lock pins {digest}"
                      f" (image ID {pin.get('image_id') or 'not recorded'})",
                      f"get the pinned image (`docker pull {ref}`, or `docker load` its tarball: then the lock "
                      f"needs BASE_IMAGE_ID_{pin['lane']}, which `pin-base` records), or, if the lock is stale, "
                      "re-pin with `make -f docker/docker.mk pin-base` and review the change")
    check_registry_reachable(registry_host(name))
    probe = docker("manifest", "inspect", ref, check=False, timeout=60)
    if probe.returncode != 0:
        raise Refusal(f"the base {ref} is not on this machine and the registry does not answer for it "
                      f"({(probe.stderr or '').strip()})",
                      "load the base on this machine (`docker load -i <tarball>`, docker/README.md "
                      "'Air-gapped sites'), or fix the network or `docker login` to reach the registry")
    if not pull:
        raise Refusal(f"the base {ref} is not on this machine", f"`docker pull {ref}`")
    log(f"pulling {ref} (the first long step)")
    docker("pull", ref, capture=False)
    return {"from": ref, "name": name, "digest": digest, "standin": False}


def resolve_base(lane: str | None, base_image: str = "", base_digest: str = "", standin: bool = False,
                 pull: bool = True) -> dict:
    """Run every check; returns {from, name, digest, standin, lane, release, daemon}."""
    lock = read_lock()
    lane = lane or lock["CUDA_LANE"]
    pin = lane_pin(lock, lane)
    if standin and not base_image:
        raise Refusal("BASE_STANDIN=true needs BASE_IMAGE=<a local image>",
                      "pass the stand-in's tag or image ID, e.g. BASE_IMAGE=rso-standin-sglang:0.5.19")
    ref = None if standin else check_release_pin(pin, base_image)
    daemon = check_daemon()
    base = _standin(base_image, base_digest) if standin else _release(pin, ref, pull)
    base.update(lane=lane, release=lock["SGLANG_RELEASE"], daemon=daemon)
    return base


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lane")
    parser.add_argument("--base-image", default="")
    parser.add_argument("--base-digest", default="")
    parser.add_argument("--standin", action="store_true")
    parser.add_argument("--no-pull", action="store_true")
    args = parser.parse_args()
    base = resolve_base(args.lane, args.base_image, args.base_digest, args.standin, not args.no_pull)
    kind = "stand-in" if base["standin"] else "release"
    print(f"preflight ok: daemon {base['daemon']}, {kind} base {base['name']} {base['digest']} (lane {base['lane']})")
    return 0


if __name__ == "__main__":
    run_tool(main)
