"""Kernel stage, run INSIDE the image by the base's own Python during `docker build` (stage `kernels`).

Why it exists: the fold kernels are compiled ahead of time for sm_90 with the base's own Triton, so a
node never JIT-compiles them while serving. `RSO_KERNELS=build` (the default) compiles them into OUT;
`RSO_KERNELS=skip` builds none and says so (bases without Triton; the overlay then JIT-compiles at first
use and reports it). `--model`, `--window` and `--tp` narrow the set (CI builds one small specialization
set; an empty `--window`/`--tp` keeps the kernels CLI's defaults). Everything goes into a staging folder
STAGE that the final stage copies over /opt/replayssm-overlay/: STAGE/kernels-stage.json (what happened; the image manifest
embeds it) and, when built, STAGE/kernels/ (the artifact folder, which the loader finds at its default
/opt/replayssm-overlay/kernels, so the image needs no ENV of its own).

    kernels_stage.py --mode build|skip --stage DIR --model all|PRESET[,PRESET...] [--window T,...] [--tp N,...]
"""

import argparse
import json
import os
import subprocess
import sys

# The AOT build command (`replayssm-overlay kernels build`, overlay/replayssm_overlay/aot/README.md);
# one `--model PRESET` per preset in RSO_KERNEL_MODEL, none for `all` (the command builds every preset);
# `--window T...` and `--tp N...` from RSO_KERNEL_WINDOW / RSO_KERNEL_TP when set.
BUILD_COMMAND = [sys.executable, "-m", "replayssm_overlay", "kernels", "build", "--out", "{out}"]
FINAL_DIR = "/opt/replayssm-overlay/kernels"  # where the final stage puts STAGE/kernels


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", required=True)
    parser.add_argument("--stage", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--window", default="", help="verify windows, comma-separated (empty: the CLI's default)")
    parser.add_argument("--tp", default="", help="tensor-parallel sizes, comma-separated (empty: the CLI's default)")
    args = parser.parse_args(argv)
    if args.mode not in ("build", "skip"):
        print(f"kernels stage: RSO_KERNELS must be `build` or `skip`, got {args.mode!r}", file=sys.stderr)
        return 2
    os.makedirs(args.stage, exist_ok=True)
    out = os.path.join(args.stage, "kernels")
    record = {"mode": args.mode, "model": args.model, "window": args.window, "tp": args.tp, "dir": None}
    if args.mode == "skip":
        record["status"] = "skipped"
        record["detail"] = "RSO_KERNELS=skip: no kernels compiled ahead of time; the fold kernels JIT-compile at first use"
    else:
        models = [] if args.model == "all" else args.model.split(",")
        cmd = [part.format(out=out) for part in BUILD_COMMAND] + [a for m in models for a in ("--model", m)]
        for flag, values in (("--window", args.window), ("--tp", args.tp)):
            if values:
                cmd += [flag, *values.split(",")]
        print("kernels stage: " + " ".join(cmd), flush=True)
        returncode = subprocess.run(cmd).returncode
        if returncode != 0:
            print(f"kernels stage: the AOT build failed (exit {returncode}); see its message above. A base "
                  "without Triton cannot build them: use RSO_KERNELS=skip (make build KERNELS=skip)",
                  file=sys.stderr)
            return 1
        record["status"] = "built"
        record["detail"] = "compiled ahead of time: " + " ".join(cmd)
        record["dir"] = FINAL_DIR
    with open(os.path.join(args.stage, "kernels-stage.json"), "w") as handle:
        json.dump(record, handle, indent=2, sort_keys=True)
        handle.write("\n")
    print(f"kernels stage: {record['status']}: {record['detail']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
