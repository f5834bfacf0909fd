"""Run every test of the given paths by itself, each in its own pytest process, and list those that fail
alone: a test that passes only after another one relied on it (its fixtures must build what it reads).

Why a script: the rollout modules are too slow to run this on every pull request (each run builds the
module's fleet again), so the release workflow runs it once per release, over each deploy module.

    python3 scripts/tests_alone.py tests/deploy/test_watch.py [PYTEST ARGS after --]

Exit 0 if every test passed alone (skips count as passed), 1 if one failed, 2 if nothing was collected.
"""

from __future__ import annotations

import subprocess
import sys


def collected(paths: list, python: str) -> list:
    """The test ids pytest collects from `paths`."""
    listing = subprocess.run(
        [python, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *paths],
        capture_output=True,
        text=True,
    )
    return [line.strip() for line in listing.stdout.splitlines() if "::" in line and not line.startswith(" ")]


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    paths, extra = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    python = sys.executable
    tests = collected(paths, python)
    if not tests:
        print(f"tests_alone: no test collected from {' '.join(paths)}", file=sys.stderr)
        return 2
    failed = []
    for number, test in enumerate(tests, 1):
        done = subprocess.run(
            [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra, test], capture_output=True, text=True
        )
        outcome = "passed" if done.returncode == 0 else f"FAILED (exit {done.returncode})"
        print(f"[{number}/{len(tests)}] {test}: {outcome}", flush=True)
        if done.returncode != 0:
            failed.append(test)
            print(done.stdout[-3000:], flush=True)
    print(
        f"tests_alone: {len(tests) - len(failed)} of {len(tests)} passed alone"
        + (f"; failed alone: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
