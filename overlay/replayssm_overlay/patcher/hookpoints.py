"""Where the overlay's lines go in each target file, found by structure (Python `ast`), never by line
numbers or surrounding text, and what those lines are (the templates below).

Each finder takes the parsed pristine file and its lines (bytes, terminators kept) and returns the
`Insertion`s to make: whole new lines, placed before an existing line, at the indentation of the code
they join. Only whole lines are inserted, so every inserted line is ours alone, carries the marker
comment, and removing the marked lines gives back the pristine bytes exactly (see `edits.py`).

Every patched file gets the same module-level prologue (`prologue_lines`), before its hooked class: it
imports `replayssm_overlay.hooks` once, and if that fails it sets `_rso_hooks = None` and logs one error
line saying so and how to fix it. Every call site tests `_rso_hooks` first, so with the package missing
or broken the patched file runs exactly SGLang's own code. The hook points (the hook ABI and the exact
inserted lines: `replayssm_overlay/hooks/README.md`):
  * configurator: in `KVCacheConfigurator._build_hybrid_req_pool`, the `if` whose body only raises the
    KDA-only error. Its test `T` (a parenthesised multi-line condition) becomes
    `(T) and (_rso_hooks is None or _rso_hooks.keep_kda_only_guard(self))`, so SGLang's own condition is
    evaluated first and the hook is asked only when stock SGLang is about to refuse.
  * configurator: first in the bodies of `_build_hybrid_mamba_decode_req_pool` (PD decode) and
    `_init_unified_mamba_pools` (`--enable-unified-memory`), which build pools without that guard:
    `refuse_unserved_pool(self, <builder>)`.
  * DFLASH: first in the body of `DFlashWorkerV2._update_target_mamba_state_after_verify` (0.5.19's
    signature, or 0.5.20's keyword-only one that adds `seq_lens_post_verify`, passed on by name).
  * DSPARK: first in the body of `DSparkWorkerV2._commit_target_mamba_states_after_verify`.
A release whose files differ gets its own finder built from the same templates (a different class,
method or parameter list is an argument, not a new template).
"""

import ast
from dataclasses import dataclass

from replayssm_overlay import WHEEL_PATTERN
from replayssm_overlay.errors import OverlayError
from replayssm_overlay.patcher.releases import CONFIGURATOR, DFLASH_WORKER, DSPARK_WORKER

HOOKS = b"_rso_hooks"  # the module-level name every inserted call site reads (None: the package failed)
UNAVAILABLE_MESSAGE = (  # one Python string literal, %r is the import error
    b'"replayssm-overlay: the replayssm_overlay package is not importable (%r), so this file runs '
    b"SGLang's own code (DFLASH/DSPARK with --enable-linear-replayssm-spec on GDN models is refused as "
    b"in stock SGLang); fix: install the replayssm-overlay wheel into this Python "
    b"(pip install --no-deps " + WHEEL_PATTERN.encode() + b'), or reinstall sglang to drop the patch"'
)
GUARD_HOOK = b"(" + HOOKS + b" is None or " + HOOKS + b".keep_kda_only_guard(self))"
#: `KVCacheConfigurator` methods that build a pool without the KDA-only guard -> the builder name the
#: hook gets (`hooks.refuse_unserved_pool`).
UNGUARDED_POOL_BUILDERS = {
    "_build_hybrid_mamba_decode_req_pool": "pd_decode",
    "_init_unified_mamba_pools": "unified_memory",
}
# The guard is the `if` whose whole body raises an error whose message names one of these words
# (0.5.19 says "KDA (kimi_linear)", 0.5.23 only "KDA"); more than one such `if` is refused as ambiguous.
KDA_ERROR_WORDS = ("KDA", "kimi_linear")


class HookPointError(OverlayError):
    """The file's structure is not the one the overlay knows how to hook (says what was looked for)."""

    code = "hook-point-not-found"


@dataclass(frozen=True)
class Insertion:
    """New lines (code only: no marker, no line terminator) to put before 1-based line `before_line`."""

    before_line: int
    lines: tuple


