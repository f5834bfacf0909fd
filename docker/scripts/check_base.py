"""Base check, run INSIDE the base image by its own Python during `docker build` (stage `base-check`).

Why it exists: the overlay patches SGLang's files in place, so before anything is installed the build
must prove that the base is the one the lock names and that its SGLang is the release the overlay
supports, and stop with a message that names the failed check and the fix otherwise. Standard library
only (it runs in whatever Python the base ships), and it never imports sglang: the package location is
found with `importlib.util.find_spec`, the version from the installed distribution's metadata and from
`sglang/_version.py` read with `ast`.

    check_base.py identity --release 0.5.19 --base-image REF --base-digest sha256:... --standin true|false --report F
        checks [python] (the overlay wheel's Requires-Python), [pin], [location], [version]; writes the report F
    check_base.py pristine --report F
        runs `python -m replayssm_overlay apply --dry-run --json` (the overlay wheel must be installed):
        check [pristine], the sha256 of the three files and every hook point, and check [release], the
        release those hashes identify is the one the build is for (a base whose files are another
        release's than its metadata says is refused, never labelled); adds the result to F

Exit status 1 and a line `base-check failed [CHECK]: ...` plus `fix: ...` on stderr when a check fails.
"""

import argparse
import ast
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
import zipfile

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# the build context: scripts/ (this file) next to wheels/ (the overlay wheel)
WHEELS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "wheels")
# the overlay's refusal messages are written for a shell on an installed SGLang; in an image build the
# fix is the base, so their own advice (reinstall, --sglang-dir, --allow-unverified) is cut off
SHELL_ADVICE = re.compile(
    r"(?:\. |; )(?:Reinstall|reinstall|pass --sglang-dir|Run `replayssm-overlay revert`).*$"
    r"|(?:\. |; |, |\)|^)[^.;\n]*--allow-unverified.*$",
    re.M,
)


class CheckFailed(Exception):
    """One base check failed: which, what, and the fix. Not an `OverlayError`: this script runs on the
    base image's Python before the overlay is installed, with the standard library only; its stable `code`
    is unique with the overlay's all the same (`tests/structure/test_error_codes.py`)."""

    code = "base-check-failed"

    def __init__(self, check, what, fix):
        super().__init__(f"base-check failed [{check}]: {what}\n  fix: {fix}")


