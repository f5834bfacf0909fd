"""harness.interpreter_speed changes no bit: SGLang 0.5.19's decode (its conv update and its gated delta-rule
kernel, which call `@triton.jit` helpers) on the same random inputs in two processes, one with the
shortcuts and one without, leaves the same state bits; and the shortcut process really skips swaps.

Each run is its own process: the shortcuts patch Triton's interpreter module for the whole process."""

import json
import os
import subprocess
import sys
import types

import pytest

from harness import interpreter_speed, sandbox

# Counts the interpreter's real language swaps, then runs the decode reference on a tiny model and prints
# the sha256 of the state and conv bits. argv[1] == "off": the speed shortcuts are not installed.
SCRIPT = """
import hashlib, json, sys
import torch
from triton.runtime import interpreter
from harness import interpreter_speed
swaps = [0]
real_swap = interpreter._patch_lang
def counted(fn):
    swaps[0] += 1
    return real_swap(fn)
interpreter._patch_lang = counted
if sys.argv[1] == "off":
    interpreter_speed.install = lambda module: None
from harness import on_cpu
on_cpu.prepare()
from harness.gdn_pool import TinyGDN
from harness.recurrence import decode_reference, random_weights, random_window
model = TinyGDN()
generator = torch.Generator().manual_seed(7)
slots, draft_tokens = torch.tensor([0, 2, 1]), 3
temporal = torch.randn(model.layers, 4, model.num_v_heads, model.head_v_dim, model.head_k_dim, generator=generator)
conv = torch.randn(model.layers, 4, model.conv_dim, model.conv_kernel - 1, generator=generator)
result = decode_reference(
    model, temporal, conv, random_weights(model, generator), random_window(model, 3, draft_tokens, generator),
    slots, torch.tensor([3, 1, 2]),
)
digest = lambda t: hashlib.sha256(t.contiguous().view(torch.int32).numpy().tobytes()).hexdigest()
print(json.dumps({"temporal": digest(result.temporal), "conv": digest(result.conv), "swaps": swaps[0]}))
"""


def _decode(speed: str) -> dict:
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, speed],
        env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(sandbox.REPO_ROOT)},
        cwd=sandbox.REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_the_shortcuts_change_no_bit_and_skip_the_helpers_swaps():
    on, off = _decode("on"), _decode("off")
    assert (on["temporal"], on["conv"]) == (off["temporal"], off["conv"])
    # off: a swap per launch and per helper call; on: a swap per launch and per new module set in it
    assert 0 < on["swaps"] < off["swaps"] / 2, (on, off)


def test_installing_twice_wraps_once():
    from triton.runtime import interpreter

    interpreter_speed.install(interpreter)  # the cycle's conftest installed them already
    swap, np_dtype, launch = interpreter._patch_lang, interpreter._get_np_dtype, interpreter.GridExecutor.__call__
    interpreter_speed.install(interpreter)
    assert (interpreter._patch_lang, interpreter._get_np_dtype, interpreter.GridExecutor.__call__) == (
        swap,
        np_dtype,
        launch,
    )


def test_an_interpreter_without_the_wrapped_functions_is_refused_by_name():
    other = types.SimpleNamespace(GridExecutor=object, tl=None)
    with pytest.raises(RuntimeError, match=r"no _patch_lang, _LangPatchScope, _get_np_dtype: .*\(3\.7\.x\)"):
        interpreter_speed.install(other)
