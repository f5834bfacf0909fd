"""What `make demo` prints, shared by the 0.5.19 proof (`demo.py`) and the ring releases' (`ring_demo.py`):
the tables, the yes/NO cells, a configurator outcome in words, and how a result or an environment problem
ends the run (exit 0 every row as expected, 1 a row not as expected, 2 the environment).
"""

import json
import sys

from harness.configurator_probe import KDA_REFUSAL, RAGGED_REFUSAL
from replayssm_overlay.errors import OverlayError


def outcome(result: dict) -> str:
    """A configurator case's outcome: the pool it built, or the refusal (naming the known one)."""
    if result["outcome"] == "accepted":
        pool = result["pool"]
        if pool.get("replayssm_ring"):
            return "accepted (GDN ring pool)"
        if not pool["replayssm_spec_fold"]:
            return "accepted (ReplaySSM off)"
        return "accepted (KDA fold pool)" if pool["replayssm_is_kda"] else "accepted (GDN fold pool)"
    known = [key for key in (KDA_REFUSAL, RAGGED_REFUSAL) if key in result["message"]]
    return f"refused: {result['error']}" + (f" ({known[0]})" if known else "")


def table(headers: list, rows: list) -> str:
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, rows)])


def yes(flag: bool) -> str:
    return "yes" if flag else "NO"


def environment_problem(error: Exception, as_json: bool = False) -> int:
    """Say why the demo could not run (no SGLang, a release not installed, a failed probe, a refused patch);
    a refusal of the project's own (`OverlayError`) in its words, anything else with its type. With
    `as_json`, also one JSON object on stdout: `ok` false, `error`, `fix` and the refusal's `code` (null for
    an error that is not a refusal). Exit 2."""
    said = str(error) if isinstance(error, OverlayError) else f"{type(error).__name__}: {error}"
    print(f"demo: {said}", file=sys.stderr)
    if as_json:
        ours = isinstance(error, OverlayError)
        json.dump(
            {
                "ok": False,
                "error": error.what if ours else f"{type(error).__name__}: {error}",
                "fix": error.fix if ours else "",
                "code": error.code if ours else None,
            },
            sys.stdout,
            indent=2,
        )
        print()
    return 2


def finish(result: dict, as_json: bool, render) -> int:
    """Print `result` as JSON or as `render(result)`; exit 0 if every row is as expected, else 1."""
    if as_json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        print(render(result))
    return 0 if result["ok"] else 1