def prologue_lines() -> tuple:
    """Module level: import the hooks once; on any failure `_rso_hooks = None` and one error line."""
    return (
        b"try:",
        b"    from replayssm_overlay import hooks as " + HOOKS,
        b"except Exception as _rso_error:",
        b"    " + HOOKS + b" = None",
        b"    __import__('logging').getLogger(__name__).error(" + UNAVAILABLE_MESSAGE + b", _rso_error)",
    )


def commit_call_lines(indent: bytes, unit: bytes, hook_name: str, call_args: str) -> tuple:
    """First in a commit method: hand its arguments to `hooks.<hook_name>`; return if it committed."""
    call = f"{HOOKS.decode()}.{hook_name}({call_args})".encode()
    return (indent + b"if " + HOOKS + b" is not None and " + call + b":", indent + unit + b"return")


def pool_check_lines(indent: bytes, unit: bytes, builder: str) -> tuple:
    """First in a pool builder without the KDA-only guard: let the overlay refuse what it does not serve."""
    return (
        indent + b"if " + HOOKS + b" is not None:",
        indent + unit + HOOKS + f'.refuse_unserved_pool(self, "{builder}")'.encode(),
    )


def prologue_insertion(tree: ast.Module, lines: list, class_name: str) -> Insertion:
    """The prologue, before the top-level class `class_name` (and its decorators)."""
    cls = _class(tree, class_name)
    _own_line_indent(lines, cls, f"class {class_name}")
    if cls.col_offset:
        raise HookPointError(f"class {class_name} is not at module level")
    return Insertion(_first_line(cls), prologue_lines())


def configurator_insertions(tree: ast.Module, lines: list) -> list:
    method = _method(tree, "KVCacheConfigurator", "_build_hybrid_req_pool")
    guards = [node for node in ast.walk(method) if isinstance(node, ast.If) and _raises_kda_only_error(node)]
    if len(guards) != 1:
        raise HookPointError(
            f"KVCacheConfigurator._build_hybrid_req_pool: expected exactly one `if` whose body raises the "
            f"KDA-only error (a message naming {' or '.join(KDA_ERROR_WORDS)}), found {len(guards)}"
        )
    guard = guards[0]
    test = guard.test
    _own_line_indent(lines, guard, "the KDA-only guard `if`")
    test_indent = lines[test.lineno - 1][: test.col_offset]
    after_test = lines[test.end_lineno - 1][test.end_col_offset :].strip()
    if test.lineno == guard.lineno or test_indent.strip() or (after_test and not after_test.startswith(b"#")):
        raise HookPointError(
            "KVCacheConfigurator._build_hybrid_req_pool: the KDA-only guard's condition is not laid out "
            "on lines of its own inside the `if (...)` brackets, the layout this patcher edits"
        )
    insertions = [
        prologue_insertion(tree, lines, "KVCacheConfigurator"),
        Insertion(test.lineno, (test_indent + b"(",)),
        Insertion(test.end_lineno + 1, (test_indent + b") and " + GUARD_HOOK,)),
    ]
    for method_name, builder in UNGUARDED_POOL_BUILDERS.items():
        first, indent, unit = _body_start(tree, lines, "KVCacheConfigurator", method_name)
        insertions.append(Insertion(_first_line(first), pool_check_lines(indent, unit, builder)))
    return insertions


def commit_hook_insertions(tree, lines, class_name, method_name, signatures, hook_name) -> list:
    """Lines that hand the method's arguments to `hooks.<hook_name>` and return if it committed.
    `signatures`: the method's parameter names in each known release -> the hook call's arguments."""
    method = _method(tree, class_name, method_name)
    args = method.args
    names = tuple(a.arg for a in args.posonlyargs + args.args + args.kwonlyargs)
    if names not in signatures or args.vararg or args.kwarg:
        raise HookPointError(
            f"{class_name}.{method_name}: expected parameters "
            + " or ".join(f"({', '.join(known)})" for known in signatures)
            + f", found ({_signature(args)})"
        )
    first, indent, unit = _body_start(tree, lines, class_name, method_name)
    return [
        prologue_insertion(tree, lines, class_name),
        Insertion(_first_line(first), commit_call_lines(indent, unit, hook_name, signatures[names])),
    ]


