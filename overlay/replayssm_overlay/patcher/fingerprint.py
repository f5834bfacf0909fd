"""Whether an SGLang tree is, file for file, the release the hooks were written against.

The three patched files identify the release (`releases.RELEASES`); the commit and the configurator
rule also rely on files the patcher never touches (`releases.FINGERPRINTS`). `mismatches` lists each of
those that is missing or differs from the release's pristine bytes. For a tree that matches no release,
`closest_release` says which known release it looks like (the one with the most files equal, ties to the
declared version, then the newest) and which of that release's files differ, so a release between the
supported ones, a nightly, or a patched-by-hand tree is refused with a message that says what differs.
"""

import pathlib
from dataclasses import dataclass

from replayssm_overlay.cliutil import sha256_bytes
from replayssm_overlay.patcher.releases import FINGERPRINTS, RELEASE_FILES


@dataclass(frozen=True)
class Mismatch:
    relpath: str
    expected: str  # the release's pristine sha256
    found: str | None  # None: the file is missing

    def describe(self, release: str) -> str:
        if self.found is None:
            return f"{self.relpath}: missing (SGLang {release} ships it with sha256 {self.expected})"
        return f"{self.relpath}: sha256 {self.found}, SGLang {release} ships {self.expected}"

    def as_json(self) -> dict:
        return {"relpath": self.relpath, "expected": self.expected, "found": self.found}


def _sha(sglang_dir: pathlib.Path, relpath: str):
    path = sglang_dir / relpath
    return sha256_bytes(path.read_bytes()) if path.is_file() else None


def mismatches(sglang_dir: pathlib.Path, release: str) -> list:
    """The fingerprint files of `release` that are missing or differ in the tree (empty: all as shipped)."""
    found = ((relpath, expected, _sha(sglang_dir, relpath)) for relpath, expected in FINGERPRINTS[release].items())
    return [Mismatch(relpath, expected, sha) for relpath, expected, sha in found if sha != expected]


@dataclass(frozen=True)
class Likeness:
    release: str
    matching: int
    total: int
    differing: tuple  # Mismatch, for each of that release's files that is not as shipped

    def describe(self) -> str:
        return (
            f"it looks most like SGLang {self.release} ({self.matching} of {self.total} files the overlay "
            f"patches or relies on are that release's); differs: "
            + "; ".join(m.describe(self.release) for m in self.differing)
        )


def closest_release(sglang_dir: pathlib.Path, observed: dict, declared=None) -> Likeness:
    """The known release most like the tree. `observed`: relpath -> sha256 of the files already read
    (the target files as they would be pristine); the other files are hashed here."""

    def likeness(release: str) -> Likeness:
        differing = []
        for relpath, expected in RELEASE_FILES[release].items():
            sha = observed[relpath] if relpath in observed else _sha(sglang_dir, relpath)
            if sha != expected:
                differing.append(Mismatch(relpath, expected, sha))
        files = RELEASE_FILES[release]
        return Likeness(release, len(files) - len(differing), len(files), tuple(differing))

    candidates = [likeness(release) for release in RELEASE_FILES]
    order = list(RELEASE_FILES)
    return max(candidates, key=lambda c: (c.matching, c.release == declared, order.index(c.release)))
