"""Where the test environment keeps each SGLang release the overlay supports (harness only).

The venv imports SGLang `INSTALLED_RELEASE` (its installed package, the one `scripts/setup-venv.sh`
installs: the only one here that names it). The other releases of the patcher's table
(`patcher/releases.py`) are installed by that script with `pip install --no-deps --target
<venv>/sglang-releases/<X>`: their srt modules import with the venv's own dependencies (checked for each
release), so a process that puts `<venv>/sglang-releases/<X>` first on PYTHONPATH runs that release's real
code. `RSO_SGLANG_RELEASES` points at another folder of the same layout (`<folder>/<X>/sglang`).
"""

import os
import pathlib
import sys

from harness.errors import HarnessError
from replayssm_overlay.errors import OverlayError
from replayssm_overlay.patcher.releases import SUPPORTED_RELEASES

INSTALLED_RELEASE = "0.5.19"  # the venv's own SGLang (the raw-window fold release)
OTHER_RELEASES = tuple(release for release in SUPPORTED_RELEASES if release != INSTALLED_RELEASE)
RELEASES_VARIABLE = "RSO_SGLANG_RELEASES"


def installed_sglang() -> pathlib.Path:
    """The installed `sglang` package directory (found without importing it); must be INSTALLED_RELEASE."""
    from replayssm_overlay.patcher.target import declared_version, find_sglang_dir

    try:
        sglang_dir = find_sglang_dir()
    except OverlayError as error:
        raise HarnessError(f"{error.what}; run `make setup` first") from error
    version = declared_version(sglang_dir)
    if version != INSTALLED_RELEASE:
        raise HarnessError(
            f"installed sglang is {version}; the overlay and this harness support {INSTALLED_RELEASE} "
            f"(`pip install --no-deps sglang=={INSTALLED_RELEASE}`, or `make setup`)"
        )
    return sglang_dir


def releases_folder() -> pathlib.Path:
    explicit = os.environ.get(RELEASES_VARIABLE)
    if explicit:
        return pathlib.Path(explicit)
    return pathlib.Path(sys.prefix) / "sglang-releases"


def release_tree(release: str) -> pathlib.Path:
    """The `sglang` package directory of `release` (0.5.19: the installed one)."""
    if release == INSTALLED_RELEASE:
        return installed_sglang()
    if release not in OTHER_RELEASES:
        raise HarnessError(
            f"SGLang {release} is not a release this harness knows; known: "
            + ", ".join((INSTALLED_RELEASE,) + OTHER_RELEASES)
        )
    tree = releases_folder() / release / "sglang"
    if not (tree / "srt").is_dir():
        raise HarnessError(
            f"SGLang {release} is not installed at {tree}; run `make setup` (scripts/setup-venv.sh installs "
            f"every release there), or set {RELEASES_VARIABLE} to a folder holding <release>/sglang"
        )
    return tree
