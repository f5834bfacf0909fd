"""`replayssm-overlay kernels build`: the ahead-of-time build's command, added to the `kernels` group.

`add_build(sub, common)` is handed to `replayssm_overlay.kernels.cli.register` by the overlay's command
line, so the node-side `kernels check|status` never import the build. The handler follows the overlay's
convention (`handler=callable(args) -> exit code`); JSON schema in `kernels --help`.
"""

from __future__ import annotations

import sys

from replayssm_overlay.aot import build as aot
from replayssm_overlay.cliutil import EXIT_OK, HelpFormatter, print_json
from replayssm_overlay.errors import OverlayError


def add_build(sub, common) -> None:
    """Add `build` to the `kernels` group's subparsers; `common` is the group's parent parser (--json)."""
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
                                       for n, p in aot.PRESETS.items())
        + "\n\nexamples:\n  replayssm-overlay kernels build --out build/kernels-sm90\n"
        "  replayssm-overlay kernels build --out DIR --model qwen3.5-35b-a3b --tp 1 2",
        formatter_class=HelpFormatter,
    )
    build.add_argument("--out", required=True, metavar="DIR", help="artifact folder to write (created or replaced)")
    build.add_argument("--model", action="append", choices=sorted(aot.PRESETS), metavar="PRESET",
                       help=f"model preset, repeatable (choices: {', '.join(sorted(aot.PRESETS))}; default: all)")
    for dim, meaning in (("hv", "value heads"), ("h", "key heads"), ("k", "key head dim"), ("v", "value head dim")):
        build.add_argument(f"--{dim}", type=int, metavar="N", help=f"GDN {meaning} of the whole model (default: from --model)")
    build.add_argument("--window", type=int, nargs="+", metavar="T", help="verify windows (default: 2 to 16)")
    build.add_argument("--tp", type=int, nargs="+", metavar="N", help="tensor-parallel sizes (default: 1 2 4 8)")
    build.add_argument("--provider", metavar="MODULE:FUNCTION",
                       help="function listing the specializations (default: the overlay's fold kernel)")
    build.set_defaults(handler=_build)


def _build(args) -> int:
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
        print_json(result)
    return EXIT_OK
