"""Preflight for every image target: refuse bad input before any long step starts.

Why it exists: a build that pulls 20 GB and then fails on a stale digest wastes an hour. This checks, in
order and in seconds: the SGLang release and its CUDA lane are in docker/base.lock and their digest is
pinned (not the placeholder); the base is the locked one (or an explicitly marked local stand-in); a
Docker daemon answers; the base is on this machine with the locked digest, or else the registry answers.
Only then does it pull, by digest (the first long step): the daemon checks the bytes against the digest,
so a registry that lacks it or serves other bytes stops the build here. `resolve_base()` returns what the
build passes as arguments.

    python3 docker/tools/preflight.py [--release R] [--lane L] [--base-image REF] [--base-digest D]
        [--standin] [--no-pull]
"""

from __future__ import annotations

import argparse
import os

from common import (
    DIGEST,
    Refusal,
    base_pin,
    check_registry_reachable,
    docker,
    image_id,
    log,
    pin_base_command,
    read_lock,
    registry_host,
    run_tool,
)


def check_daemon() -> str:
    """The daemon's version; refuses when no daemon answers."""
    proc = docker("version", "--format", "{{.Server.Version}}", check=False, timeout=30)
    if proc.returncode != 0 or not proc.stdout.strip():
        where = os.environ.get("DOCKER_HOST") or "the default socket /var/run/docker.sock"
        detail = (proc.stderr or "").strip().splitlines()[-1:] or [""]
        raise Refusal(
            f"no Docker daemon answers at {where} ({detail[0]})",
            "start one (`systemctl start docker`, or dockerd as in docker/README.md) or point "
            "DOCKER_HOST at a running daemon",
        )
    return proc.stdout.strip()


def _standin(base_image: str, base_digest: str | None) -> dict:
    found = image_id(base_image)
    if found is None:
        raise Refusal(
            f"the stand-in base {base_image} is not in this Docker daemon",
            "build or load it first (tests/docker/standin.py builds one)",
        )
    if base_digest and base_digest != found:
        raise Refusal(
            f"mismatched digest: the stand-in {base_image} is {found}, BASE_DIGEST says {base_digest}",
            "drop BASE_DIGEST or pass the image's ID",
        )
    return {"from": base_image, "name": base_image, "digest": found, "standin": True}


def check_release_pin(pin: dict, base_image: str) -> str:
    """Static checks (no daemon needed): the base is the locked one and its digest is pinned."""
    name, digest = pin["name"], pin["digest"]
    ref = f"{name}@{digest}"
    if base_image and base_image not in (ref, name):
        raise Refusal(
            f"unknown base {base_image!r}: docker/base.lock pins {ref} for SGLang {pin['release']} lane {pin['lane']}",
            "build on the locked base (leave BASE_IMAGE unset), pin another digest with "
            f"`{pin_base_command(pin['release'], pin['lane'])}`, or, for tests only, pass BASE_STANDIN=true "
            "(the image is then labelled as built on a stand-in)",
        )
    if not DIGEST.match(digest):
        command = pin_base_command(pin["release"], pin["lane"])
        raise Refusal(
            f"docker/base.lock has no verified digest for SGLang {pin['release']} lane {pin['lane']} "
            f"(BASE_DIGEST_{pin['key']}={digest})",
            f"run `{command}` where the registry is reachable (or `{command} DIGEST=sha256:...` with the "
            "digest your registry shows), review the change to docker/base.lock and commit it",
        )
    return ref


