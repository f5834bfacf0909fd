"""`replayssm-overlay kernels ...`: build the fold kernels ahead of time, check a node against them, status.

`register(subparsers)` adds the group to the overlay's command line (each subcommand's defaults carry
`handler=callable(args) -> exit code`, the convention of `replayssm_overlay.cli`, which runs it). Exit codes: 0 ok; 1 a check failed (`check`:
this node cannot use the artifacts); 2 usage error, environment error or refusal (nothing written).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from replayssm_overlay.errors import OverlayError
from replayssm_overlay.kernels import aot_manifest as am
from replayssm_overlay.kernels import loader

SCHEMA_HELP = f"""\
JSON (--json): one object on stdout.
  build:  ok, out, up_to_date, compiled, reused, modules, specializations
  check:  ok, folder, problems[], node{{triton, python, platform, arch}}, manifest{{builder, target,
          built_at, kernels{{name: number of specializations}}}}
  status: folder, folder_source (argument | {loader.ENV_DIR} | default), exists, usable, problems[],
          node, manifest (as in check, or null)
Artifact folder: --dir/DIR, else ${loader.ENV_DIR}, else {loader.DEFAULT_DIR}. Manifest schema {am.SCHEMA}.
"""


def register(subparsers) -> argparse.ArgumentParser:
    """Add `kernels build|check|status` to an argparse subparsers object; returns the group's parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print one JSON object on stdout instead of text")

    group = subparsers.add_parser(
        "kernels",
        help="fold kernels compiled ahead of time for sm_90: build, check, status",
        description="The overlay's fold kernels are compiled ahead of time for Hopper (sm_90) so a serving "
        "node never JIT-compiles them. `build` makes the artifact folder (no GPU needed), `check` says "
        "whether this node can use one, `status` shows what the commit path would find.",
        epilog=SCHEMA_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    group.set_defaults(handler=lambda args: _usage(group))
    sub = group.add_subparsers(dest="kernels_command", metavar="SUBCOMMAND")

    build = sub.add_parser(
        "build",
        parents=[common],
        help="compile every fold specialization for sm_90 into a folder (idempotent, no GPU needed)",
        description="Compile the fold kernel specializations for sm_90 with the Triton of this Python, "
        "build Triton's launcher modules with gcc, and write them with a manifest (Triton version, Python "
        "tag, arch, sha256 of every file). Re-running with the same inputs rebuilds nothing; the folder is "
        "replaced only when the whole build succeeded. Shapes: --model presets (default: all), or explicit "
        "--hv/--h/--k/--v; every --tp size must divide HV and H (each rank holds HV/tp and H/tp heads).",
        epilog="presets: " + "; ".join(f"{n}: HV={p.hv} H={p.h} K={p.k} V={p.v} ({p.source})"
                                       for n, p in _presets().items()),
    )
    build.add_argument("--out", required=True, metavar="DIR", help="artifact folder to write (created or replaced)")
    build.add_argument("--model", action="append", choices=sorted(_presets()), metavar="PRESET",
                       help=f"model preset, repeatable (choices: {', '.join(sorted(_presets()))}; default: all)")
    for dim, meaning in (("hv", "value heads"), ("h", "key heads"), ("k", "key head dim"), ("v", "value head dim")):
        build.add_argument(f"--{dim}", type=int, metavar="N", help=f"GDN {meaning} of the whole model (instead of --model)")
    build.add_argument("--window", type=int, nargs="+", metavar="T", help="verify windows (default: 8 16)")
    build.add_argument("--tp", type=int, nargs="+", metavar="N", help="tensor-parallel sizes (default: 1 2 4 8)")
    build.add_argument("--provider", metavar="MODULE:FUNCTION",
                       help="function listing the specializations (default: the overlay's fold kernel)")
    build.set_defaults(handler=_build)

    check = sub.add_parser(
        "check",
        parents=[common],
        help="does this node match an artifact folder? (exit 1 if not)",
        description="Check the folder's manifest against this node: Triton version, Python tag, platform, "
        "GPU compute capability, and the sha256 of every file. Exit 0 if the fold can use it, 1 if not "
        "(every reason listed).",
    )
    check.add_argument("dir", metavar="DIR", help="artifact folder")
    check.add_argument("--arch", type=int, metavar="SM", help="check against this compute capability (e.g. 90) "
                       "instead of the visible GPU's, for machines without one")
    check.set_defaults(handler=_check)

    status = sub.add_parser(
        "status",
        parents=[common],
        help="which artifact folder the commit path would use, and whether it can",
        description="Show the artifact folder the loader would use, where that choice came from, its "
        "manifest and whether this node can use it. Always exits 0 unless the arguments are wrong.",
    )
    status.add_argument("--dir", metavar="DIR", help=f"folder to inspect (default: ${loader.ENV_DIR} or {loader.DEFAULT_DIR})")
    status.add_argument("--arch", type=int, metavar="SM", help="as for check")
    status.set_defaults(handler=_status)
    return group


def _presets() -> dict:
    from replayssm_overlay.kernels.aot import PRESETS

    return PRESETS


def _usage(parser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _build(args) -> int:
    from replayssm_overlay.kernels import aot

    dims = [args.hv, args.h, args.k, args.v]
    if any(d is not None for d in dims):
        if None in dims or args.model:
            raise OverlayError("give either --model or all of --hv --h --k --v", "see --help")
        presets = [aot.ModelPreset(*dims, source="command line")]
    else:
        presets = [aot.PRESETS[name] for name in (args.model or sorted(aot.PRESETS))]
    shapes = list(dict.fromkeys(s for p in presets for s in aot.shapes_for(p, args.tp or aot.DEFAULT_TP_SIZES)))
    provider = aot.load_provider(args.provider or aot.DEFAULT_PROVIDER)
    progress = (lambda line: print(line, file=sys.stderr, flush=True)) if args.json else print
    specs = aot.collect(provider, shapes, args.window or aot.DEFAULT_WINDOWS)
    result = aot.build(args.out, specs, progress=progress)
    result.update(ok=True, specializations=len(specs))
    if args.json:
        _print_json(result)
    return 0


def _check(args) -> int:
    report = _inspect(args.dir, args.arch)
    if args.json:
        _print_json({k: report[k] for k in ("ok", "folder", "problems", "node", "manifest")})
    elif report["ok"]:
        print(f"OK: this node can use the prebuilt kernels in {report['folder']} ({_summary_text(report['manifest'])})")
    else:
        print(f"REFUSED: {report['folder']}\n" + "\n".join(f"  - {p}" for p in report["problems"]))
    return 0 if report["ok"] else 1


def _status(args) -> int:
    source = "argument" if args.dir else (loader.ENV_DIR if os.environ.get(loader.ENV_DIR) else "default")
    report = _inspect(args.dir, args.arch)
    payload = {"folder": report["folder"], "folder_source": source, "exists": report["exists"],
               "usable": report["ok"], "problems": report["problems"], "node": report["node"],
               "manifest": report["manifest"]}
    if args.json:
        _print_json(payload)
        return 0
    node = report["node"]
    print(f"folder:   {report['folder']} (from {source}){'' if report['exists'] else ' - does not exist'}")
    print(f"node:     Triton {node['triton']}, {node['python']}, {node['platform']}, "
          f"GPU {'sm_%s' % node['arch'] if node['arch'] else 'none visible'}")
    if report["manifest"]:
        print(f"manifest: {_summary_text(report['manifest'])}")
    print("usable:   " + ("yes" if report["ok"] else "no\n" + "\n".join(f"  - {p}" for p in report["problems"])))
    return 0


def _inspect(folder, arch) -> dict:
    facts = loader.NodeFacts.current(arch)
    path = loader.artifact_dir(folder)
    manifest, problems = loader.check(path, facts)
    return {"ok": not problems, "folder": str(path), "exists": path.is_dir(), "problems": problems,
            "node": {"triton": facts.triton, "python": facts.python, "platform": facts.platform, "arch": facts.arch},
            "manifest": am.summary(manifest) if manifest is not None else None}


def _summary_text(manifest: dict) -> str:
    builder = manifest["builder"] or {}
    kernels = ", ".join(f"{name} x{count}" for name, count in manifest["kernels"].items())
    return (f"Triton {builder.get('triton')}, {builder.get('python')}, sm_{manifest['target'].get('arch')}, "
            f"built {manifest['built_at']}: {kernels}")


def _print_json(payload: dict) -> None:
    print(json.dumps(payload, indent=2, sort_keys=True))
