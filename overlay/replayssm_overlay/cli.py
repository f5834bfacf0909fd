"""The `replayssm-overlay` command (also `python -m replayssm_overlay`): apply, verify, revert, diff and
status of the overlay's patch on an installed SGLang, and the `kernels` group.

It composes the parts that do not know each other: `status` is the patcher's report plus the fold's
`describe()`, and `apply` records that description in the manifest, so the patcher imports nothing of
`fold` or `kernels`; the `kernels` group gets its `build` from the ahead-of-time build (`aot.cli`).

Exit codes: 0 ok; 1 a check failed (`verify`; `status` of a partially patched tree; `revert` that could
not restore every file); 2 usage error, environment error, refusal, or an `apply`/`revert` stopped by
SIGINT/SIGTERM and rolled back (nothing was changed). `-v` adds a refusal's evidence (`detail`). Every
subcommand takes `--json` (one JSON object on stdout) and `--sglang-dir`. A refusal (`OverlayError`) or a
failed file operation (`OSError`, turned into one by `errors.from_os_error`) is one message naming the
path and the fix, never a traceback; with --json it is also `{ok: false, error, fix, code, detail}` on
stdout, `code` the refusal's stable kebab-case code (`errors.OverlayError.code`).
`build_parser()` builds the whole parser so that other command groups can be added to it: a subcommand
is a subparser whose defaults carry `handler=callable(args) -> exit code`.
"""

import argparse
import sys

import replayssm_overlay
from replayssm_overlay import exactness, fold, patcher, protocol, records, selfcheck
from replayssm_overlay.aot.cli import add_build
from replayssm_overlay.cliutil import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USAGE, HelpFormatter, emit, emit_line, print_json
from replayssm_overlay.errors import OverlayError, from_os_error
from replayssm_overlay.kernels.cli import register as register_kernels
from replayssm_overlay.metrics_cli import register as register_metrics
from replayssm_overlay.patcher.lock import DEFAULT_TIMEOUT_S
from replayssm_overlay.patcher.releases import RELEASES, RING_RELEASES, TARGET_FILES
from replayssm_overlay.patcher.target import find_sglang_dir
from replayssm_overlay.plan.cli import register as register_plan

TOP_EPILOG = """\
examples:
  replayssm-overlay status              # what is installed, file by file
  replayssm-overlay apply --dry-run     # check files and hook points only
  replayssm-overlay apply && replayssm-overlay verify
  replayssm-overlay revert --sglang-dir /venv/lib/python3/site-packages/sglang
  replayssm-overlay metrics             # fold in use etc., Prometheus text

exit codes: 0 ok, 1 a check failed (verify; status of a partially patched tree;
revert that could not restore every file), 2 usage error, environment error,
refusal or an apply/revert stopped by SIGINT/SIGTERM (nothing changed: rolled
back).
"""

STATUS_SCHEMA_HELP = f"""\
JSON (--json), schema 1:
  schema            1
  sglang_dir        the sglang package directory inspected
  state             pristine | patched | mixed (some of each) | unknown |
                    missing
  release           SGLang release the files' hashes identify, or null
  release_label     the release as messages say it, naming unverified files
  declared_version  version the installation declares (dist-info or
                    sglang/_version.py), or null
  unverified        true if a file was patched over an unknown base, or a
                    fingerprint file differs
  fingerprint_mismatches
                    [{{relpath, expected, found}}]: the release's fingerprint
                    files that differ (found null: missing)
  unverified_files  the files patched with apply --allow-unverified
  leftovers         temp files a killed patcher run left (apply, revert
                    remove them)
  locked_by         the patcher run holding the lock now ("pid N ..."), or null
  overlay_version   version of this overlay package
  manifest_path     where the manifest is (or would be)
  manifest          the manifest's content, or null
  manifest_problem  why the manifest could not be read, or null
  protocol          fold (0.5.19: the raw-window fold commits) | ring ({RING_RELEASES[0]} to
                    {RING_RELEASES[-1]}: SGLang's own MTP commit commits) | null (neither),
                    read from the tree's GDN ReplaySSM kernel files
  partial           null, or (state mixed: an interrupted apply or revert)
                    {{patched[], pristine[], lifts_refusal_without_commit,
                    repair[] (the apply and the revert command that repair
                    it), detail}}; status then exits 1
  kernels           replayssm_overlay.fold.describe(): the fold kernel this
                    node would commit with, and the shapes this tree's live
                    serving processes ran with SGLang's fold
                    (fallbacks_recorded); on a ring release fold is
                    sglang-mtp-commit (SGLang's own MTP commit commits; the
                    overlay's fold kernels are not used)
  exactness         the row of the README's table "What is bitwise where"
                    that applies, from the protocol and the newest live
                    serving process of this tree (its record: state and ring
                    dtype, fold in use, the kernel stock SGLang verifies with
                    on its flags with ReplaySSM off): row, protocol, commit,
                    bitwise_equal_to (replayssm-off-state |
                    replayssm-off-state-triton-verify | sglang-mtp-commit |
                    null: no bitwise claim), statement, caveats[], parity
                    (what replayssm-smoke --parity auto runs against the same
                    algorithm with ReplaySSM off: strict | tie-aware),
                    strict_reference (what that reference must run)
  selfcheck[]       one per serving process on this node that ran the check
                    before serving (newest first; records in $RSO_STATE_DIR,
                    default <tmp>/replayssm-overlay; each names its process by
                    PID, start time, PID namespace and boot, and its SGLang
                    tree): pid, scope (tree: a process that imported this
                    tree | node: another tree's, listed as node-wide and not
                    used for exactness), sglang_dir, alive (true only where
                    this process can tell it runs), liveness (alive | dead |
                    unknown: another PID namespace or boot, an older record),
                    liveness_detail, time, outcome (passed | mismatch | error |
                    not-covered | sglang-fold | ring-commit: nothing checked,
                    SGLang's MTP commit commits), detail, seed, geometry,
                    protocol, fold (the fold it commits with after the check),
                    stock_verify_kernel (triton | flashinfer), commit,
                    exactness, seconds, staging_seconds (the CUDA kernel's
                    pinned staging grid), warmup (SGLang's commit compiled on
                    the pool that serves: outcome compiled | pending | error
                    | not-needed, detail, pool, seconds, compiles,
                    cache_hits; null: none arranged), path; or problem (an
                    unreadable record)
  files[]           one per target file: relpath, path, state (pristine |
                    patched | unknown | missing), sha256 (now, or null),
                    pristine_sha256 (the base, if it can be restored exactly),
                    release (of the pristine base, or null), unverified,
                    detail (one line for people)
"""