def _release(pin: dict, ref: str, pull: bool) -> dict:
    """The pinned base on this machine (by registry digest, or by the locked image ID after a
    `docker load`, which drops registry digests), or else pulled by digest once the registry answers (a
    local image under the same tag with other bytes is never used)."""
    name, digest = pin["name"], pin["digest"]
    if image_id(ref) is not None:
        return {"from": ref, "name": name, "digest": digest, "standin": False}
    local_id = image_id(name)
    if local_id is not None and local_id == pin.get("image_id"):
        log(f"{name} matches the locked image ID {local_id} (loaded from a tarball: no registry digest)")
        return {"from": name, "name": name, "digest": digest, "standin": False}
    try:
        check_registry_reachable(registry_host(name))
    except Refusal:
        if local_id is None:
            raise
        local = docker("image", "inspect", "--format", '{{join .RepoDigests " "}}', name).stdout.split()
        raise Refusal(
            f"mismatched digest: the local {name} is {', '.join(local) or 'unpinned (no registry digest)'}"
            f" with image ID {local_id}; docker/base.lock pins {digest}"
            f" (image ID {pin.get('image_id') or 'not recorded'}), and the registry is not reachable",
            f"get the pinned image (`docker pull {ref}`, or `docker load` its tarball: then the lock "
            f"needs BASE_IMAGE_ID_{pin['key']}, which `pin-base` records), or, if the lock is stale, "
            f"re-pin with `{pin_base_command(pin['release'], pin['lane'])}` and review the change",
        ) from None
    if not pull:
        raise Refusal(f"the base {ref} is not on this machine", f"`docker pull {ref}`")
    log(f"pulling {ref} by digest (the first long step)")
    pull_by_digest(ref, pin)
    return {"from": ref, "name": name, "digest": digest, "standin": False}


# what the daemon says when a pull by digest fails, and what that means for the pinned base
PULL_FAILURES = (
    (
        ("manifest unknown", "not found", "does not exist"),
        "the registry has no image with the pinned digest {digest} for {repo}",
        "the lock pins a digest the registry does not hold (mistyped, or deleted there); re-pin with `{pin_base}` "
        "and review the change, or fix BASE_REPOSITORY",
    ),
    (
        ("verification failed", "digest did not match", "unexpected digest", "digest mismatch"),
        "the registry served bytes that do not match the pinned digest {digest}",
        "do not build on this registry's copy: pull from the upstream registry, or ask its operator",
    ),
    (
        ("unauthorized", "denied", "authentication required"),
        "the registry refused access to {repo}",
        "`docker login` to it, or use a mirror you can read",
    ),
)


def pull_by_digest(ref: str, pin: dict) -> None:
    """`docker pull repo:tag@digest` (progress on the terminal); a failure becomes one Refusal."""
    proc = docker("pull", ref, check=False, capture=False, capture_stderr=True)
    if proc.returncode == 0:
        return
    detail = (proc.stderr or "").strip()
    words = {
        "digest": pin["digest"],
        "repo": pin["name"].rsplit(":", 1)[0],
        "pin_base": pin_base_command(pin["release"], pin["lane"]),
    }
    for needles, what, fix in PULL_FAILURES:
        if any(needle in detail.lower() for needle in needles):
            raise Refusal(f"{what.format(**words)}; nothing was built ({detail})", fix.format(**words))
    raise Refusal(
        f"pulling {ref} failed; nothing was built ({detail})",
        "check the network, proxy or VPN and `docker login` (docker/README.md, 'Air-gapped sites')",
    )


def resolve_base(
    release: str | None,
    lane: str | None,
    base_image: str = "",
    base_digest: str = "",
    standin: bool = False,
    pull: bool = True,
) -> dict:
    """Run every check; returns {from, name, digest, standin, lane, release, daemon}."""
    lock = read_lock()
    pin = base_pin(lock, release or lock["SGLANG_RELEASE"], lane or lock["CUDA_LANE"])
    if standin and not base_image:
        raise Refusal(
            "BASE_STANDIN=true needs BASE_IMAGE=<a local image>",
            "pass the stand-in's tag or image ID, e.g. BASE_IMAGE=rso-standin-sglang:0.5.19",
        )
    ref = None if standin else check_release_pin(pin, base_image)
    daemon = check_daemon()
    base = _standin(base_image, base_digest) if standin else _release(pin, ref, pull)
    base.update(lane=pin["lane"], release=pin["release"], daemon=daemon)
    return base


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--release")
    parser.add_argument("--lane")
    parser.add_argument("--base-image", default="")
    parser.add_argument("--base-digest", default="")
    parser.add_argument("--standin", action="store_true")
    parser.add_argument("--no-pull", action="store_true")
    args = parser.parse_args()
    base = resolve_base(args.release, args.lane, args.base_image, args.base_digest, args.standin, not args.no_pull)
    kind = "stand-in" if base["standin"] else "release"
    print(f"preflight ok: daemon {base['daemon']}, {kind} base {base['name']} {base['digest']} (lane {base['lane']})")
    return 0


if __name__ == "__main__":
    run_tool(main)
