"""The hook points are found by structure in the real 0.5.19 files, and the inserted lines are ours only."""

import ast
import re

import pytest

from replayssm_overlay.patcher.edits import MARKER, is_marked, patch_source, unpatch_source
from replayssm_overlay.patcher.hookpoints import HookPointError
from replayssm_overlay.patcher.releases import CONFIGURATOR, DFLASH_WORKER, DSPARK_WORKER, TARGET_FILES

HOOK_CALLS = {
    CONFIGURATOR: "keep_kda_only_guard",
    DFLASH_WORKER: "dflash_commit",
    DSPARK_WORKER: "dspark_commit",
}


# the module prologue (5 lines), then: configurator guard (2) + two pool checks (2 each); commits (2)
INSERTED_LINES = {CONFIGURATOR: 5 + 2 + 2 * 2, DFLASH_WORKER: 5 + 2, DSPARK_WORKER: 5 + 2}
PROLOGUE_IMPORT = "from replayssm_overlay import hooks as _rso_hooks"


def _prologue(tree: ast.Module, class_name: str) -> ast.Try:
    """The statement right before the top-level class `class_name`: the overlay's import block."""
    index = next(i for i, n in enumerate(tree.body) if isinstance(n, ast.ClassDef) and n.name == class_name)
    return tree.body[index - 1]


@pytest.mark.parametrize(
    "relpath,class_name",
    [(CONFIGURATOR, "KVCacheConfigurator"), (DFLASH_WORKER, "DFlashWorkerV2"), (DSPARK_WORKER, "DSparkWorkerV2")],
)
def test_every_file_imports_the_hooks_once_at_module_level_and_survives_a_failure(relpath, class_name, pristine_files):
    block = _prologue(ast.parse(patch_source(relpath, pristine_files[relpath])), class_name)
    assert isinstance(block, ast.Try) and ast.unparse(block.body[0]) == PROLOGUE_IMPORT
    (handler,) = block.handlers
    assert ast.unparse(handler.type) == "Exception"
    assert ast.unparse(handler.body[0]) == "_rso_hooks = None"
    message = handler.body[1].value.args[0].value
    assert "not importable" in message and "fix:" in message


def marked_lines(data: bytes) -> list:
    return [line for line in data.splitlines() if is_marked(line)]


@pytest.mark.parametrize("relpath", TARGET_FILES)
def test_patch_inserts_only_marked_lines_and_compiles(relpath, pristine_files):
    pristine = pristine_files[relpath]
    patched = patch_source(relpath, pristine)
    assert unpatch_source(patched) == pristine
    assert len(patched.splitlines()) - len(pristine.splitlines()) == len(marked_lines(patched))
    assert len(marked_lines(patched)) == INSERTED_LINES[relpath]
    compile(patched, relpath, "exec", dont_inherit=True)
    assert HOOK_CALLS[relpath].encode() in b"".join(marked_lines(patched))


def test_configurator_guard_asks_the_hook_after_the_stock_condition(pristine_files):
    patched = patch_source(CONFIGURATOR, pristine_files[CONFIGURATOR])
    tree = ast.parse(patched)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "KVCacheConfigurator")
    method = next(n for n in cls.body if getattr(n, "name", None) == "_build_hybrid_req_pool")
    guard = next(n for n in ast.walk(method) if isinstance(n, ast.If) and isinstance(n.body[0], ast.Raise))
    assert isinstance(guard.test, ast.BoolOp) and isinstance(guard.test.op, ast.And)
    stock, hook = guard.test.values
    assert ast.unparse(hook) == "_rso_hooks is None or _rso_hooks.keep_kda_only_guard(self)"
    assert "kimi_linear_config" in ast.unparse(stock)  # SGLang's own condition, intact and first


@pytest.mark.parametrize(
    "method_name,builder",
    [("_build_hybrid_mamba_decode_req_pool", "pd_decode"), ("_init_unified_mamba_pools", "unified_memory")],
)
def test_unguarded_pool_builders_ask_the_overlay_first(method_name, builder, pristine_files):
    tree = ast.parse(patch_source(CONFIGURATOR, pristine_files[CONFIGURATOR]))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "KVCacheConfigurator")
    method = next(n for n in cls.body if getattr(n, "name", None) == method_name)
    has_docstring = isinstance(method.body[0], ast.Expr) and isinstance(method.body[0].value, ast.Constant)
    check = method.body[1 if has_docstring else 0]
    assert ast.unparse(check) == (f"if _rso_hooks is not None:\n    _rso_hooks.refuse_unserved_pool(self, '{builder}')")


