"""What the patcher says when it refuses, or finds a tree half done: each message built in one place.

Why it exists: the same situations (a missing file, a file of no known release, an unsupported release,
a folder that is not SGLang, a tree an interrupted run left partly patched) are met by `apply`,
`verify`, `revert` and `status`, and each must be said the same way: what is wrong first, in one line,
then the command that fixes it; the hashes that prove it only where they help (a supported release
with a damaged file) or on request (`OverlayError.detail`: shown by `-v` and `--json`). The API
(`patcher/__init__.py`) decides and writes; every sentence it says comes from here.
"""

from replayssm_overlay.errors import OverlayError
from replayssm_overlay.patcher import fingerprint, store
from replayssm_overlay.patcher.filestate import MISSING, NO_FILE, PATCHED, PRISTINE
from replayssm_overlay.patcher.releases import CONFIGURATOR, RELEASES, TARGET_FILES, expected_hashes, version_key

SUPPORTED = ", ".join(RELEASES)
REINSTALL = "pip install --force-reinstall --no-deps sglang=={release}"
ALLOW_UNVERIFIED = (
    "--allow-unverified patches anyway where the hook points are found (recorded as unverified; check "
    "the code by hand first)"
)


def refusal(verb: str, sglang_dir, lines: list, fix: str, leftovers_note: str = "") -> OverlayError:
    """The refusal of `verb` on a tree with the given per-file `lines` (nothing was changed)."""
    return OverlayError(
        f"refusing to {verb} {sglang_dir}; no file was changed" + leftovers_note + ":\n    - " + "\n    - ".join(lines),
        fix,
    )


def not_sglang(sglang_dir, files, declared) -> OverlayError:
    """None of the three files is there: the folder is not an SGLang package directory at all."""
    claims = f" (it declares SGLang {declared}, but has none of its files)" if declared else ""
    return OverlayError(
        f"{sglang_dir} is not an SGLang installation{claims}: none of the files the overlay patches is there "
        f"({', '.join(TARGET_FILES)}); no file was changed",
        "pass --sglang-dir with the `sglang` package directory (the folder that holds srt/), e.g. "
        ".../site-packages/sglang, or leave --sglang-dir out to use the sglang this Python would import",
        detail=[missing(f) for f in files],
    )


def unsupported(sglang_dir, tree, per_file: list) -> OverlayError:
    """No target file is any known release's and the tree declares no supported one: the release itself is
    not supported. The first line says so; the hashes and the likeness go to `detail`."""
    declared = tree.declared
    name = f"SGLang {declared}" if declared else "This SGLang (it declares no version)"
    newer = declared is not None and version_key(declared) > version_key(next(reversed(RELEASES)))
    fix = (
        f"SGLang {declared} is newer than this overlay knows: install a supported release "
        f"(pip install sglang=={next(reversed(RELEASES))}), or a newer overlay that supports it"
        if newer
        else "install one of the supported releases into this Python (pip install sglang==X.Y.Z, X.Y.Z one "
        "of those), then run apply again"
    )
    return OverlayError(
        f"{name} is not supported; supported: {SUPPORTED}. Its files match none of those releases, so "
        f"no file of {sglang_dir} was changed",
        fix
        + "; a release the overlay does not know needs its own entry in patcher/releases.py. "
        + ALLOW_UNVERIFIED
        + ". -v or --json shows each file's sha256 and the release the tree looks most like",
        detail=per_file + [likeness(tree)],
    )


def missing(f) -> str:
    if f.detail != NO_FILE:
        return (
            f"{f.relpath}: {f.detail} ({f.path}). Move it away and reinstall SGLang's file "
            f"({REINSTALL.format(release='<release>')})"
        )
    return (
        f"{f.relpath}: {f.detail} ({f.path}). This is not an SGLang installation the overlay supports "
        f"({SUPPORTED}); pass --sglang-dir with the right `sglang` package directory, or reinstall SGLang"
    )


def unknown(f, declared, likely=None) -> str:
    """`likely`: the release the tree's other target files are, if they agree on one."""
    expected = expected_hashes(f.relpath)
    named = declared if declared in expected else likely if likely in expected else None
    shown = {named: expected[named]} if named else dict(reversed(list(expected.items())))
    reinstall = (
        f"Reinstall the pristine file ({REINSTALL.format(release=named)})"
        if named
        else f"Install a supported release ({SUPPORTED})"
    )
    return (
        f"{f.relpath}: sha256 {f.sha256} matches no known release (expected "
        + ", ".join(f"{sha} for SGLang {release}" for release, sha in shown.items())
        + f"; the installation declares version {declared or 'unknown'}). {reinstall}, or, if you have "
        "checked that this content is compatible, rerun with --allow-unverified"
    )


