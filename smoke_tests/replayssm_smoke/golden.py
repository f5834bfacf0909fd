"""Golden files: greedy outputs recorded once (`--record FILE`), compared against later (`--golden FILE`).

Typically recorded from the same model served without speculation; a recording carries the prompt token
ids too, so a later run can tell a changed prompt or tokenizer (an error) from a changed output (a
parity finding).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from replayssm_overlay.cliutil import atomic_write

from .errors import SmokeEnvironmentError
from .prompts import Prompt
from .runner import Generation

SCHEMA = "replayssm-smoke-golden/1"


def write(path: str, server: dict, gens: list[Generation]) -> None:
    doc = {
        "schema": SCHEMA,
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "server": server,
        "prompts": {
            g.prompt.id: {
                "class": g.prompt.cls,
                "max_new_tokens": g.prompt.max_new_tokens,
                "prompt_token_ids": g.prompt_ids,
                "output_ids": g.output_ids,
            }
            for g in gens
        },
    }
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, json.dumps(doc))


def load(path: str, prompts: list[Prompt]) -> tuple[dict, dict[str, tuple[list[int], list[int]]]]:
    """The recording's server summary and, per prompt id, (prompt token ids, output ids)."""
    fix = "record it again: replayssm-smoke --target REFERENCE_URL --record FILE"
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SmokeEnvironmentError(f"cannot read golden file {path}: {exc}", fix) from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("prompts"), dict):
        raise SmokeEnvironmentError(f"{path} is not a {SCHEMA} file", fix)
    out = {}
    for p in prompts:
        entry = doc["prompts"].get(p.id)
        if not isinstance(entry, dict):
            raise SmokeEnvironmentError(f"{path} has no recording for prompt {p.id!r}", fix)
        if entry.get("max_new_tokens") != p.max_new_tokens:
            raise SmokeEnvironmentError(
                f"{path}: prompt {p.id!r} was recorded with max_new_tokens {entry.get('max_new_tokens')}, "
                f"this run uses {p.max_new_tokens}",
                fix,
            )
        ids, outs = entry.get("prompt_token_ids"), entry.get("output_ids")
        if not isinstance(ids, list) or not isinstance(outs, list):
            raise SmokeEnvironmentError(f"{path}: prompt {p.id!r} lacks prompt_token_ids/output_ids", fix)
        out[p.id] = (ids, outs)
    return doc.get("server") or {}, out