@pytest.mark.parametrize(
    "relpath,class_name,method_name,call",
    [
        (
            DFLASH_WORKER,
            "DFlashWorkerV2",
            "_update_target_mamba_state_after_verify",
            "_rso_hooks.dflash_commit(self, batch, seq_lens_pre_verify, commit_lens)",
        ),
        (
            DSPARK_WORKER,
            "DSparkWorkerV2",
            "_commit_target_mamba_states_after_verify",
            "_rso_hooks.dspark_commit(self, batch, seq_lens_pre_verify, seq_lens_post_verify, commit_lens)",
        ),
    ],
)
def test_commit_hook_runs_first_after_the_docstring(relpath, class_name, method_name, call, pristine_files):
    tree = ast.parse(patch_source(relpath, pristine_files[relpath]))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    method = next(n for n in cls.body if getattr(n, "name", None) == method_name)
    docstring, hook_if = method.body[:2]
    assert isinstance(docstring.value, ast.Constant)
    assert ast.unparse(hook_if.test) == f"_rso_hooks is not None and {call}"
    assert [type(s) for s in hook_if.body] == [ast.Return] and hook_if.body[0].value is None


@pytest.mark.parametrize("relpath", TARGET_FILES)
def test_hook_points_do_not_depend_on_line_numbers(relpath, pristine_files):
    """Shifting every line down finds the same hook points and inserts the same lines."""
    pristine = pristine_files[relpath]
    shifted = b"# local note\n" * 37 + pristine
    assert marked_lines(patch_source(relpath, shifted)) == marked_lines(patch_source(relpath, pristine))


def test_crlf_files_keep_their_line_endings(pristine_files):
    crlf = pristine_files[DFLASH_WORKER].replace(b"\n", b"\r\n")
    patched = patch_source(DFLASH_WORKER, crlf)
    assert b"\n" not in patched.replace(b"\r\n", b"")
    assert unpatch_source(patched) == crlf


def _method_node(data: bytes, class_name: str, method_name: str):
    cls = next(n for n in ast.parse(data).body if isinstance(n, ast.ClassDef) and n.name == class_name)
    return next(n for n in cls.body if getattr(n, "name", None) == method_name)


def _insert_after(data: bytes, node, text: bytes) -> bytes:
    """`data` with `text` inserted right after `node` (ast column offsets are UTF-8 byte offsets)."""
    lines = data.splitlines(keepends=True)
    line = lines[node.end_lineno - 1]
    lines[node.end_lineno - 1] = line[: node.end_col_offset] + text + line[node.end_col_offset :]
    return b"".join(lines)


def _extra_parameter(data: bytes) -> bytes:
    method = _method_node(data, "DFlashWorkerV2", "_update_target_mamba_state_after_verify")
    return _insert_after(data, method.args.kwonlyargs[-1], b", extra=None")


def _without_kda_words(data: bytes) -> bytes:
    return data.replace(b"KDA", b"XYZ").replace(b"kimi_linear", b"other")


def _second_guard(data: bytes) -> bytes:
    """A second `if` raising a KDA error in the same method: ambiguous, so refused."""
    method = _method_node(data, "KVCacheConfigurator", "_build_hybrid_req_pool")
    first = method.body[0]
    indent = b" " * first.col_offset
    return _insert_after(data, first, b"\n" + indent + b"if False:\n" + indent + b"    raise ValueError('KDA')")


def _rename(name: bytes, new: bytes):
    def edit(data: bytes) -> bytes:
        assert data.count(name) == 1, "the test's edit must hit exactly one place"
        return data.replace(name, new)

    return edit


@pytest.mark.parametrize(
    "relpath,edit,message",
    [
        (
            DFLASH_WORKER,
            _rename(b"def _update_target_mamba_state_after_verify(", b"def _renamed("),
            "DFlashWorkerV2._update_target_mamba_state_after_verify",
        ),
        (DSPARK_WORKER, _rename(b"class DSparkWorkerV2(", b"class Renamed("), "class DSparkWorkerV2"),
        (
            DFLASH_WORKER,
            _extra_parameter,
            "expected parameters (self, batch, seq_lens_pre_verify, commit_lens)",
        ),
        (
            CONFIGURATOR,
            _without_kda_words,
            "raises the KDA-only error (a message naming KDA or kimi_linear), found 0",
        ),
        (
            CONFIGURATOR,
            _second_guard,
            "raises the KDA-only error (a message naming KDA or kimi_linear), found 2",
        ),
    ],
)
def test_missing_or_changed_hook_point_is_refused(relpath, edit, message, pristine_files):
    changed = edit(pristine_files[relpath])
    ast.parse(changed)
    with pytest.raises(HookPointError, match=re.escape(message)):
        patch_source(relpath, changed)


def test_already_patched_source_is_not_patched_twice(pristine_files):
    patched = patch_source(DSPARK_WORKER, pristine_files[DSPARK_WORKER])
    with pytest.raises(HookPointError, match="already carries"):
        patch_source(DSPARK_WORKER, patched)


def test_marker_is_the_documented_one():
    assert MARKER == b"# replayssm-overlay"
