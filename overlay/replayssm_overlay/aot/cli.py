"""`replayssm-overlay kernels build`: the ahead-of-time build's command, added to the `kernels` group.

`add_build(sub, common)` is handed to `replayssm_overlay.kernels.cli.register` by the overlay's command
line, so the node-side `kernels check|status` never import the build. The handler follows the overlay's
convention (`handler=callable(args) -> exit code`); JSON schema in `kernels --help`.
"""

from __future__ import annotations

import sys

from replayssm_overlay.aot import build as aot
from replayssm_overlay.cliutil import EXIT_OK, HelpFormatter, print_json


def add_build(sub, common) -> None:
    """Add `build` to the `kernels` group's subparsers; `common` is the group's parent parser (--json)."""
    build = sub.add_parser(
        "build",
        parents=[common],
        help="compile the CUDA commit kernel for sm_90 into a folder (idempotent, no GPU needed)",
        description="Compile the CUDA commit kernel (gdn_fold.cu) for sm_90 with NVRTC (PyPI nvidia-cuda-nvrtc, "
        "which CUDA builds of torch install) and write it with a manifest (NVRTC version, registers per entry "
        "point, sha256 of every file). One binary covers every model, tensor-parallel size and window the "
        "kernel takes. Re-running with the same overlay, source and NVRTC rebuilds nothing; the folder is "
        "replaced only when the whole build succeeded. Without NVRTC nothing is written (exit 2).",
        epilog="examples:\n  replayssm-overlay kernels build --out build/kernels-sm90\n"
        "  replayssm-overlay kernels build --out /opt/replayssm-overlay/kernels --json",
        formatter_class=HelpFormatter,
    )
    build.add_argument("--out", required=True, metavar="DIR", help="artifact folder to write (created or replaced)")
    build.set_defaults(handler=_build)


def _build(args) -> int:
    progress = (lambda line: print(line, file=sys.stderr, flush=True)) if args.json else print
    result = aot.build(args.out, progress=progress)
    result.update(ok=True)
    if args.json:
        print_json(result)
    return EXIT_OK
