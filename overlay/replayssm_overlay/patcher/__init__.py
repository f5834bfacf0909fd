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
repair it). `apply`, `revert` and `verify` hold the lock on the
target (`lock.py`) while they look and write, so only one patcher acts on a tree at a time; `apply` and
`revert` first delete the temp files a killed run left (`store.remove_leftovers`) and say so in
`leftovers_removed`. A file patched over an unverified base is named in every result
(`unverified_files`, and `release_label`, the words the messages use).

This module is the API only: it decides and writes. How it reads a tree is `installation.py`, every
sentence it says is `messages.py`, the all-or-nothing writes are `writes.py`.
"""

import difflib
import pathlib

import replayssm_overlay
from replayssm_overlay.cliutil import sha256_bytes
from replayssm_overlay.patcher import lock, messages, store, writes
from replayssm_overlay.patcher.edits import patch_source
from replayssm_overlay.patcher.filestate import MISSING, PATCHED, PRISTINE
from replayssm_overlay.patcher.hookpoints import HookPointError
from replayssm_overlay.patcher.installation import Tree, manifest_entry
from replayssm_overlay.patcher.releases import TARGET_FILES

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
    tree = Tree(sglang_dir)
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
                refusals.append(messages.no_hook_point(f, err))
            f.unverified = f.state != PRISTINE
        elif f.sha256 != f.base_sha256:
            refusals.append(messages.changed_since_patched(f))
        else:
            refusals.append(messages.unknown(f, tree.declared, tree.release))
    if not refusals and tree.release is None and any(f.releases for f in tree.files):
        refusals.append(messages.mixed_releases(tree.files))
    if tree.release is not None and tree.fingerprint and not allow_unverified:
        refusals.append(messages.fingerprint_refusal(tree.release, tree.fingerprint))
    if refusals:
        raise messages.apply_refusal(tree, refusals, messages.leftovers_note(leftovers, dry_run))

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
                "action": (("would patch" if dry_run else "patched") if f.relpath in patched else "already patched"),
                "sha256_before": manifest["files"][f.relpath]["sha256_before"],
                "sha256_after": manifest["files"][f.relpath]["sha256_after"],
            }
            for f in tree.files
        ],
    }
    record_current = tree.manifest_matches(manifest) and tree.pristine_copies_match()
    by_path = {f.relpath: f for f in tree.files}
    if patched or not record_current:  # what the writes below need, checked by a dry run too
        blocked = store.unwritable_folders(
            [store.pristine_copy_path(tree.sglang_dir, f.relpath) for f in tree.files]
            + [by_path[rel].path for rel in patched]
            + [store.manifest_path(tree.sglang_dir)]
        )
        if blocked:
            raise messages.unwritable("patch", tree.sglang_dir, blocked)
    result["changed"] = not dry_run and not (record_current and not patched)
    if dry_run:
        result["message"] = messages.dry_run(tree, len(patched), leftovers)
        return result
    if not patched and record_current:
        result["message"] = messages.already_applied(leftovers)
        return result

    steps = [
        writes.Step(
            f"the saved pristine copy of {f.relpath}", store.pristine_copy_path(tree.sglang_dir, f.relpath), f.base
        )
        for f in tree.files
    ] + [  # the cached bytecode of each file the patch replaces (write_module deletes it), for revert
        writes.Step(
            f"the saved bytecode {cached.name}",
            store.saved_bytecode_path(tree.sglang_dir, rel, cached.name),
            cached.read_bytes(),
        )
        for rel in patched
        if by_path[rel].state == PRISTINE
        for cached in store.cached_bytecode(by_path[rel].path)
    ]
    modules = [writes.Step(rel, by_path[rel].path, patched[rel], module=True) for rel in writes.apply_order(patched)]
    # the manifest before the configurator's patch: a tree whose refusal is lifted always has its record
    steps += (
        modules[:-1]
        + [writes.Step("the manifest", store.manifest_path(tree.sglang_dir), store.manifest_bytes(manifest))]
        + modules[-1:]
    )
    late_signal = writes.run(
        "apply", steps, sglang_dir=tree.sglang_dir, created_record=not store.state_dir(tree.sglang_dir).exists()
    )
    result["message"] = messages.applied(tree, len(patched), leftovers, late_signal)
    return result


def verify(sglang_dir, *, allow_unverified=False, lock_timeout_s=lock.DEFAULT_TIMEOUT_S) -> dict:
    """Whether every file is exactly the patched bytes for the recorded release, and the record agrees."""
    sglang_dir = _existing_dir(sglang_dir)
    with lock.held(sglang_dir, exclusive=False, timeout_s=lock_timeout_s, command="verify"):
        return _verify(sglang_dir, allow_unverified)


def _verify(sglang_dir, allow_unverified) -> dict:
    tree = Tree(sglang_dir)
    problems = [messages.leftover_temp_file(path) for path in store.leftover_temp_files(tree.sglang_dir, TARGET_FILES)]
    manifest = tree.manifest
    partial = messages.partial(tree)
    if partial:
        problems.insert(0, partial["detail"])
    if tree.manifest_problem:
        problems.append(tree.manifest_problem)
    elif manifest is None:
        problems.append(messages.no_manifest(tree))
    for f in tree.files:
        if f.state != PATCHED:
            problems.append(messages.not_patched(f))
            continue
        if f.unverified and not allow_unverified:
            problems.append(messages.unverified_base(f))
        copy = store.read_pristine_copy(tree.sglang_dir, f.relpath)
        if copy is None or sha256_bytes(copy) != f.base_sha256:
            problems.append(messages.pristine_copy_differs(f))
        recorded = (manifest or {}).get("files", {}).get(f.relpath)
        if manifest is not None and recorded != manifest_entry(f, f.data):
            problems.append(messages.manifest_entry_differs(f, recorded, manifest_entry(f, f.data)))
    if manifest is not None and manifest.get("release") != tree.release:
        problems.append(messages.manifest_release_differs(manifest.get("release"), tree.release))
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
    tree = Tree(sglang_dir)
    if all(f.state == MISSING for f in tree.files):
        raise messages.revert_refusal_all_missing(tree)
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
            refusals.append(messages.changed_after_patch(f))
    if refusals:
        raise messages.refusal(
            "revert", tree.sglang_dir, refusals, "see each file above", messages.leftovers_note(leftovers, False)
        )
    steps = _restore_steps(tree, {f.relpath: (f, data) for f, data in restores})
    record = store.state_dir(tree.sglang_dir)
    blocked = store.unwritable_folders(
        [step.path for step in steps] + ([record / "manifest.json", record] if record.exists() and not left else [])
    )
    if blocked:
        raise messages.unwritable("revert", tree.sglang_dir, blocked)
    record_removed = []  # `then` runs after the last restore, with signals still held
    late_signal = writes.run(
        "revert",
        steps,
        sglang_dir=tree.sglang_dir,
        created_record=False,
        then=None if left else lambda: record_removed.append(store.remove_state_dir(tree.sglang_dir)),
    )
    removed = any(record_removed)
    kept_record = record if left and record.exists() else None
    return {
        "action": "revert",
        "sglang_dir": str(tree.sglang_dir),
        "changed": bool(restores) or removed or bool(leftovers),
        "complete": not left,
        "removed_state_dir": removed,
        "leftovers_removed": leftovers,
        "state_dir": str(record),
        "files": [{"relpath": rel, "action": action, "source": source} for rel, (action, source) in actions.items()],
        "message": messages.reverted(len(restores), left, kept_record, late_signal, leftovers),
    }


def _restore_steps(tree, by_path: dict) -> list:
    """Revert's writes, configurator first: each file's pristine bytes with its modification time before the
    patch (as the manifest recorded it), then its cached bytecode as `apply` found it (saved in the record)."""
    mtimes = (tree.manifest or {}).get("source_mtime_ns")
    mtimes = mtimes if isinstance(mtimes, dict) else {}
    steps = []
    for rel in writes.revert_order(by_path):
        path, mtime = by_path[rel][0].path, mtimes.get(rel)
        steps.append(
            writes.Step(rel, path, by_path[rel][1], module=True, mtime_ns=mtime if isinstance(mtime, int) else None)
        )
        steps += [
            writes.Step(f"the cached bytecode {name}", path.parent / "__pycache__" / name, data)
            for name, data in store.read_saved_bytecode(tree.sglang_dir, rel).items()
        ]
    return steps


def diff(sglang_dir) -> str:
    """The unified diff from each file's pristine bytes (saved copy, else reconstructed) to the file now."""
    tree = Tree(_existing_dir(sglang_dir))
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
    tree = Tree(_existing_dir(sglang_dir), record_must_be_usable=False)
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


def _existing_dir(sglang_dir) -> pathlib.Path:
    path = pathlib.Path(sglang_dir).resolve()
    if not path.is_dir():
        raise messages.not_a_directory(path)
    return path