def _body_start(tree, lines, class_name, method_name):
    """(first statement after the docstring, its indentation, one indentation unit) of the method."""
    method = _method(tree, class_name, method_name)
    body = method.body[1:] if _is_docstring(method.body[0]) else method.body
    if not body:
        raise HookPointError(f"{class_name}.{method_name}: the method has no statement to insert the hook before")
    first = body[0]
    indent = _own_line_indent(lines, first, f"the first statement of {class_name}.{method_name}")
    def_indent = _own_line_indent(lines, method, f"def {method_name}")
    unit = indent[len(def_indent) :]
    if not indent.startswith(def_indent) or not unit:
        raise HookPointError(f"{class_name}.{method_name}: its body is not indented below its `def`")
    return first, indent, unit


def dflash_insertions(tree, lines):
    return commit_hook_insertions(
        tree,
        lines,
        "DFlashWorkerV2",
        "_update_target_mamba_state_after_verify",
        {
            # 0.5.19: no post-verify lengths (the overlay computes pre + commit lengths)
            ("self", "batch", "seq_lens_pre_verify", "commit_lens"): "self, batch, seq_lens_pre_verify, commit_lens",
            # 0.5.20 on: keyword-only, with the post-verify lengths
            ("self", "batch", "seq_lens_pre_verify", "seq_lens_post_verify", "commit_lens"): (
                "self, batch, seq_lens_pre_verify, commit_lens, seq_lens_post_verify=seq_lens_post_verify"
            ),
        },
        "dflash_commit",
    )


def dspark_insertions(tree, lines):
    return commit_hook_insertions(
        tree,
        lines,
        "DSparkWorkerV2",
        "_commit_target_mamba_states_after_verify",
        {
            ("self", "batch", "seq_lens_pre_verify", "seq_lens_post_verify", "commit_lens"): (
                "self, batch, seq_lens_pre_verify, seq_lens_post_verify, commit_lens"
            ),
        },
        "dspark_commit",
    )


#: target file -> its finder
FINDERS = {
    CONFIGURATOR: configurator_insertions,
    DFLASH_WORKER: dflash_insertions,
    DSPARK_WORKER: dspark_insertions,
}


def _class(tree: ast.Module, class_name: str) -> ast.ClassDef:
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name]
    if len(classes) != 1:
        raise HookPointError(f"expected one top-level class {class_name}, found {len(classes)}")
    return classes[0]


def _method(tree: ast.Module, class_name: str, method_name: str):
    methods = [
        n
        for n in _class(tree, class_name).body
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == method_name
    ]
    if len(methods) != 1:
        raise HookPointError(f"expected one method {class_name}.{method_name}, found {len(methods)}")
    return methods[0]


def _raises_kda_only_error(node: ast.If) -> bool:
    if len(node.body) != 1 or not isinstance(node.body[0], ast.Raise):
        return False
    exc = node.body[0].exc
    if not isinstance(exc, ast.Call):
        return False
    text = " ".join(c.value for c in ast.walk(exc) if isinstance(c, ast.Constant) and isinstance(c.value, str))
    return any(word in text for word in KDA_ERROR_WORDS)


def _signature(args: ast.arguments) -> str:
    """The parameter names as written (`self, *, batch, ...`), annotations and defaults left out."""
    parts = [a.arg for a in args.posonlyargs] + (["/"] if args.posonlyargs else []) + [a.arg for a in args.args]
    if args.vararg:
        parts.append("*" + args.vararg.arg)
    elif args.kwonlyargs:
        parts.append("*")
    parts += [a.arg for a in args.kwonlyargs]
    if args.kwarg:
        parts.append("**" + args.kwarg.arg)
    return ", ".join(parts)


def _is_docstring(stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _first_line(stmt) -> int:
    return min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])


def _own_line_indent(lines: list, stmt, what: str) -> bytes:
    """The whitespace before `stmt` (or its first decorator) on its first line; refuses a statement that
    shares its first line with other code."""
    lineno = _first_line(stmt)
    line = lines[lineno - 1]
    indent = line[: len(line) - len(line.lstrip(b" \t"))]
    starts_here = line[len(indent) :].startswith(b"@") if lineno != stmt.lineno else stmt.col_offset == len(indent)
    if not starts_here:
        raise HookPointError(f"{what} does not start its own line")
    return indent
