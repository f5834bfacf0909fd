"""The patcher: puts the overlay's marked hook lines into an installed SGLang, checks them, takes them out.

Public API (the command line, the Docker build and the demo call exactly these):
    apply(sglang_dir, *, allow_unverified=False, dry_run=False, kernels=None, lock_timeout_s=30) -> dict
    verify(sglang_dir, *, allow_unverified=False, lock_timeout_s=30) -> dict   (result["ok"]: passed)
    revert(sglang_dir, *, lock_timeout_s=30) -> dict      (result["complete"]: every file is pristine)
    diff(sglang_dir) -> str
    status(sglang_dir) -> dict
`sglang_dir` is the `sglang` package directory (see `replayssm_overlay.patcher.target`). `kernels` is what
the caller records in the manifest about the fold kernels (the command line passes
`replayssm_overlay.fold.describe()`): the patcher imports nothing of `fold` or `kernels`, so it runs
where torch and Triton are absent. A refusal raises
`OverlayError` before anything is written, or after restoring what was written (a failed write, SIGINT or
SIGTERM: `writes.py`), so the three files are always either all as they were or all as intended; the
order of the writes keeps even a SIGKILLed run from lifting the KDA-only refusal before both commit hooks
are in, and `status`/`verify` name the partial tree such a kill leaves (`partial`, with the commands that
repair it; messages in `messages.py`). `apply`, `revert` and `verify` hold the lock on the
target (`lock.py`) while they look and write, so only one patcher acts on a tree at a time; `apply` and
`revert` first delete the temp files a killed run left (`store.remove_leftovers`) and say so in
`leftovers_removed`. A file patched over an unverified base is named in every result
(`unverified_files`, and `release_label`, the words the messages use).
"""

import datetime
import difflib
import pathlib

import replayssm_overlay
from replayssm_overlay.cliutil import sha256_bytes
from replayssm_overlay.errors import OverlayError
from replayssm_overlay.patcher import fingerprint, lock, messages, store, writes
from replayssm_overlay.patcher.edits import patch_source
from replayssm_overlay.patcher.filestate import MISSING, NO_FILE, PATCHED, PRISTINE, classify
from replayssm_overlay.patcher.hookpoints import HookPointError
from replayssm_overlay.patcher.releases import RELEASES, TARGET_FILES, version_key
from replayssm_overlay.patcher.target import declared_version

__all__ = ["apply", "verify", "revert", "diff", "status"]

STATUS_SCHEMA = 1


def apply(
    sglang_dir, *, allow_unverified=False, dry_run=False, kernels=None, lock_timeout_s=lock.DEFAULT_TIMEOUT_S
) -> dict:
    """Patch the three files (or, with dry_run, only check that it would work); `kernels` goes into the
    manifest as given."""
    sglang_dir = _existing_dir(sglang_dir)
    command = "apply --dry-run" if dry_run else "apply"
    with lock.held(sglang_dir, exclusive=not dry_run, timeout_s=lock_timeout_s, command=command):
        return _apply(sglang_dir, allow_unverified, dry_run, kernels)


