"""Two of Triton 3.7.1's interpreter costs taken away, with every value it computes unchanged.

The CPU tests run SGLang's GDN kernels under the interpreter (`harness.interpreter`), and a ring release's
cycle spends most of its time there. Two costs are bookkeeping, not interpretation:

- The language swap. A kernel launch swaps every builtin of `triton.language` (and `.core`, `.math`, the
  tensor class) for its interpreted form, and restores them when the launch ends. Each call of a
  `@triton.jit` helper inside the kernel (SGLang's own, or `tl.sum`, `tl.sigmoid`: `triton.language.standard`)
  swaps again, scanning those modules with `inspect.getmembers`, and never restores that swap. Inside a
  launch, once the modules a helper sees have been swapped, its swap finds no builtin left to swap and sets
  the same attributes to the same functions again: it is skipped. A helper that sees a module not yet
  swapped in this launch, and a call outside a launch, swap as before.
- The numpy type of a Triton type. The interpreter builds a dictionary of 16 types on every call (a few per
  interpreted operation). The answer depends only on the element type, so it is kept per element type.

Measured on one ring release's ring-length report (`harness.ring_length`, 0.5.20, one core): 69 s of CPU
before, 46 s after, and the report is the same; tests/cycle/test_interpreter_speed.py checks that a kernel's
output bits do not change.
"""

from __future__ import annotations

_MARK = "_replayssm_harness_interpreter_speed"


class _Launch:
    """The ids of the language modules the running launch has swapped (None: no launch is running; PENDING:
    a launch has started and its own swap comes next). The interpreter runs one launch at a time."""

    PENDING = frozenset({-1})
    swapped = None


def install(interpreter) -> None:
    """Install both shortcuts on `triton.runtime.interpreter` (idempotent). Raises RuntimeError, naming the
    Triton this supports, if the interpreter no longer has the functions they wrap."""
    needed = ("GridExecutor", "_patch_lang", "_LangPatchScope", "_get_np_dtype", "tl")
    missing = [name for name in needed if not hasattr(interpreter, name)]
    if missing:
        raise RuntimeError(
            f"triton.runtime.interpreter has no {', '.join(missing)}: this harness supports the Triton that "
            "SGLang 0.5.19 pins (3.7.x)"
        )
    if getattr(interpreter, _MARK, False):
        return
    _one_swap_per_module(interpreter)
    _np_dtype_per_element_type(interpreter)
    setattr(interpreter, _MARK, True)


def _language_modules(fn, lang) -> frozenset:
    """The ids of the Triton language modules `fn` sees: those the interpreter swaps for it."""
    return frozenset(id(value) for value in fn.__globals__.values() if value is lang or value is lang.core)


def _one_swap_per_module(interpreter) -> None:
    executor, swap, lang = interpreter.GridExecutor, interpreter._patch_lang, interpreter.tl
    launch = executor.__call__

    def launch_tracking_swaps(self, *args, **kwargs):
        if _Launch.swapped is not None:  # a launch inside a launch: the interpreter's own way, untracked
            return launch(self, *args, **kwargs)
        _Launch.swapped = _Launch.PENDING
        try:
            return launch(self, *args, **kwargs)
        finally:
            _Launch.swapped = None

    def swap_unless_swapped(fn):
        modules = _language_modules(fn, lang)
        if _Launch.swapped is _Launch.PENDING:  # the launch's own swap
            _Launch.swapped = modules
        elif _Launch.swapped is not None:  # a helper inside the launch
            if modules <= _Launch.swapped:
                return interpreter._LangPatchScope()  # nothing to undo
            _Launch.swapped = _Launch.swapped | modules
        return swap(fn)

    executor.__call__ = launch_tracking_swaps
    interpreter._patch_lang = swap_unless_swapped


def _np_dtype_per_element_type(interpreter) -> None:
    np_dtype, lang = interpreter._get_np_dtype, interpreter.tl
    known = {}

    def np_dtype_of_element(tt_dtype):
        # a block's numpy type is its element's; a pointer (unhashable) is always uint64, asked each time
        element = tt_dtype.element_ty if isinstance(tt_dtype, lang.block_type) else tt_dtype
        if isinstance(element, lang.pointer_type):
            return np_dtype(element)
        found = known.get(element)
        if found is None:
            found = known[element] = np_dtype(element)
        return found

    interpreter._get_np_dtype = np_dtype_of_element
