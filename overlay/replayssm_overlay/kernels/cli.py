"""`replayssm-overlay kernels ...`: build the CUDA commit kernel ahead of time, check a node against it, status.

`register(subparsers, add_build)` adds the group to the overlay's command line (each subcommand's
defaults carry `handler=callable(args) -> exit code`, the convention of `replayssm_overlay.cli`, which
runs it). `check` and `status` are the node side and live here; `build` is the ahead-of-time build's
(`replayssm_overlay.aot.cli.add_build`), handed in by the caller so that this module imports nothing of
the build. Exit codes: 0 ok; 1 a check failed (`check`: this node cannot use the artifacts); 2 usage
error, environment error or refusal (nothing written).
"""

from __future__ import annotations

import argparse
import os
import sys

from replayssm_overlay.cliutil import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USAGE, HelpFormatter, emit_line, print_json
from replayssm_overlay.kernels import artifact_format as af
from replayssm_overlay.kernels import loader

SCHEMA_HELP = f"""\
examples:
  replayssm-overlay kernels build --out /opt/replayssm-overlay/kernels
  replayssm-overlay kernels check /opt/replayssm-overlay/kernels --arch 90
  replayssm-overlay kernels status --json

JSON (--json): one object on stdout.
  build:  ok, out, up_to_date, cuda (NVRTC version, arch, registers)
  check:  ok, folder, problems[], node{{arch}},
          manifest{{builder, built_at, overlay_version, cuda}}
  status: folder, folder_source (argument | {loader.ENV_DIR} | default),
          exists, usable, problems[], node, manifest (as in check, or null)

Artifact folder: --dir/DIR, else ${loader.ENV_DIR}, else {loader.DEFAULT_DIR}.
Manifest schema {af.SCHEMA}.
"""


def register(subparsers, add_build) -> argparse.ArgumentParser:
    """Add `kernels build|check|status` to an argparse subparsers object; returns the group's parser.
    `add_build(sub, common)` adds `build` (first, as `--help` lists it)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print one JSON object on stdout instead of text")

    group = subparsers.add_parser(
        "kernels",
        help="the CUDA commit kernel compiled ahead of time for sm_90: build, check, status",
        description="The overlay's commit kernel (CUDA) is compiled ahead of time for Hopper (sm_90) so a "
        "serving node never compiles it. `build` makes the artifact folder (no GPU needed), `check` says "
        "whether this node can use one, `status` shows what the commit path would find. Without a usable "
        "folder the node commits with SGLang's own fold.",
        epilog=SCHEMA_HELP,
        formatter_class=HelpFormatter,
    )
    group.set_defaults(handler=lambda args: _usage(group))
    sub = group.add_subparsers(dest="kernels_command", metavar="SUBCOMMAND")
    add_build(sub, common)

    check = sub.add_parser(
        "check",
        parents=[common],
        formatter_class=HelpFormatter,
        epilog="example:\n  replayssm-overlay kernels check /opt/replayssm-overlay/kernels --arch 90",
        help="does this node match an artifact folder? (exit 1 if not)",
        description="Check the folder against this node: its manifest, the GPU compute capability, the "
        "sha256 of every file and the kernel's source (the installed gdn_fold.cu). Exit 0 if the fold can "
        "use it, 1 if not (every reason listed).",
    )
    check.add_argument("dir", metavar="DIR", help="artifact folder")
    check.add_argument(
        "--arch",
        type=int,
        metavar="SM",
        help="check against this compute capability (e.g. 90) "
        "instead of the visible GPU's, for machines without one (default: the visible GPU's)",
    )
    check.set_defaults(handler=_check)

    status = sub.add_parser(
        "status",
        parents=[common],
        formatter_class=HelpFormatter,
        epilog="example:\n  replayssm-overlay kernels status --dir /opt/replayssm-overlay/kernels --json",
        help="which artifact folder the commit path would use, and whether it can",
        description="Show the artifact folder the loader would use, where that choice came from, its "
        "manifest and whether this node can use it. Always exits 0 unless the arguments are wrong.",
    )
    status.add_argument(
        "--dir", metavar="DIR", help=f"folder to inspect (default: ${loader.ENV_DIR} or {loader.DEFAULT_DIR})"
    )
    status.add_argument("--arch", type=int, metavar="SM", help="as for check (default: the visible GPU's)")
    status.set_defaults(handler=_status)
    return group


def _usage(parser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def _check(args) -> int:
    report = _inspect(args.dir, args.arch)
    if args.json:
        print_json({k: report[k] for k in ("ok", "folder", "problems", "node", "manifest")})
    elif report["ok"]:
        emit_line(
            f"OK: this node can use the prebuilt kernel in {report['folder']} ({_summary_text(report['manifest'])})"
        )
    else:
        emit_line(f"REFUSED: {report['folder']}\n" + "\n".join(f"  - {p}" for p in report["problems"]))
    return EXIT_OK if report["ok"] else EXIT_CHECK_FAILED


def _status(args) -> int:
    source = "argument" if args.dir else (loader.ENV_DIR if os.environ.get(loader.ENV_DIR) else "default")
    report = _inspect(args.dir, args.arch)
    payload = {
        "folder": report["folder"],
        "folder_source": source,
        "exists": report["exists"],
        "usable": report["ok"],
        "problems": report["problems"],
        "node": report["node"],
        "manifest": report["manifest"],
    }
    if args.json:
        print_json(payload)
        return EXIT_OK
    node = report["node"]
    emit_line(f"folder:   {report['folder']} (from {source}){'' if report['exists'] else ' - does not exist'}")
    gpu = (
        f"checked as sm_{node['arch']} (--arch; no GPU was asked)"
        if args.arch is not None
        else f"GPU sm_{node['arch']}"
        if node["arch"]
        else "GPU none visible"
    )
    emit_line(f"node:     {gpu}")
    if report["manifest"]:
        emit_line(f"manifest: {_summary_text(report['manifest'])}")
    emit_line("usable:   " + ("yes" if report["ok"] else "no\n" + "\n".join(f"  - {p}" for p in report["problems"])))
    return EXIT_OK


def _inspect(folder, arch) -> dict:
    arch = arch if arch is not None else loader.gpu_arch()
    path = loader.artifact_dir(folder)
    manifest, problems = loader.check(path, arch)
    return {
        "ok": not problems,
        "folder": str(path),
        "exists": path.is_dir(),
        "problems": problems,
        "node": {"arch": arch},
        "manifest": af.summary(manifest) if manifest is not None else None,
    }


def _summary_text(manifest: dict) -> str:
    return f"CUDA commit kernel {manifest['cuda']}, overlay {manifest['overlay_version']}, built {manifest['built_at']}"
