"""Image manifest, written INSIDE the image by the base's own Python as the last build step.

Why it exists: one file at a fixed path (`/opt/replayssm-overlay/manifest.json`, also named by the label
`org.replayssm.overlay.manifest`) says what this image is: the base it was built on (reference, digest,
stand-in or not), what the base check found, the overlay's own status and patch manifest (release,
sha256 before/after of each file, overlay version), and what the kernel stage did. It also cross-checks
the patched files' sha256 against the values the build put in the image labels (taken from the base
check's dry run), so the labels can never describe files the image does not have.

    write_manifest.py --base-check F --kernels F --patched-files "relpath=sha256,..." --out F
        [--field key=value ...]   (image facts from the build arguments, copied into "image")
"""

import argparse
import json
import os
import subprocess
import sys


def fail(what, fix):
    print(f"manifest: {what}\n  fix: {fix}", file=sys.stderr)
    return 1


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-check", required=True)
    parser.add_argument("--kernels", required=True)
    parser.add_argument("--patched-files", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--field", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)

    with open(args.base_check) as handle:
        base_check = json.load(handle)
    with open(args.kernels) as handle:
        kernels = json.load(handle)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "replayssm_overlay",
            "status",
            "--json",
            "--sglang-dir",
            base_check["sglang"]["package_dir"],
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    if proc.returncode != 0:
        return fail("`replayssm-overlay status --json` failed after apply", "see the build log above")
    status = json.loads(proc.stdout)
    if status["state"] != "patched" or status["unverified"]:
        return fail(
            f"the overlay's status is {status['state']!r} (unverified={status['unverified']}) after apply",
            "see the build log above; the image must carry a verified patch",
        )
    labelled = dict(item.split("=", 1) for item in args.patched_files.split(",") if item)
    actual = {f["relpath"]: f["sha256"] for f in status["files"]}
    if labelled != actual:
        return fail(
            f"patched files {actual} differ from the labels' values {labelled}",
            "build with `make -f docker/docker.mk build`, which takes the labels from the base check's dry run",
        )

    image = dict(field.split("=", 1) for field in args.field)
    if image.get("overlay_version", status["overlay_version"]) != status["overlay_version"]:
        return fail(
            f"the installed overlay is {status['overlay_version']}, the build says {image['overlay_version']}",
            "build with `make -f docker/docker.mk build`, which builds the wheel it labels",
        )
    manifest = {
        "schema": 1,
        "image": image,
        "base_check": base_check,
        "overlay": status,
        "kernels": kernels,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as handle:
        json.dump(manifest, handle, indent=2, sort_keys=True)
        handle.write("\n")
    print(
        f"manifest: {args.out} (SGLang {status['release']}, overlay {status['overlay_version']}, "
        f"kernels {kernels['status']})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