def _apply(sglang_dir, allow_unverified, dry_run, kernels) -> dict:
    tree = _Tree(sglang_dir)
    leftovers = (
        [str(p) for p in store.leftover_temp_files(tree.sglang_dir, TARGET_FILES)]
        if dry_run
        else store.remove_leftovers(tree.sglang_dir, TARGET_FILES)
    )
    refusals, patched = [], {}
    for f in tree.files:
        if f.state == PATCHED:
            continue
        if f.state == MISSING:
            refusals.append(messages.missing(f))
        elif f.state == PRISTINE or (allow_unverified and f.sha256 == f.base_sha256):
            try:
                patched[f.relpath] = patch_source(f.relpath, f.data)
            except HookPointError as err:
                refusals.append(
                    f"{f.relpath}: no hook point: {err}. This file's structure is not one the overlay "
                    "can hook; it is not the SGLang release the overlay supports"
                )
            f.unverified = f.state != PRISTINE
        elif f.sha256 != f.base_sha256:
            refusals.append(messages.changed_since_patched(f))
        else:
            refusals.append(messages.unknown(f, tree.declared, tree.release))
    if not refusals and tree.release is None and any(f.releases for f in tree.files):
        refusals.append(
            "the files come from different SGLang releases ("
            + ", ".join(f"{f.relpath}: {','.join(sorted(f.releases)) or 'unknown'}" for f in tree.files)
            + "); reinstall one release"
        )
    if tree.release is not None and tree.fingerprint and not allow_unverified:
        refusals.append(messages.fingerprint_refusal(tree.release, tree.fingerprint))
    if refusals:
        raise _apply_refusal(tree, refusals, messages.leftovers_note(leftovers, dry_run))

    manifest = tree.new_manifest(patched, kernels)
    result = {
        "action": "apply",
        "sglang_dir": str(tree.sglang_dir),
        "release": tree.release,
        "declared_version": tree.declared,
        "unverified": manifest["unverified"],
        "unverified_files": tree.unverified_files(),
        "release_label": tree.release_label(),
        "leftovers_removed": [] if dry_run else leftovers,
        "dry_run": dry_run,
        "manifest_path": str(store.manifest_path(tree.sglang_dir)),
        "files": [
            {
                "relpath": f.relpath,
                "action": (
                    ("would patch" if dry_run else "patched") if f.relpath in patched else "already patched"
                ),
                "sha256_before": manifest["files"][f.relpath]["sha256_before"],
                "sha256_after": manifest["files"][f.relpath]["sha256_after"],
            }
            for f in tree.files
        ],
    }
    record_current = tree.manifest_matches(manifest) and tree.pristine_copies_match()
    result["changed"] = not dry_run and not (record_current and not patched)
    if dry_run:
        result["message"] = (
            f"dry run: would patch {len(patched)} file(s) of SGLang {tree.release_label()}; "
            + (
                "every hook point was found; the unverified file(s) are checked by structure only"
                if tree.unverified_files()
                else "every file and hook point checks out"
            )
            if patched
            else "dry run: already patched; nothing to do"
        ) + messages.leftovers_note(leftovers, dry_run)
        return result
    if not patched and record_current:
        result["message"] = "already patched; nothing to do" + messages.leftovers_note(leftovers, dry_run)
        return result

    steps = [
        writes.Step(f"the saved pristine copy of {f.relpath}", store.pristine_copy_path(tree.sglang_dir, f.relpath),
                    f.base)
        for f in tree.files
    ]
    by_path = {f.relpath: f for f in tree.files}
    modules = [
        writes.Step(rel, by_path[rel].path, patched[rel], module=True) for rel in writes.apply_order(patched)
    ]
    # the manifest before the configurator's patch: a tree whose refusal is lifted always has its record
    steps += modules[:-1] + [
        writes.Step("the manifest", store.manifest_path(tree.sglang_dir), store.manifest_bytes(manifest))
    ] + modules[-1:]
    late_signal = writes.run(
        "apply", steps, sglang_dir=tree.sglang_dir, created_record=not store.state_dir(tree.sglang_dir).exists()
    )
    result["message"] = (
        (
            f"patched {len(patched)} file(s) of SGLang {tree.release_label()}"
            if patched
            else "already patched; the manifest and pristine copies were rewritten"
        )
        + messages.leftovers_note(leftovers, dry_run)
        + _late_signal_note(late_signal, "apply")
    )
    return result


def _apply_refusal(tree, refusals: list, leftovers_note: str) -> OverlayError:
    """One refusal for the whole tree: not SGLang at all, a release the overlay does not support (said in
    one line; the hashes are `detail`), or, for a supported release with a damaged file, each file."""
    if all(f.state == MISSING and f.detail == NO_FILE for f in tree.files):
        return messages.not_sglang(tree.sglang_dir, tree.files, tree.declared)
    if tree.release is None and not any(f.releases for f in tree.files) and tree.declared not in RELEASES:
        return messages.unsupported(tree.sglang_dir, tree, refusals)
    if tree.release is None or any(not f.releases and f.data is not None for f in tree.files):
        refusals.append(messages.likeness(tree))
    return messages.refusal(
        "patch", tree.sglang_dir, refusals, "see each file above; supported releases: " + messages.SUPPORTED,
        leftovers_note,
    )