def changed_since_patched(f) -> str:
    return f"{f.relpath}: {f.detail}. " + (
        "Run `replayssm-overlay revert` first, then apply"
        if f.recoverable
        else f"Reinstall SGLang's pristine file ({REINSTALL.format(release='<release>')}), then apply"
    )


def fingerprint_refusal(release: str, mismatches: list) -> str:
    return (
        f"the three patched files are SGLang {release}'s, but files whose behaviour the overlay's hooks rely "
        f"on are not: " + "; ".join(m.describe(release) for m in mismatches) + f". Reinstall SGLang "
        f"({REINSTALL.format(release=release)}), or, if you have checked that the "
        "changed files keep what the hooks rely on (patcher/releases.py says what each file is for), rerun "
        "with --allow-unverified: it is recorded in the manifest and `verify` then needs it too"
    )


def likeness(tree) -> str:
    observed = {f.relpath: (f.base_sha256 if f.data is not None else None) for f in tree.files}
    like = fingerprint.closest_release(tree.sglang_dir, observed, tree.declared)
    return (
        f"this tree (declared version {tree.declared or 'unknown'}) is none of the supported releases "
        f"({SUPPORTED}): {like.describe()}. A release between the supported ones, a nightly or "
        "a tree whose hook structure moved needs its own entry in patcher/releases.py (and checked hooks); "
        + ALLOW_UNVERIFIED
    )


def leftovers_note(leftovers: list, dry_run: bool) -> str:
    if not leftovers:
        return ""
    verb = "would remove" if dry_run else "removed"
    return f"; {verb} {len(leftovers)} temp file(s) a killed run left: " + ", ".join(leftovers)


def partial(tree) -> dict | None:
    """A tree with some target files patched and the others pristine (an interrupted apply or revert, or a
    file reinstalled by hand): what is patched, whether that lifts the KDA-only refusal while a commit
    method is still stock's, and the commands that repair it. None for any other tree."""
    states = {f.relpath: f.state for f in tree.files}
    if set(states.values()) != {PATCHED, PRISTINE}:
        return None
    patched = [rel for rel, state in states.items() if state == PATCHED]
    pristine = [rel for rel, state in states.items() if state == PRISTINE]
    unsafe = states[CONFIGURATOR] == PATCHED
    where = f" --sglang-dir {tree.sglang_dir}"
    repair = [f"replayssm-overlay apply{where}", f"replayssm-overlay revert{where}"]
    text = (
        f"partially patched: {len(patched)} of {len(states)} files carry the overlay's lines ({', '.join(patched)}), "
        f"{', '.join(pristine)} {'is' if len(pristine) == 1 else 'are'} stock (an interrupted apply or revert, "
        "or a file reinstalled since)"
        + (
            "; DANGER: the configurator lifts SGLang's KDA-only refusal while "
            + " and ".join(pristine)
            + " still commits with stock's code, so a server started now accepts DFLASH/DSPARK on GDN with "
            "ReplaySSM and crashes at its first commit"
            if unsafe
            else "; the configurator still refuses DFLASH/DSPARK on GDN with ReplaySSM, so a server started now "
            "serves as stock"
        )
        + f". Repair: `{repair[0]}` finishes the patch, `{repair[1]}` restores the stock files"
    )
    return {
        "patched": patched,
        "pristine": pristine,
        "lifts_refusal_without_commit": unsafe,
        "repair": repair,
        "detail": text,
    }


def not_a_directory(path) -> OverlayError:
    return OverlayError(
        f"{path} is not a directory", "pass the `sglang` package directory (the folder that holds srt/)"
    )


def apply_refusal(tree, refusals: list, note: str) -> OverlayError:
    """One refusal for the whole tree: not SGLang at all, a release the overlay does not support (said in
    one line; the hashes are `detail`), or, for a supported release with a damaged file, each file."""
    if all(f.state == MISSING and f.detail == NO_FILE for f in tree.files):
        return not_sglang(tree.sglang_dir, tree.files, tree.declared)
    if tree.release is None and not any(f.releases for f in tree.files) and tree.declared not in RELEASES:
        return unsupported(tree.sglang_dir, tree, refusals)
    if tree.release is None or any(not f.releases and f.data is not None for f in tree.files):
        refusals.append(likeness(tree))
    return refusal("patch", tree.sglang_dir, refusals, "see each file above; supported releases: " + SUPPORTED, note)


