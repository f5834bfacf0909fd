"""Make SGLang's Triton kernels run under Triton's CPU interpreter (`TRITON_INTERPRET=1`).

Two things: the environment variable must be set before any `@triton.jit` kernel module is imported
(Triton decides at decoration time), and the interpreter's source rewrite needs one fix. Triton 3.7.1's
interpreter leaves a `for` loop variable a plain Python int, so kernel code such as `t.to(tl.int64)`
inside a loop (SGLang's GDN fold does this) fails with `'int' object has no attribute 'to'`. The fix
adds a `visit_For` to the interpreter's AST transformer that rebinds the variable of a `range` /
`tl.range` loop to an interpreter tensor at the top of each loop body, exactly as the transformer
already does for assignments, which is what compiled Triton makes of it; `tl.static_range` variables
stay constants, as they are when compiled. Nothing on disk is modified. It also installs
`harness.interpreter_speed`, which takes two bookkeeping costs out of the interpreter.
"""

import ast
import os
import sys

from harness import interpreter_speed

_MARK = "_replayssm_harness_loop_fix"


def _to_tensor_call(name: str) -> ast.Call:
    """`interpreter_semantic.to_tensor(<name>, False)`: the call the interpreter wraps assignments in."""
    return ast.Call(
        func=ast.Attribute(value=ast.Name(id="interpreter_semantic", ctx=ast.Load()), attr="to_tensor", ctx=ast.Load()),
        args=[ast.Name(id=name, ctx=ast.Load()), ast.Constant(value=False)],
        keywords=[],
    )


def _is_runtime_range(iterator: ast.expr) -> bool:
    """`range(...)` or `tl.range(...)`: a loop whose variable compiled Triton makes a tensor (scf.for).
    `tl.static_range` loops are unrolled at compile time; their variables stay constants."""
    if not isinstance(iterator, ast.Call):
        return False
    function = iterator.func
    name = function.id if isinstance(function, ast.Name) else getattr(function, "attr", None)
    return name == "range"


def _visit_for(self, node: ast.For) -> ast.For:
    self.generic_visit(node)
    if isinstance(node.target, ast.Name) and _is_runtime_range(node.iter):
        rebind = ast.Assign(
            targets=[ast.Name(id=node.target.id, ctx=ast.Store())], value=_to_tensor_call(node.target.id)
        )
        node.body.insert(0, ast.copy_location(rebind, node.body[0]))
    return node


def enable() -> None:
    """Turn the interpreter on and install the loop-variable fix (idempotent).

    Raises RuntimeError if Triton was already imported with the interpreter off, or if the interpreter
    no longer has the AST transformer this fix extends (a Triton other than the one SGLang pins).
    """
    if os.environ.get("TRITON_INTERPRET") != "1":
        early = sorted(name for name in sys.modules if name.startswith("sglang.kernels."))
        if early:
            raise RuntimeError(
                f"SGLang's Triton kernels were imported before the interpreter was enabled ({early[0]}, ...); "
                "set TRITON_INTERPRET=1 in the environment, or call harness.interpreter.enable() first"
            )
    os.environ["TRITON_INTERPRET"] = "1"
    from triton import knobs
    from triton.runtime import interpreter

    if not knobs.runtime.interpret:
        raise RuntimeError("Triton's interpreter is off although TRITON_INTERPRET=1; set it before importing triton")
    transformer = getattr(interpreter, "ASTTransformer", None)
    if transformer is None:
        raise RuntimeError(
            "triton.runtime.interpreter has no ASTTransformer: this harness supports the Triton that "
            "SGLang 0.5.19 pins (3.7.x)"
        )
    if not getattr(transformer, _MARK, False):
        transformer.visit_For = _visit_for
        setattr(transformer, _MARK, True)
    interpreter_speed.install(interpreter)
