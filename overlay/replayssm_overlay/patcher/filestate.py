"""What each target file is right now: pristine, patched by this overlay, unknown, or missing.

The answer comes from the bytes alone (hashes against the release table, the marked lines), so it holds
even when the manifest is gone; the manifest is consulted only to accept a patch that was made with
`--allow-unverified` over a base no release knows. A target that is not a file (a directory in its
place, a file where one of its folders should be) is "missing" with a detail that says which; one that
cannot be read is a refusal naming the path (`OverlayError`), not a guess.
"""

import pathlib
from dataclasses import dataclass, field

from replayssm_overlay.cliutil import sha256_bytes
from replayssm_overlay.errors import from_os_error
from replayssm_overlay.patcher.edits import has_marks, patch_source, unpatch_source
from replayssm_overlay.patcher.hookpoints import HookPointError
from replayssm_overlay.patcher.releases import releases_with

PRISTINE, PATCHED, UNKNOWN, MISSING = "pristine", "patched", "unknown", "missing"
NO_FILE = "the file does not exist"
A_DIRECTORY = "a directory is where the file should be"


@dataclass
class FileState:
    relpath: str
    path: pathlib.Path
    state: str
    sha256: str = None
    #: sha256 of the file without the overlay's marked lines (== sha256 when it has none)
    base_sha256: str = None
    #: known releases whose pristine file is the base
    releases: frozenset = frozenset()
    #: patched over a base no release knows, as recorded by `apply --allow-unverified`
    unverified: bool = False
    #: the base can be restored exactly (a known pristine, or the base the manifest recorded)
    recoverable: bool = False
    detail: str = ""
    data: bytes = field(default=None, repr=False)

    @property
    def base(self) -> bytes:
        return unpatch_source(self.data)

    def as_json(self) -> dict:
        return {
            "relpath": self.relpath,
            "path": str(self.path),
            "state": self.state,
            "sha256": self.sha256,
            "pristine_sha256": self.base_sha256 if self.recoverable else None,
            "release": _one_release(self.releases),
            "unverified": self.unverified,
            "detail": self.detail,
        }


def classify(sglang_dir: pathlib.Path, relpath: str, manifest) -> FileState:
    path = sglang_dir / relpath
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return FileState(relpath, path, MISSING, detail=NO_FILE)
    except IsADirectoryError:
        return FileState(relpath, path, MISSING, detail=A_DIRECTORY)
    except NotADirectoryError:
        return FileState(relpath, path, MISSING, detail="a part of its path is a file, not a folder")
    except OSError as err:
        raise from_os_error(err, f"read {relpath},", path) from err
    current = sha256_bytes(data)
    if not has_marks(data):
        releases = frozenset(releases_with(relpath, current))
        return FileState(
            relpath,
            path,
            PRISTINE if releases else UNKNOWN,
            sha256=current,
            base_sha256=current,
            releases=releases,
            recoverable=bool(releases),
            data=data,
            detail=(f"pristine SGLang {_one_release(releases)}" if releases else "matches no known SGLang release"),
        )
    base_sha = sha256_bytes(unpatch_source(data))
    releases = frozenset(releases_with(relpath, base_sha))
    recorded = ((manifest or {}).get("files") or {}).get(relpath) or {}
    unverified = not releases and recorded.get("sha256_before") == base_sha and bool(recorded.get("unverified"))
    state = FileState(
        relpath,
        path,
        UNKNOWN,
        sha256=current,
        base_sha256=base_sha,
        releases=releases,
        unverified=unverified,
        recoverable=bool(releases) or unverified,
        data=data,
        detail=(
            "carries replayssm-overlay lines, but without them it matches no known release and no manifest recorded it"
        ),
    )
    if not state.recoverable:
        return state
    try:
        exact = patch_source(relpath, state.base) == data
    except HookPointError:
        exact = False
    if exact:
        state.state = PATCHED
        state.detail = (
            f"patched over SGLang {_one_release(releases)}"
            if releases
            else "patched over an unverified base (--allow-unverified)"
        )
    else:
        state.detail = (
            "carries replayssm-overlay lines that differ from what this overlay version "
            "writes; its pristine base is intact"
        )
    return state


def _one_release(releases):
    return ",".join(sorted(releases)) or None