def _late_signal_note(late_signal, verb: str) -> str:
    if late_signal is None:
        return ""
    return f" ({late_signal} arrived during the last step and was not acted on: the {verb} is complete)"


def verify(sglang_dir, *, allow_unverified=False, lock_timeout_s=lock.DEFAULT_TIMEOUT_S) -> dict:
    """Whether every file is exactly the patched bytes for the recorded release, and the record agrees."""
    sglang_dir = _existing_dir(sglang_dir)
    with lock.held(sglang_dir, exclusive=False, timeout_s=lock_timeout_s, command="verify"):
        return _verify(sglang_dir, allow_unverified)


def _verify(sglang_dir, allow_unverified) -> dict:
    tree = _Tree(sglang_dir)
    problems = [
        f"{path}: a temp file left by a killed patcher run; `replayssm-overlay apply` or `revert` removes it"
        for path in store.leftover_temp_files(tree.sglang_dir, TARGET_FILES)
    ]
    manifest = tree.manifest
    partial = messages.partial(tree)
    if partial:
        problems.insert(0, partial["detail"])
    if tree.manifest_problem:
        problems.append(tree.manifest_problem)
    elif manifest is None:
        carrying = [f.relpath for f in tree.files if f.state == PATCHED]
        problems.append(
            f"no manifest at {store.manifest_path(tree.sglang_dir)}: "
            + (
                f"the record is missing although {len(carrying)} file(s) carry the overlay's lines"
                if carrying
                else "the overlay is not applied here"
            )
        )
    for f in tree.files:
        if f.state != PATCHED:
            problems.append(f"{f.relpath}: {f.state}: {f.detail}")
            continue
        if f.unverified and not allow_unverified:
            problems.append(
                f"{f.relpath}: patched over an unverified base; pass --allow-unverified to accept it"
            )
        copy = store.read_pristine_copy(tree.sglang_dir, f.relpath)
        if copy is None or sha256_bytes(copy) != f.base_sha256:
            problems.append(
                f"{f.relpath}: the saved pristine copy is missing or differs from the pristine base"
            )
        recorded = (manifest or {}).get("files", {}).get(f.relpath)
        if manifest is not None and recorded != _manifest_entry(f, f.data):
            problems.append(
                f"{f.relpath}: the manifest records {recorded}, the file is {_manifest_entry(f, f.data)}"
            )
    if manifest is not None and manifest.get("release") != tree.release:
        problems.append(
            f"the manifest records release {manifest.get('release')}, the files are {tree.release}"
        )
    if tree.release is not None and tree.fingerprint and not allow_unverified:
        problems.append(messages.fingerprint_refusal(tree.release, tree.fingerprint))
    return {
        "action": "verify",
        "ok": not problems,
        "problems": problems,
        "partial": partial,
        "sglang_dir": str(tree.sglang_dir),
        "release": tree.release,
        "unverified_files": tree.unverified_files(),
        "release_label": tree.release_label(),
        "manifest_path": str(store.manifest_path(tree.sglang_dir)),
        "files": [f.as_json() for f in tree.files],
    }


def revert(sglang_dir, *, lock_timeout_s=lock.DEFAULT_TIMEOUT_S) -> dict:
    """Restore the exact pristine bytes of every patched file and remove the manifest folder.

    A target that is missing or not a file is left as it is and reported (`complete` false); the others
    are restored and the record folder is kept, since it may hold that file's saved pristine copy."""
    sglang_dir = _existing_dir(sglang_dir)
    with lock.held(sglang_dir, exclusive=True, timeout_s=lock_timeout_s, command="revert"):
        return _revert(sglang_dir)


