"""`make image-diff`: what the overlay image changes compared with its base.

Why it exists: an operator (and the tests) must see, without trusting the build log, exactly what sits on
top of the released image: the effective source diff of the three patched SGLang files (generated inside
the image by `replayssm-overlay diff`; never stored in this repository), the image manifest, and the
layers the overlay added with their sizes. The base is taken from the image's own labels.

    python3 docker/tools/image_diff.py --image NAME:TAG [--python python3] [--json]
"""

from __future__ import annotations

import argparse
import json

from preflight import check_daemon

from common import Refusal, docker, image_id, run_tool

MANIFEST = "/opt/replayssm-overlay/manifest.json"


def _history(ref: str) -> list[dict]:
    lines = docker("history", "--no-trunc", "--human=false", "--format", "{{json .}}", ref).stdout.splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _in_image(image: str, entrypoint: str, *args: str) -> str:
    return docker("run", "--rm", "--network", "none", "--entrypoint", entrypoint, image, *args).stdout


def base_of(image: str) -> str:
    """The base reference recorded in the image's labels (a stand-in by its image ID)."""
    labels = json.loads(docker("image", "inspect", "--format", "{{json .Config.Labels}}", image).stdout) or {}
    name, digest = labels.get("org.opencontainers.image.base.name"), labels.get("org.opencontainers.image.base.digest")
    if not name or not digest:
        raise Refusal(f"{image} has no org.opencontainers.image.base.* labels", "is it an image built by `make build`?")
    return digest if labels.get("org.replayssm.base.standin") == "true" else f"{name}@{digest}"


def image_diff(image: str, python: str = "python3") -> dict:
    check_daemon()
    if image_id(image) is None:
        raise Refusal(f"no image {image} in this Docker daemon", "build it (`make build`) or pass IMAGE=NAME:TAG")
    base = base_of(image)
    if image_id(base) is None:
        raise Refusal(f"the base {base} is not in this Docker daemon", "pull or load the base to compare against it")
    ours, theirs = _history(image), _history(base)
    if [h["ID"] for h in ours[len(ours) - len(theirs) :]] != [h["ID"] for h in theirs]:
        raise Refusal(
            f"{image} is not built on {base} (its layer history does not end with the base's)",
            "compare an image with the base it was built from",
        )
    # filesystem layers only: metadata steps (ARG, LABEL, ...) add a 0-byte `#(nop)` history entry
    added = [
        {"size": int(h["Size"]), "created_by": h["CreatedBy"]}
        for h in reversed(ours[: len(ours) - len(theirs)])
        if int(h["Size"]) > 0 or "#(nop)" not in h["CreatedBy"]
    ]
    return {
        "image": image,
        "base": base,
        "added_layers": added,
        "added_bytes": sum(layer["size"] for layer in added),
        "manifest": json.loads(_in_image(image, "cat", MANIFEST)),
        "diff": _in_image(image, python, "-m", "replayssm_overlay", "diff"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--image", required=True)
    parser.add_argument("--python", default="python3", help="the image's python")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = image_diff(args.image, args.python)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
        return 0
    print(f"== {report['image']} on {report['base']}\n\n== effective diff (generated in the image)\n{report['diff']}")
    print(f"== manifest ({MANIFEST})\n{json.dumps(report['manifest'], indent=2, sort_keys=True)}\n")
    print(f"== layers added to the base: {len(report['added_layers'])}, {report['added_bytes'] / 1e6:.2f} MB")
    for layer in report["added_layers"]:
        print(f"  {layer['size'] / 1e6:10.3f} MB  {layer['created_by'][:110]}")
    return 0


if __name__ == "__main__":
    run_tool(main)
