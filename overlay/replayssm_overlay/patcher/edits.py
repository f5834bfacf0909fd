"""Turning a pristine target file into the patched one and back, on bytes.

The patch only inserts whole lines, each ending in `MARKER`; so a file is patched iff it has marked
lines, and dropping the marked lines restores the pristine bytes exactly (line terminators included).
`patch_source` checks that round trip and that the result parses and compiles before anyone writes it.
"""

import ast

from replayssm_overlay.patcher.hookpoints import FINDERS, HookPointError

MARKER = b"# replayssm-overlay"
_MARK_SUFFIX = b"  " + MARKER


def is_marked(line: bytes) -> bool:
    return line.rstrip(b"\r\n").endswith(_MARK_SUFFIX)


def has_marks(data: bytes) -> bool:
    return any(is_marked(line) for line in data.splitlines(keepends=True))


def unpatch_source(data: bytes) -> bytes:
    """`data` without the overlay's marked lines (the pristine bytes, if `data` is our patch)."""
    return b"".join(line for line in data.splitlines(keepends=True) if not is_marked(line))


def patch_source(relpath: str, data: bytes) -> bytes:
    """The patched bytes of target file `relpath` whose pristine bytes are `data`.

    Raises HookPointError if `data` already carries overlay lines, does not parse, or lacks the hook
    point; the message says what was looked for.
    """
    if has_marks(data):
        raise HookPointError("it already carries replayssm-overlay lines")
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError) as err:
        raise HookPointError(f"it does not parse as Python ({err})") from err
    lines = data.splitlines(keepends=True)
    insertions = {ins.before_line: ins for ins in FINDERS[relpath](tree, lines)}
    out = []
    for number, line in enumerate(lines, start=1):
        if number in insertions:
            newline = _terminator(line) or _terminator(lines[number - 2] if number > 1 else b"") or b"\n"
            out.extend(code + _MARK_SUFFIX + newline for code in insertions[number].lines)
        out.append(line)
    if max(insertions) > len(lines):
        raise HookPointError("a hook point lies past the end of the file")
    patched = b"".join(out)
    try:
        compile(ast.parse(patched), relpath, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as err:
        raise HookPointError(f"the patched file would not compile ({err})") from err
    if unpatch_source(patched) != data:
        raise HookPointError("removing the marked lines would not give back the pristine bytes")
    return patched


def _terminator(line: bytes) -> bytes:
    return line[len(line.rstrip(b"\r\n")) :]