def _revert(sglang_dir) -> dict:
    tree = _Tree(sglang_dir)
    if all(f.state == MISSING for f in tree.files):
        if all(f.detail == NO_FILE for f in tree.files):
            raise messages.not_sglang(tree.sglang_dir, tree.files, tree.declared)
        raise messages.refusal(
            "revert", tree.sglang_dir, [messages.missing(f) for f in tree.files],
            "pass --sglang-dir with the `sglang` package directory the overlay patched",
        )
    leftovers = store.remove_leftovers(tree.sglang_dir, TARGET_FILES)
    refusals, restores, actions, left = [], [], {}, []
    for f in tree.files:
        if f.state == MISSING:
            actions[f.relpath] = (f"left as is: {f.detail}", None)
            left.append(f"{f.relpath}: {f.detail} ({f.path})")
        elif f.sha256 == f.base_sha256:
            actions[f.relpath] = (
                ("already pristine", None) if f.state == PRISTINE else ("left as is: no overlay lines", None)
            )
        elif f.recoverable:
            copy = store.read_pristine_copy(tree.sglang_dir, f.relpath)
            source = (
                "saved pristine copy"
                if copy is not None and sha256_bytes(copy) == f.base_sha256
                else ("the file with the overlay's marked lines removed")
            )
            restores.append((f, copy if source == "saved pristine copy" else f.base))
            actions[f.relpath] = ("restored", source)
        else:
            refusals.append(
                f"{f.relpath}: {f.detail} (sha256 {f.sha256}). It changed after the overlay patched it; "
                f"reinstall SGLang's file ({messages.REINSTALL.format(release='<release>')})"
            )
    if refusals:
        raise messages.refusal(
            "revert", tree.sglang_dir, refusals, "see each file above", messages.leftovers_note(leftovers, False)
        )
    by_path = {f.relpath: (f, data) for f, data in restores}
    steps = [
        writes.Step(rel, by_path[rel][0].path, by_path[rel][1], module=True) for rel in writes.revert_order(by_path)
    ]
    record_removed = []  # `then` runs after the last restore, with signals still held
    late_signal = writes.run(
        "revert", steps, sglang_dir=tree.sglang_dir, created_record=False,
        then=None if left else lambda: record_removed.append(store.remove_state_dir(tree.sglang_dir)),
    )
    removed = any(record_removed)
    message = f"restored {len(restores)} file(s) to their pristine bytes" if restores else "nothing to revert"
    if left:
        record = store.state_dir(tree.sglang_dir)
        kept = f"; the record folder {record} is kept (it may hold the saved pristine copies)"
        message += (
            "; NOT complete, left as is: " + "; ".join(left) + ". Reinstall SGLang's file(s) "
            f"({messages.REINSTALL.format(release='<release>')})" + (kept if record.exists() else "")
        )
    message += _late_signal_note(late_signal, "revert")
    return {
        "action": "revert",
        "sglang_dir": str(tree.sglang_dir),
        "changed": bool(restores) or removed or bool(leftovers),
        "complete": not left,
        "removed_state_dir": removed,
        "leftovers_removed": leftovers,
        "state_dir": str(store.state_dir(tree.sglang_dir)),
        "files": [
            {"relpath": rel, "action": action, "source": source} for rel, (action, source) in actions.items()
        ],
        "message": message + messages.leftovers_note(leftovers, False),
    }


def diff(sglang_dir) -> str:
    """The unified diff from each file's pristine bytes (saved copy, else reconstructed) to the file now."""
    tree = _Tree(_existing_dir(sglang_dir))
    chunks = []
    for f in tree.files:
        if f.data is None:
            continue
        before = store.read_pristine_copy(tree.sglang_dir, f.relpath) or f.base
        if before == f.data:
            continue
        chunks.extend(
            difflib.unified_diff(
                before.decode("utf-8", "replace").splitlines(keepends=True),
                f.data.decode("utf-8", "replace").splitlines(keepends=True),
                fromfile=f"a/sglang/{f.relpath}",
                tofile=f"b/sglang/{f.relpath}",
            )
        )
    return "".join(chunks)


