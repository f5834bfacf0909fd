"""Kernel stage, run INSIDE the image by the base's own Python during `docker build` (stage `kernels`).

Why it exists: the CUDA commit kernel is compiled ahead of time for sm_90 with NVRTC (the base's own, which
its CUDA torch installs), so a node never compiles it while serving. `RSO_KERNELS=build` (the default)
compiles it into OUT; `RSO_KERNELS=skip` builds nothing and says so (a base without NVRTC; the node then
commits with SGLang's own fold, compiled before serving, and reports it). Everything goes into a staging
folder STAGE that the final stage copies over /opt/replayssm-overlay/: STAGE/kernels-stage.json (what
happened; the image manifest embeds it) and, when built, STAGE/kernels/ (the artifact folder, which the
loader finds at its default /opt/replayssm-overlay/kernels, so the image needs no ENV of its own).

    kernels_stage.py --mode build|skip --stage DIR
"""

import argparse
import json
import os
import subprocess
import sys

# The AOT build command (`replayssm-overlay kernels build`, overlay/replayssm_overlay/aot/README.md)
BUILD_COMMAND = [sys.executable, "-m", "replayssm_overlay", "kernels", "build", "--out", "{out}"]
FINAL_DIR = "/opt/replayssm-overlay/kernels"  # where the final stage puts STAGE/kernels


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", required=True)
    parser.add_argument("--stage", required=True)
    args = parser.parse_args(argv)
    if args.mode not in ("build", "skip"):
        print(f"kernels stage: RSO_KERNELS must be `build` or `skip`, got {args.mode!r}", file=sys.stderr)
        return 2
    os.makedirs(args.stage, exist_ok=True)
    out = os.path.join(args.stage, "kernels")
    record = {"mode": args.mode, "dir": None}
    if args.mode == "skip":
        record["status"] = "skipped"
        record["detail"] = (
            "RSO_KERNELS=skip: no CUDA commit kernel compiled ahead of time; the node commits with "
            "SGLang's own fold, compiled before serving"
        )
    else:
        cmd = [part.format(out=out) for part in BUILD_COMMAND]
        print("kernels stage: " + " ".join(cmd), flush=True)
        returncode = subprocess.run(cmd).returncode
        if returncode != 0:
            print(
                f"kernels stage: the AOT build failed (exit {returncode}); see its message above. A base "
                "without NVRTC (nvidia-cuda-nvrtc, which CUDA builds of torch install) cannot build it: use "
                "RSO_KERNELS=skip (make build KERNELS=skip)",
                file=sys.stderr,
            )
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