def _examples(*lines: str) -> str:
    return "example:\n" + "\n".join(f"  {line}" for line in lines)


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--sglang-dir",
        metavar="PATH",
        help="the `sglang` package directory to act on (default: the sglang this Python would import, "
        "located without importing it)",
    )
    common.add_argument("--json", action="store_true", help="print one JSON object on stdout instead of text")
    common.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="with a refusal, also print its evidence (each file's sha256, the release the tree looks most "
        "like); --json always carries it as `detail`",
    )
    locked = argparse.ArgumentParser(add_help=False)
    locked.add_argument(
        "--lock-timeout",
        type=_seconds,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help="how long to wait for another patcher run on the same SGLang to finish before refusing",
    )

    parser = argparse.ArgumentParser(
        prog="replayssm-overlay",
        description="Patch an installed SGLang so that ReplaySSM spec-verify runs with DFLASH and DSPARK on "
        "hybrid GDN models. The patch adds a few marked lines to three files ("
        + ", ".join(TARGET_FILES)
        + ") that call this package; supported releases: "
        + ", ".join(RELEASES)
        + ". `COMMAND --help` says more about each command.",
        epilog=TOP_EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {replayssm_overlay.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    apply = sub.add_parser(
        "apply",
        parents=[common, locked],
        formatter_class=HelpFormatter,
        epilog=_examples(
            "replayssm-overlay apply --dry-run && replayssm-overlay apply",
            "replayssm-overlay apply --sglang-dir /venv/lib/python3/site-packages/sglang",
        ),
        help="patch the three SGLang files (idempotent)",
        description="Check that the three files are the pristine files of a supported release (by sha256) "
        "and that every hook point is where the overlay expects it, then save pristine copies and a "
        "manifest next to the package and write the patched files atomically. Nothing is written unless "
        "all three files check out. Running it on an already patched installation changes nothing. Temp "
        "files a killed run left are removed first (and listed).",
    )
    apply.add_argument(
        "--allow-unverified",
        action="store_true",
        help="patch files whose content matches no known release, if their hook points are found "
        "(recorded as unverified in the manifest). Use only after checking the code by hand",
    )
    apply.add_argument("--dry-run", action="store_true", help="check everything, write nothing")
    apply.set_defaults(handler=_apply)

    verify = sub.add_parser(
        "verify",
        parents=[common, locked],
        formatter_class=HelpFormatter,
        epilog=_examples("replayssm-overlay verify || replayssm-overlay status"),
        help="check that the installation is exactly as the overlay patched it (exit 1 if not)",
        description="Exit 0 only if every file is exactly the patched bytes for the recorded release, the "
        "pristine copies are intact and the manifest agrees; otherwise exit 1 and list what is off.",
    )
    verify.add_argument(
        "--allow-unverified",
        action="store_true",
        help="accept files that were patched with apply --allow-unverified",
    )
    verify.set_defaults(handler=_verify)

    revert = sub.add_parser(
        "revert",
        parents=[common, locked],
        formatter_class=HelpFormatter,
        epilog=_examples("replayssm-overlay revert && replayssm-overlay status"),
        help="restore the pristine files and remove the manifest folder (idempotent)",
        description="Restore the exact pristine bytes of every patched file (checked against the release "
        "table or the manifest before writing), its modification time and the cached bytecode apply found, "
        "then delete the manifest folder. Refuses, changing "
        "nothing, if a file changed after it was patched. A target that is missing or a directory is left "
        "as it is and named, the other files are restored and the manifest folder is kept (exit 1). Temp "
        "files a killed run left are removed first (and listed).",
    )
    revert.set_defaults(handler=_revert)

    diff = sub.add_parser(
        "diff",
        parents=[common],
        formatter_class=HelpFormatter,
        epilog=_examples("replayssm-overlay diff > overlay.diff"),
        help="print the effective unified diff of the installed patch",
        description="Print the unified diff from each file's pristine bytes (the saved copy, else the file "
        "with the overlay's marked lines removed) to the file as it is now. Empty when nothing is patched.",
    )
    diff.set_defaults(handler=_diff)

    status = sub.add_parser(
        "status",
        parents=[common],
        help="show the state of each file, the release, the manifest and the fold kernels",
        description="Show whether each file is pristine, patched, unknown or missing, the release its hashes "
        "identify, the overlay version, the manifest path and the fold kernels in use, temp files a killed "
        "run left and a patcher run holding the lock. Works without the manifest: the state comes from the "
        "bytes. Exits 0, or 1 when the tree is partially patched (an interrupted apply or revert; it names "
        "the command that repairs it).",
        epilog=_examples("replayssm-overlay status --json") + "\n\n" + STATUS_SCHEMA_HELP,
        formatter_class=HelpFormatter,
    )
    status.set_defaults(handler=_status)
    register_metrics(sub, common, lambda args: status_report(_target(args)))
    register_kernels(sub, add_build)
    register_plan(sub)
    return parser


def _seconds(text: str) -> float:
    """A --lock-timeout value: a number of seconds, 0 or more (0: do not wait)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds, 0 or more (0: do not wait), got {text!r}")
    return value


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return args.handler(args)
    except OverlayError as err:
        return _refused(args, err)
    except OSError as err:  # a file operation no module turned into a refusal: still a message, not a traceback
        return _refused(args, from_os_error(err, "access"))
    except KeyboardInterrupt:  # outside a write phase, which holds SIGINT and rolls back itself
        return _refused(
            args,
            OverlayError(
                "interrupted (SIGINT) outside any write; the three files are as a whole either as they were or as "
                "intended",
                "`replayssm-overlay status` shows which; run the command again to finish it",
            ),
        )


def _refused(args, err: OverlayError) -> int:
    print(f"replayssm-overlay {args.command}: {err}", file=sys.stderr)
    if err.detail and getattr(args, "verbose", False):
        print("  detail:\n" + "\n".join(f"    - {line}" for line in err.detail), file=sys.stderr)
    if getattr(args, "json", False):
        print_json({"ok": False, "error": err.what, "fix": err.fix, "code": err.code, "detail": err.detail})
    return EXIT_USAGE


def _apply(args) -> int:
    result = patcher.apply(
        _target(args),
        allow_unverified=args.allow_unverified,
        dry_run=args.dry_run,
        kernels=fold.describe(),
        lock_timeout_s=args.lock_timeout,
    )
    _report(args, result, _file_actions(result))
    return EXIT_OK


def _verify(args) -> int:
    result = patcher.verify(_target(args), allow_unverified=args.allow_unverified, lock_timeout_s=args.lock_timeout)
    if result["ok"]:
        text = f"OK: patched SGLang {result['release_label']} at {result['sglang_dir']}"
    else:
        text = "FAILED:\n" + "\n".join(f"  - {problem}" for problem in result["problems"])
    _report(args, result, text)
    return EXIT_OK if result["ok"] else EXIT_CHECK_FAILED


def _revert(args) -> int:
    result = patcher.revert(_target(args), lock_timeout_s=args.lock_timeout)
    _report(args, result, _file_actions(result))
    return EXIT_OK if result["complete"] else EXIT_CHECK_FAILED


def _diff(args) -> int:
    text = patcher.diff(_target(args))
    if args.json:
        print_json({"diff": text})
    else:
        emit(text)
    return EXIT_OK


def status_report(sglang_dir) -> dict:
    """What `status --json` prints: the patcher's report, the tree's protocol, the fold kernels, the self-check
    records and what commits (exactness)."""
    result = patcher.status(sglang_dir)
    result["protocol"] = protocol.of_tree(sglang_dir)
    result["kernels"] = _kernels(result["protocol"], sglang_dir)
    result["selfcheck"] = selfcheck.read_records(sglang_dir=sglang_dir)
    result["exactness"] = _exactness(result)
    return result


def _kernels(tree_protocol: str | None, sglang_dir) -> dict:
    """`fold.describe()` with the fallbacks of this tree's serving processes; on a ring release what commits
    instead (the overlay's fold kernels are not used there)."""
    if tree_protocol == protocol.RING:
        return {
            "fold": exactness.RING_COMMIT,
            "reason": f"this release commits with SGLang's own MTP commit "
            f"({protocol.MTP_COMMIT}); the overlay's fold kernels are not used",
            "decided": True,
            "fallbacks_recorded": [],
        }
    return {**fold.describe(), "fallbacks_recorded": fold.recorded_fallbacks(sglang_dir)}


def _status(args) -> int:
    result = status_report(_target(args))
    kernels = ", ".join(f"{k}={v}" for k, v in result["kernels"].items())
    rows = [("FILE", "STATE", "RELEASE", "SHA256")] + [
        (
            f["relpath"],
            f["state"] + (" (unverified)" if f["unverified"] else ""),
            f["release"] or "-",
            (f["sha256"] or "-")[:16],
        )
        for f in result["files"]
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    table = "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)
    partial = result["partial"]
    text = (
        f"sglang:   {result['sglang_dir']} (declares {result['declared_version'] or 'no version'})\n"
        f"state:    {result['state']}; release by hashes: {result['release_label']}\n"
        + (f"PARTIAL:  {partial['detail']}\n" if partial else "")
        + f"overlay:  {result['overlay_version']}\n"
        f"manifest: {result['manifest_path']}"
        + ("" if result["manifest"] else f" ({result['manifest_problem'] or 'absent'})")
        + f"\nkernels:  {kernels}"
        + f"\ncommit:   {result['exactness']['commit']}: {result['exactness']['statement']}"
        + "".join(f"\ncaveat:   {caveat}" for caveat in result["exactness"]["caveats"])
        + "".join(
            f"\nleftover: {path} (a temp file of a killed run; apply or revert removes it)"
            for path in result["leftovers"]
        )
        + (f"\nlocked:   a patcher run holds the lock now: {result['locked_by']}" if result["locked_by"] else "")
        + "\n"
        + _selfcheck_lines(result["selfcheck"])
        + f"\n{table}"
    )
    _report(args, result, text)
    return EXIT_CHECK_FAILED if partial else EXIT_OK


def _exactness(result: dict) -> dict:
    """`exactness.describe` for this tree's protocol and the newest live serving process's pool (its
    self-check record), else the fold this process would choose."""
    live = next(
        (
            r
            for r in result["selfcheck"]
            if r.get("alive") and r.get("scope") == records.TREE and isinstance(r.get("geometry"), dict)
        ),
        None,
    )
    if live is None:
        return exactness.describe(result["protocol"], fold=result["kernels"].get("fold"))
    return exactness.describe(
        result["protocol"],
        fold=(live.get("fold") or {}).get("fold"),
        state_dtype=live["geometry"].get("state_dtype"),
        ring_dtype=live["geometry"].get("ring_dtype"),
        stock_verify=live.get("stock_verify_kernel"),
    )


_LIVENESS = {records.ALIVE: "running", records.DEAD: "exited"}


def _selfcheck_lines(entries: list) -> str:
    if not entries:
        return f"selfcheck: no serving process has run it (records in {records.record_dir()})\n"
    lines = []
    for r in entries:
        label = (
            "selfcheck"
            if r["scope"] == records.TREE
            else (f"node-wide, SGLang at {r.get('sglang_dir') or 'an unnamed tree'}")
        )
        if "problem" in r:
            lines.append(f"{label}: {r['path']}: {r['problem']}")
        else:
            state = _LIVENESS.get(r["liveness"]) or f"{r['liveness']}: {r['liveness_detail']}"
            fold_used = (r.get("fold") or {}).get("fold", "-")
            lines.append(f"{label}: pid {r['pid']} ({state}): {r['outcome']}, fold {fold_used}: {r['detail']}")
            if isinstance(r.get("warmup"), dict):
                lines.append(f"  warm-up: {r['warmup'].get('outcome')}: {r['warmup'].get('detail')}")
    return "\n".join(lines) + "\n"


def _target(args):
    return find_sglang_dir(args.sglang_dir)


def _file_actions(result: dict) -> str:
    lines = [f"{result['message']} ({result['sglang_dir']})"]
    for f in result["files"]:
        lines.append(f"  {f['action']:<30} {f['relpath']}" + (f"  [from {f['source']}]" if f.get("source") else ""))
    return "\n".join(lines)


def _report(args, result: dict, text: str) -> None:
    if args.json:
        print_json(result)
    else:
        emit_line(text)
