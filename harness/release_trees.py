"""Where the test environment keeps each SGLang release the overlay supports (harness only).

The venv imports SGLang 0.5.19 (its installed package). The other releases, 0.5.20 to 0.5.23, are
installed by `scripts/setup-venv.sh` with `pip install --no-deps --target <venv>/sglang-releases/<X>`:
their srt modules import with the venv's own dependencies (checked for each release), so a process
that puts `<venv>/sglang-releases/<X>` first on PYTHONPATH runs that release's real code.
`RSO_SGLANG_RELEASES` points at another folder of the same layout (`<folder>/<X>/sglang`).
"""

import os
import pathlib
import sys

from replayssm_overlay.patcher.releases import SUPPORTED_RELEASES

INSTALLED_RELEASE = "0.5.19"  # the venv's own SGLang
OTHER_RELEASES = tuple(release for release in SUPPORTED_RELEASES if release != INSTALLED_RELEASE)
RELEASES_VARIABLE = "RSO_SGLANG_RELEASES"


class ReleaseTreeError(RuntimeError):
    """The requested release is not installed where the harness looks for it."""


def releases_folder() -> pathlib.Path:
    explicit = os.environ.get(RELEASES_VARIABLE)
    if explicit:
        return pathlib.Path(explicit)
    return pathlib.Path(sys.prefix) / "sglang-releases"


def release_tree(release: str) -> pathlib.Path:
    """The `sglang` package directory of `release` (0.5.19: the installed one)."""
    if release == INSTALLED_RELEASE:
        from harness.sandbox import installed_sglang

        return installed_sglang()
    if release not in OTHER_RELEASES:
        raise ReleaseTreeError(
            f"SGLang {release} is not a release this harness knows; known: "
            + ", ".join((INSTALLED_RELEASE,) + OTHER_RELEASES)
        )
    tree = releases_folder() / release / "sglang"
    if not (tree / "srt").is_dir():
        raise ReleaseTreeError(
            f"SGLang {release} is not installed at {tree}; run `make setup` (scripts/setup-venv.sh installs "
            f"every release there), or set {RELEASES_VARIABLE} to a folder holding <release>/sglang"
        )
    return tree
