"""Kernel stage, run INSIDE the image by the base's own Python during `docker build` (stage `kernels`).

Why it exists: the fold kernels are compiled ahead of time for sm_90 with the base's own Triton, so a
node never JIT-compiles them while serving. `RSO_KERNELS=build` (the default) compiles them into OUT;
`RSO_KERNELS=skip` builds none and says so (bases without Triton, like the CI stand-in; the overlay then
JIT-compiles at first use and reports it). Either way OUT/kernels-stage.json records what happened, and
the image manifest copies it.

    kernels_stage.py --mode build|skip --out DIR --model PRESET
"""

import argparse
import json
import os
import subprocess
import sys

# The AOT build command (issue C). Until `replayssm-overlay kernels build` lands, `build` is a no-op that
# records "not built (pending)"; swapping in the real command is this one line:
#   BUILD_COMMAND = [sys.executable, "-m", "replayssm_overlay", "kernels", "build", "--out", "{out}", "--model", "{model}"]
BUILD_COMMAND = None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", required=True)
    args = parser.parse_args(argv)
    if args.mode not in ("build", "skip"):
        print(f"kernels stage: RSO_KERNELS must be `build` or `skip`, got {args.mode!r}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    record = {"mode": args.mode, "model": args.model, "out": args.out}
    if args.mode == "skip":
        record["status"] = "skipped"
        record["detail"] = "RSO_KERNELS=skip: no kernels compiled ahead of time; the fold kernels JIT-compile at first use"
    elif BUILD_COMMAND is None:
        record["status"] = "pending"
        record["detail"] = "kernels: not built (pending): the AOT build command has not landed yet"
    else:
        cmd = [part.format(out=args.out, model=args.model) for part in BUILD_COMMAND]
        print("kernels stage: " + " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        record["status"] = "built"
        record["detail"] = "compiled ahead of time: " + " ".join(cmd)
    with open(os.path.join(args.out, "kernels-stage.json"), "w") as handle:
        json.dump(record, handle, indent=2, sort_keys=True)
        handle.write("\n")
    print(f"kernels stage: {record['status']}: {record['detail']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
