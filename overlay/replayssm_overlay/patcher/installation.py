"""One look at an installed SGLang, as every patcher command starts: the three target files' states, the
manifest the last `apply` wrote, the release the files make up, and the fingerprint files that differ.

Why apart from the API (`patcher/__init__.py`): `apply`, `verify`, `revert`, `diff` and `status` all read
a tree the same way before they decide, and the messages (`messages.py`) describe such a look; the API
only decides and writes.
"""

import datetime
import pathlib

import replayssm_overlay
from replayssm_overlay.cliutil import sha256_bytes
from replayssm_overlay.patcher import fingerprint, store
from replayssm_overlay.patcher.filestate import classify
from replayssm_overlay.patcher.releases import TARGET_FILES, version_key
from replayssm_overlay.patcher.target import declared_version


class Tree:
    """One look at an installation: the three files' states, the manifest, the release they make up."""

    def __init__(self, sglang_dir: pathlib.Path, *, record_must_be_usable=True):
        self.sglang_dir = sglang_dir
        if record_must_be_usable:
            store.check_state_dir(self.sglang_dir)
        self.manifest, self.manifest_problem = store.read_manifest(self.sglang_dir)
        self.files = [classify(self.sglang_dir, rel, self.manifest) for rel in TARGET_FILES]
        self.declared = declared_version(self.sglang_dir)
        known = [f.releases for f in self.files if f.releases]
        common = frozenset.intersection(*known) if known else frozenset()
        self.release = self.declared if self.declared in common else max(common, key=version_key) if common else None
        # the files the hooks rely on besides the three patched ones, where they differ from the release's
        self.fingerprint = fingerprint.mismatches(self.sglang_dir, self.release) if self.release else []

    def unverified_files(self) -> list:
        return [f.relpath for f in self.files if f.unverified]

    def release_label(self) -> str:
        """What the messages call the installation: the release, the release it declares where that is
        another, every target file that is unverified and every fingerprint file that is not the release's."""
        label = self.release or "(release unidentified)"
        if self.release and self.declared and self.declared != self.release:
            label += f" by its files' bytes (the installation declares {self.declared})"
        unverified = self.unverified_files()
        if unverified:
            label += (
                f", UNVERIFIED: {', '.join(unverified)} (matches no known release; accepted with --allow-unverified)"
            )
        if self.fingerprint:
            label += (
                f", UNVERIFIED: {', '.join(m.relpath for m in self.fingerprint)} (not as SGLang {self.release} "
                "ships it; the hooks rely on it; apply and verify need --allow-unverified)"
            )
        return label

    def new_manifest(self, patched: dict, kernels) -> dict:
        files = {f.relpath: manifest_entry(f, patched.get(f.relpath, f.data)) for f in self.files}
        mtimes = {
            **(self.manifest or {}).get("source_mtime_ns", {}),
            **{f.relpath: f.path.stat().st_mtime_ns for f in self.files if f.relpath in patched},
        }
        return {
            "schema": store.MANIFEST_SCHEMA,
            "tool": "replayssm-overlay",
            "overlay_version": replayssm_overlay.__version__,
            "release": self.release,
            "declared_sglang_version": self.declared,
            "sglang_dir": str(self.sglang_dir),
            "unverified": any(entry["unverified"] for entry in files.values()) or bool(self.fingerprint),
            "fingerprint_mismatches": [m.as_json() for m in self.fingerprint],
            "applied_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "files": files,
            "source_mtime_ns": mtimes,  # each file's modification time before its patch, which revert restores
            "kernels": kernels,
        }

    def manifest_matches(self, manifest: dict) -> bool:
        return self.manifest is not None and all(
            self.manifest.get(key) == manifest[key] for key in ("release", "files", "unverified", "sglang_dir")
        )

    def pristine_copies_match(self) -> bool:
        return all(
            (copy := store.read_pristine_copy(self.sglang_dir, f.relpath)) is not None
            and sha256_bytes(copy) == f.base_sha256
            for f in self.files
        )


def manifest_entry(f, after: bytes) -> dict:
    """What the manifest records of one target file whose bytes are `after`."""
    return {
        "sha256_before": f.base_sha256,
        "sha256_after": sha256_bytes(after),
        "release": ",".join(sorted(f.releases)) or None,
        "unverified": f.unverified,
    }
