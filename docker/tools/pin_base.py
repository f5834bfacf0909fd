"""`make pin-base`: record the registry digest of one release's base tag in docker/base.lock.

Why it exists: the image must be built from an exact, reviewed base, and a tag can move. Run it where the
registry is reachable; it resolves BASE_REPOSITORY:BASE_TAG_<release>_<lane> to its manifest-list digest (what
`FROM repo:tag@digest` and `docker pull` use) with `docker buildx imagetools inspect` or `crane
digest`, whichever works (neither pulls the image), falling back to `docker pull` + the pulled
image's RepoDigests, rewrites only that pin's BASE_DIGEST line and prints the old and the new digest. With
`--digest` it records a digest obtained elsewhere (a registry UI, a mirror's manifest), after checking
its form. It also records the base's image ID (BASE_IMAGE_ID_<release>_<lane>) when the base is on this machine,
so that a base brought as a tarball (`docker load` drops registry digests) is recognised. Review and
commit the change; every build refuses the placeholder.

    python3 docker/tools/pin_base.py [--release R] [--lane L] [--digest sha256:...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess

from common import (
    DIGEST,
    Refusal,
    base_pin,
    check_registry_reachable,
    docker,
    image_id,
    log,
    read_lock,
    registry_host,
    run_tool,
    write_lock_value,
)


def _digest_by_tool(name: str) -> str | None:
    """The tag's registry digest from the first available inspector (none of them pulls the image)."""
    inspectors = [
        (
            [
                os.environ.get("DOCKER", "docker"),
                "buildx",
                "imagetools",
                "inspect",
                "--format",
                "{{json .Manifest}}",
                name,
            ],
            lambda out: json.loads(out)["digest"],
        ),
        (["crane", "digest", name], lambda out: out.strip()),
    ]
    for cmd, parse in inspectors:
        if shutil.which(cmd[0]) is None:
            continue
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if proc.returncode == 0:
            log(f"resolved with {' '.join(cmd[:3])}")
            return parse(proc.stdout)
        log(f"`{' '.join(cmd[:3])}` failed: {proc.stderr.strip()[:200]}")
    return None


def resolve_digest(name: str) -> str:
    """The registry digest of tag `name`; pulls (and reads RepoDigests) only when no inspector works."""
    check_registry_reachable(registry_host(name))
    digest = _digest_by_tool(name)
    if digest:
        return digest
    log(f"no inspector (docker buildx, crane) answered; pulling {name} to read its digest")
    pulled = docker("pull", name, check=False, capture=False)
    if pulled.returncode != 0:
        raise Refusal(
            f"cannot get {name} from the registry",
            "check the tag and `docker login`, or pass DIGEST=sha256:... from your registry",
        )
    repo = name.rsplit(":", 1)[0]
    digests = docker("image", "inspect", "--format", "{{json .RepoDigests}}", name).stdout
    for ref in json.loads(digests) or []:
        if ref.split("@")[0] in (repo, f"docker.io/{repo}"):
            return ref.split("@", 1)[1]
    raise Refusal(f"the pulled {name} has no registry digest for {repo}", "pass DIGEST=sha256:... explicitly")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--release", help="SGLang release (default: SGLANG_RELEASE of the lock)")
    parser.add_argument("--lane", help="CUDA lane (default: CUDA_LANE of the lock)")
    parser.add_argument("--digest", default="", help="record this digest instead of asking the registry")
    args = parser.parse_args()
    lock = read_lock()
    pin = base_pin(lock, args.release or lock["SGLANG_RELEASE"], args.lane or lock["CUDA_LANE"])
    digest = args.digest or resolve_digest(pin["name"])
    if not DIGEST.match(digest):
        raise Refusal(f"{digest!r} is not a sha256 digest", "a digest looks like sha256:<64 hex digits>")
    key = pin["key"]
    write_lock_value(f"BASE_DIGEST_{key}", digest)
    change = "unchanged" if digest == pin["digest"] else "changed: review and commit docker/base.lock"
    print(f"pinned {pin['name']} in docker/base.lock ({change})\n  old {pin['digest']}\n  new {digest}")
    local_id = image_id(f"{pin['name']}@{digest}") if not args.digest else None
    if local_id:
        write_lock_value(f"BASE_IMAGE_ID_{key}", local_id)
        print(f"recorded BASE_IMAGE_ID_{key}={local_id} (recognises the base after `docker load`)")
    else:
        write_lock_value(f"BASE_IMAGE_ID_{key}", "")
        print(
            f"BASE_IMAGE_ID_{key} cleared: pull the base and run pin-base again to record it (needed only "
            "to build from a base loaded from a tarball)"
        )
    return 0


if __name__ == "__main__":
    run_tool(main)
