"""Workload prompts: the built-in sets per class, and user JSONL files that replace or extend them.

A prompts line is a JSON object: `id` (unique string), `class` (workload class: code, json, ...), and
either `prompt` (text) or `input_ids` (token ids); optional `max_new_tokens`. Any bad line is an error
that names the file and line number: a smoke run never proceeds on a partly read workload.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from .errors import SmokeEnvironmentError

BUILTIN = "builtin:prompts.jsonl"
CLASS_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
MAX_NEW_TOKENS_LIMIT = 4096


@dataclass(frozen=True)
class Prompt:
    id: str
    cls: str
    text: str | None
    input_ids: tuple[int, ...] | None
    max_new_tokens: int

    def request_input(self) -> dict:
        """The `text` or `input_ids` part of a /generate request."""
        return {"text": self.text} if self.text is not None else {"input_ids": list(self.input_ids)}


def _parse_line(source: str, lineno: int, line: str, default_max_new: int) -> Prompt:
    where = f"{source}:{lineno}"
    fix = 'each line must be like {"id": "code-1", "class": "code", "prompt": "...", "max_new_tokens": 128}'
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise SmokeEnvironmentError(f"{where}: not valid JSON ({exc})", fix) from None
    if not isinstance(obj, dict):
        raise SmokeEnvironmentError(f"{where}: expected a JSON object, got {type(obj).__name__}", fix)
    unknown = set(obj) - {"id", "class", "prompt", "input_ids", "max_new_tokens"}
    if unknown:
        raise SmokeEnvironmentError(f"{where}: unknown field(s) {sorted(unknown)}", fix)
    pid, cls = obj.get("id"), obj.get("class")
    if not isinstance(pid, str) or not pid:
        raise SmokeEnvironmentError(f"{where}: 'id' must be a non-empty string", fix)
    if not isinstance(cls, str) or not CLASS_RE.match(cls):
        raise SmokeEnvironmentError(f"{where}: 'class' must match {CLASS_RE.pattern} (got {cls!r})", fix)
    text, ids = obj.get("prompt"), obj.get("input_ids")
    if (text is None) == (ids is None):
        raise SmokeEnvironmentError(f"{where}: give exactly one of 'prompt' or 'input_ids'", fix)
    if text is not None and (not isinstance(text, str) or not text):
        raise SmokeEnvironmentError(f"{where}: 'prompt' must be a non-empty string", fix)
    if ids is not None and (
        not isinstance(ids, list) or not ids or not all(isinstance(t, int) and t >= 0 for t in ids)
    ):
        raise SmokeEnvironmentError(f"{where}: 'input_ids' must be a non-empty list of token ids", fix)
    max_new = obj.get("max_new_tokens", default_max_new)
    if not isinstance(max_new, int) or isinstance(max_new, bool) or not 2 <= max_new <= MAX_NEW_TOKENS_LIMIT:
        raise SmokeEnvironmentError(f"{where}: 'max_new_tokens' must be an integer in [2, {MAX_NEW_TOKENS_LIMIT}]", fix)
    return Prompt(pid, cls, text, tuple(ids) if ids is not None else None, max_new)


def parse_prompts(source: str, content: str, default_max_new: int) -> list[Prompt]:
    prompts = []
    for lineno, line in enumerate(content.splitlines(), start=1):
        if line.strip():
            prompts.append(_parse_line(source, lineno, line, default_max_new))
    return prompts


def _read(path: str) -> str:
    if path == BUILTIN:
        return resources.files(__package__).joinpath("data", "prompts.jsonl").read_text(encoding="utf-8")
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SmokeEnvironmentError(f"cannot read prompts file {path}: {exc}", "check the --prompts path") from None


def load_prompts(
    replace: list[str] | None, extend: list[str] | None, default_max_new: int, classes: list[str] | None = None
) -> list[Prompt]:
    """Built-in prompts (or the --prompts files instead), plus --add-prompts files, optionally filtered."""
    sources = (replace or [BUILTIN]) + (extend or [])
    prompts: list[Prompt] = []
    seen: dict[str, str] = {}
    for source in sources:
        for prompt in parse_prompts(source, _read(source), default_max_new):
            if prompt.id in seen:
                raise SmokeEnvironmentError(
                    f"{source}: prompt id {prompt.id!r} already used in {seen[prompt.id]}", "make prompt ids unique"
                )
            seen[prompt.id] = source
            prompts.append(prompt)
    if classes:
        unknown = set(classes) - {p.cls for p in prompts}
        if unknown:
            raise SmokeEnvironmentError(
                f"--classes names classes with no prompts: {sorted(unknown)}",
                f"choose among {sorted({p.cls for p in prompts})}",
            )
        prompts = [p for p in prompts if p.cls in classes]
    if not prompts:
        raise SmokeEnvironmentError(f"no prompts in {', '.join(sources)}", "give a JSONL file with at least one prompt")
    return prompts