def status(sglang_dir) -> dict:
    """The state of each file and of the installation as a whole (schema in the CLI's `status --help`;
    the CLI adds `kernels`). Reports the record folder's problem instead of refusing on it, so it can
    show what is wrong; the temp files of a killed run (`leftovers`) and the holder of the lock, if a
    patcher runs now (`locked_by`)."""
    tree = _Tree(_existing_dir(sglang_dir), record_must_be_usable=False)
    states = {f.state for f in tree.files}
    overall = states.pop() if len(states) == 1 else ("mixed" if states == {PRISTINE, PATCHED} else "unknown")
    return {
        "schema": STATUS_SCHEMA,
        "sglang_dir": str(tree.sglang_dir),
        "state": overall,
        "release": tree.release,
        "declared_version": tree.declared,
        "unverified": any(f.unverified for f in tree.files) or bool(tree.fingerprint),
        "fingerprint_mismatches": [m.as_json() for m in tree.fingerprint],
        "unverified_files": tree.unverified_files(),
        "release_label": tree.release_label(),
        "leftovers": [str(p) for p in store.leftover_temp_files(tree.sglang_dir, TARGET_FILES)],
        "locked_by": lock.holder(tree.sglang_dir) or None,
        "overlay_version": replayssm_overlay.__version__,
        "manifest_path": str(store.manifest_path(tree.sglang_dir)),
        "manifest": tree.manifest,
        "manifest_problem": tree.manifest_problem,
        "partial": messages.partial(tree),
        "files": [f.as_json() for f in tree.files],
    }


class _Tree:
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
        self.release = (
            self.declared if self.declared in common else max(common, key=version_key) if common else None
        )
        # the files the hooks rely on besides the three patched ones, where they differ from the release's
        self.fingerprint = fingerprint.mismatches(self.sglang_dir, self.release) if self.release else []

    def unverified_files(self) -> list:
        return [f.relpath for f in self.files if f.unverified]

    def release_label(self) -> str:
        """What the messages call the installation: the release, every target file that is unverified and
        every fingerprint file that is not the release's."""
        label = self.release or "(release unidentified)"
        unverified = self.unverified_files()
        if unverified:
            label += (
                f", UNVERIFIED: {', '.join(unverified)} (matches no known release; "
                "accepted with --allow-unverified)"
            )
        if self.fingerprint:
            label += (
                f", UNVERIFIED: {', '.join(m.relpath for m in self.fingerprint)} (not as SGLang {self.release} "
                "ships it; the hooks rely on it; apply and verify need --allow-unverified)"
            )
        return label

    def new_manifest(self, patched: dict, kernels) -> dict:
        files = {f.relpath: _manifest_entry(f, patched.get(f.relpath, f.data)) for f in self.files}
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
            "kernels": kernels,
        }

    def manifest_matches(self, manifest: dict) -> bool:
        return self.manifest is not None and all(
            self.manifest.get(key) == manifest[key]
            for key in ("release", "files", "unverified", "sglang_dir")
        )

    def pristine_copies_match(self) -> bool:
        return all(
            (copy := store.read_pristine_copy(self.sglang_dir, f.relpath)) is not None
            and sha256_bytes(copy) == f.base_sha256
            for f in self.files
        )


def _manifest_entry(f, after: bytes) -> dict:
    return {
        "sha256_before": f.base_sha256,
        "sha256_after": sha256_bytes(after),
        "release": ",".join(sorted(f.releases)) or None,
        "unverified": f.unverified,
    }


def _existing_dir(sglang_dir) -> pathlib.Path:
    path = pathlib.Path(sglang_dir).resolve()
    if not path.is_dir():
        raise OverlayError(
            f"{path} is not a directory",
            "pass the `sglang` package directory (the folder that holds srt/)",
        )
    return path