def unwritable(verb: str, sglang_dir, folders: list) -> OverlayError:
    """The refusal of a run that could not write `folders` (checked before any write, dry runs included)."""
    return refusal(
        verb,
        sglang_dir,
        [
            f"{folder}: this user may not write there (its permissions, or a read-only file system)"
            for folder in folders
        ],
        "run the command as a user who may write these folders (the owner of the installation, e.g. root), or on "
        "a writable copy of the installation",
    )


def revert_refusal_all_missing(tree) -> OverlayError:
    """No target file is a file: the folder is not SGLang, or not the one the overlay patched."""
    if all(f.detail == NO_FILE for f in tree.files):
        return not_sglang(tree.sglang_dir, tree.files, tree.declared)
    return refusal(
        "revert",
        tree.sglang_dir,
        [missing(f) for f in tree.files],
        "pass --sglang-dir with the `sglang` package directory the overlay patched",
    )


def no_hook_point(f, err) -> str:
    return (
        f"{f.relpath}: no hook point: {err}. This file's structure is not one the overlay "
        "can hook; it is not the SGLang release the overlay supports"
    )


def mixed_releases(files) -> str:
    return (
        "the files come from different SGLang releases ("
        + ", ".join(f"{f.relpath}: {','.join(sorted(f.releases)) or 'unknown'}" for f in files)
        + "); reinstall one release"
    )


def changed_after_patch(f) -> str:
    return (
        f"{f.relpath}: {f.detail} (sha256 {f.sha256}). It changed after the overlay patched it; "
        f"reinstall SGLang's file ({REINSTALL.format(release='<release>')})"
    )


def dry_run(tree, patching: int, leftovers: list) -> str:
    """What `apply --dry-run` found: the files it would patch, or nothing to do."""
    if not patching:
        return "dry run: already patched; nothing to do" + leftovers_note(leftovers, True)
    checked = (
        "every hook point was found; the unverified file(s) are checked by structure only"
        if tree.unverified_files()
        else "every file and hook point checks out"
    )
    return f"dry run: would patch {patching} file(s) of SGLang {tree.release_label()}; {checked}" + leftovers_note(
        leftovers, True
    )


def already_applied(leftovers: list) -> str:
    return "already patched; nothing to do" + leftovers_note(leftovers, False)


def applied(tree, patched: int, leftovers: list, late_signal) -> str:
    done = (
        f"patched {patched} file(s) of SGLang {tree.release_label()}"
        if patched
        else "already patched; the manifest and pristine copies were rewritten"
    )
    return done + leftovers_note(leftovers, False) + late_signal_note(late_signal, "apply")


def reverted(restored: int, left: list, kept_record, late_signal, leftovers: list) -> str:
    """What `revert` did: the files restored, those it had to leave as they are (and the record folder it
    kept for them, `kept_record`, if there is one)."""
    message = f"restored {restored} file(s) to their pristine bytes" if restored else "nothing to revert"
    if left:
        kept = f"; the record folder {kept_record} is kept (it may hold the saved pristine copies)"
        message += (
            "; NOT complete, left as is: " + "; ".join(left) + ". Reinstall SGLang's file(s) "
            f"({REINSTALL.format(release='<release>')})" + (kept if kept_record is not None else "")
        )
    return message + late_signal_note(late_signal, "revert") + leftovers_note(leftovers, False)


def late_signal_note(late_signal, verb: str) -> str:
    if late_signal is None:
        return ""
    return f" ({late_signal} arrived during the last step and was not acted on: the {verb} is complete)"


def leftover_temp_file(path) -> str:
    return f"{path}: a temp file left by a killed patcher run; `replayssm-overlay apply` or `revert` removes it"


def no_manifest(tree) -> str:
    carrying = [f.relpath for f in tree.files if f.state == PATCHED]
    return f"no manifest at {store.manifest_path(tree.sglang_dir)}: " + (
        f"the record is missing although {len(carrying)} file(s) carry the overlay's lines"
        if carrying
        else "the overlay is not applied here"
    )


def not_patched(f) -> str:
    return f"{f.relpath}: {f.state}: {f.detail}"


def unverified_base(f) -> str:
    return f"{f.relpath}: patched over an unverified base; pass --allow-unverified to accept it"


def pristine_copy_differs(f) -> str:
    return f"{f.relpath}: the saved pristine copy is missing or differs from the pristine base"


def manifest_entry_differs(f, recorded, actual) -> str:
    return f"{f.relpath}: the manifest records {recorded}, the file is {actual}"


def manifest_release_differs(recorded, release) -> str:
    return f"the manifest records release {recorded}, the files are {release}"
