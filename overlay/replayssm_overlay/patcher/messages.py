"""What the patcher says when it refuses, or finds a tree half done: each message built in one place.

Why it exists: the same situations (a missing file, a file of no known release, an unsupported release,
a folder that is not SGLang, a tree an interrupted run left partly patched) are met by `apply`,
`verify`, `revert` and `status`, and each must be said the same way: what is wrong first, in one line,
then the command that fixes it; the hashes that prove it only where they help (a supported release
with a damaged file) or on request (`OverlayError.detail`: shown by `-v` and `--json`).
"""

from replayssm_overlay.errors import OverlayError
from replayssm_overlay.patcher import fingerprint
from replayssm_overlay.patcher.filestate import NO_FILE, PATCHED, PRISTINE
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
        fix + "; a release the overlay does not know needs its own entry in patcher/releases.py. "
        + ALLOW_UNVERIFIED + ". -v or --json shows each file's sha256 and the release the tree looks most like",
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
    return (
        f"{f.relpath}: {f.detail}. "
        + (
            "Run `replayssm-overlay revert` first, then apply"
            if f.recoverable
            else f"Reinstall SGLang's pristine file ({REINSTALL.format(release='<release>')}), then apply"
        )
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
    return {"patched": patched, "pristine": pristine, "lifts_refusal_without_commit": unsafe,
            "repair": repair, "detail": text}