def check_python(wheels_dir=WHEELS_DIR):
    """[python] the base's Python is one the overlay wheel declares (its Requires-Python, `>=X.Y`)."""
    wheels = sorted(n for n in os.listdir(wheels_dir) if n.endswith(".whl")) if os.path.isdir(wheels_dir) else []
    if len(wheels) != 1:
        raise CheckFailed(
            "python",
            f"expected one overlay wheel in {wheels_dir}, found {wheels}",
            "build with `make -f docker/docker.mk build`, which stages it",
        )
    with zipfile.ZipFile(os.path.join(wheels_dir, wheels[0])) as wheel:
        metadata = next(wheel.read(n).decode() for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    match = re.search(r"^Requires-Python:\s*>=\s*(\d+)\.(\d+)\s*$", metadata, re.M)
    if match is None:
        raise CheckFailed(
            "python", f"{wheels[0]} declares no `Requires-Python: >=X.Y`", "restore requires-python in pyproject.toml"
        )
    needed = (int(match.group(1)), int(match.group(2)))
    if sys.version_info[:2] < needed:
        raise CheckFailed(
            "python",
            f"the base's Python {platform.python_version()} ({sys.executable}) is older than the "
            f"{needed[0]}.{needed[1]} the overlay needs",
            "use an official SGLang release image as the base (they ship a recent python3); if the base has "
            "another Python for SGLang, set RSO_PYTHON to it (make build BASE_PYTHON=...)",
        )
    return {
        "executable": sys.executable,
        "version": platform.python_version(),
        "requires": f">={needed[0]}.{needed[1]}",
    }


def check_pin(base_image, base_digest, standin):
    """[pin] the base reference carries a real digest (or is an explicitly marked local stand-in)."""
    if not DIGEST.match(base_digest or ""):
        raise CheckFailed(
            "pin",
            f"BASE_DIGEST={base_digest!r} is not a sha256 digest (docker/base.lock still holds the "
            "placeholder, or the build was started without docker/docker.mk)",
            "pin the real digest with `make -f docker/docker.mk pin-base` where the registry is reachable, "
            "and build with `make -f docker/docker.mk build`",
        )
    if standin:
        return {"kind": "stand-in", "image": base_image, "image_id": base_digest}
    # FROM is `repo:tag@digest`, or the tag of a loaded tarball whose image ID docker.mk checked
    if "@" in base_image and not base_image.endswith("@" + base_digest):
        raise CheckFailed(
            "pin",
            f"BASE_IMAGE={base_image!r} is not pinned to BASE_DIGEST={base_digest}",
            "build with `make -f docker/docker.mk build`, which takes both from docker/base.lock",
        )
    return {"kind": "release", "image": base_image, "digest": base_digest}


def find_sglang():
    """[location] the sglang package this Python imports, located without importing it."""
    spec = importlib.util.find_spec("sglang")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise CheckFailed(
            "location",
            f"{sys.executable} cannot import a `sglang` package",
            "the base must be an SGLang image (lmsysorg/sglang:v<release>-<lane>); if its Python is not "
            "`python3` on PATH, set RSO_PYTHON",
        )
    package_dir = os.path.realpath(locations[0])
    for relpath in ("__init__.py", "srt"):
        if not os.path.exists(os.path.join(package_dir, relpath)):
            raise CheckFailed(
                "location",
                f"{package_dir} has no {relpath}: not an SGLang package directory",
                "use an official SGLang image as the base",
            )
    return package_dir


def _version_from_source(path):
    """`__version__ = "..."` in sglang/_version.py, read with ast (never executed)."""
    try:
        with open(path, "rb") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            if "__version__" in names and isinstance(node.value.value, str):
                return node.value.value
    return None


def _distribution_version():
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def check_version(package_dir, release):
    """[version] the installed SGLang declares exactly the supported release (metadata and source)."""
    declared = {
        "distribution": _distribution_version(),
        "source": _version_from_source(os.path.join(package_dir, "_version.py")),
    }
    found = {v for v in declared.values() if v is not None}
    if not found:
        raise CheckFailed(
            "version",
            f"SGLang at {package_dir} declares no version (no dist-info, no _version.py)",
            "use an official SGLang release image as the base",
        )
    if found != {release}:
        raise CheckFailed(
            "version",
            f"the base has SGLang {' / '.join(sorted(found))} at {package_dir}; this build is "
            f"for SGLang {release} (SGLANG_RELEASE={release})",
            f"build FROM lmsysorg/sglang:v{release}-<lane> pinned by digest in docker/base.lock, or pass the "
            "SGLANG_RELEASE the base has (docker/README.md, 'When the base check fails'); a release the lock does "
            "not list needs the overlay ported first (overlay/replayssm_overlay/patcher/releases.py)",
        )
    return declared


def _optional_version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def identity(args):
    report = {
        "python": check_python(),
        "pin": check_pin(args.base_image, args.base_digest, args.standin == "true"),
    }
    package_dir = find_sglang()
    report["sglang"] = {
        "package_dir": package_dir,
        "release": args.release,
        "declared": check_version(package_dir, args.release),
    }
    report["toolchain"] = {name: _optional_version(name) for name in ("torch", "triton")}
    return report


def pristine(args):
    """[pristine] the overlay's own dry run: every target file's sha256 and hook point checks out."""
    with open(args.report) as handle:
        report = json.load(handle)
    cmd = [
        sys.executable,
        "-m",
        "replayssm_overlay",
        "apply",
        "--dry-run",
        "--json",
        "--sglang-dir",
        report["sglang"]["package_dir"],
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        try:
            refusal = json.loads(proc.stdout)["error"]
        except (ValueError, KeyError, TypeError):
            refusal = proc.stderr.strip() or proc.stdout.strip()
        raise CheckFailed(
            "pristine",
            "`replayssm-overlay apply --dry-run` refused this base's SGLang files:\n" + SHELL_ADVICE.sub("", refusal),
            "the base's SGLang files are not the pristine files of the supported release; use the "
            "unmodified release image pinned in docker/base.lock (docker/README.md, 'When the base check fails')",
        )
    dry_run = json.loads(proc.stdout)
    wanted = report["sglang"]["release"]
    if dry_run["release"] != wanted:
        raise CheckFailed(
            "release",
            f"the base's SGLang files are SGLang {dry_run['release']}'s (the overlay identifies the release "
            f"by the files' sha256), but this build is for SGLang {wanted} (SGLANG_RELEASE={wanted}), which the "
            f"base's metadata also declares ({_declared_text(report['sglang']['declared'])}); the image would be "
            f"labelled {wanted} while running {dry_run['release']}'s code",
            f"build FROM the unmodified lmsysorg/sglang:v{wanted}-<lane> pinned in docker/base.lock; if the base "
            f"really is {dry_run['release']}, build it as SGLANG_RELEASE={dry_run['release']} with that release's pin "
            "(docker/README.md, 'When the base check fails')",
        )
    report["pristine"] = {
        f["relpath"]: {"sha256_before": f["sha256_before"], "sha256_after": f["sha256_after"]} for f in dry_run["files"]
    }
    return report


def _declared_text(declared):
    return ", ".join(f"{where} {version}" for where, version in sorted(declared.items()) if version) or "nothing"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="step", required=True)
    ident = sub.add_parser("identity")
    ident.add_argument("--release", required=True)
    ident.add_argument("--base-image", required=True)
    ident.add_argument("--base-digest", required=True)
    ident.add_argument("--standin", choices=("true", "false"), default="false")
    ident.add_argument("--report", required=True)
    prist = sub.add_parser("pristine")
    prist.add_argument("--report", required=True)
    args = parser.parse_args(argv)
    try:
        report = identity(args) if args.step == "identity" else pristine(args)
    except CheckFailed as failed:
        print(failed, file=sys.stderr)
        return 1
    os.makedirs(os.path.dirname(os.path.abspath(args.report)), exist_ok=True)
    with open(args.report, "w") as handle:
        json.dump(report, handle, indent=2, sort_keys=True)
        handle.write("\n")
    print(f"base-check {args.step}: ok ({args.report})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
