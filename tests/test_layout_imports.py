"""Build time and run time stay in different rooms: what runs inside the server (hooks/, fold.py, the
node-side kernels/) imports nothing of the patcher or the ahead-of-time build, and the patcher imports no
torch, Triton, SGLang, `fold` or `kernels`.

Checked two ways, each with a control that shows the check can fail:
- in a fresh interpreter, after importing the modules (and running `fold.describe()`, which takes the
  loader's lazy import path), `sys.modules` holds none of the forbidden modules;
- statically: every import statement of those modules, the ones inside functions included (SGLang's
  paths import lazily, so `sys.modules` sees only what ran), followed through the package.
"""

import json
import os
import pathlib
import subprocess
import sys

from tests.structure.import_graph import imports_of, module_file

ROOT = pathlib.Path(__file__).resolve().parents[1]
OVERLAY = ROOT / "overlay"

RUN_TIME = (
    "replayssm_overlay.hooks",
    "replayssm_overlay.hooks.commit",
    "replayssm_overlay.hooks.configurator",
    "replayssm_overlay.hooks.unserved_pools",
    "replayssm_overlay.selfcheck",
    "replayssm_overlay.fold",
    "replayssm_overlay.kernels.loader",
    "replayssm_overlay.kernels.gdn_fold",
    "replayssm_overlay.kernels.artifact_format",
)
BUILD_TIME = ("replayssm_overlay.patcher", "replayssm_overlay.aot")
PATCHER = tuple(
    "replayssm_overlay.patcher" + ("" if path.stem == "__init__" else f".{path.stem}")
    for path in sorted((OVERLAY / "replayssm_overlay" / "patcher").glob("*.py"))
)
NOT_IN_PATCHER = ("torch", "triton", "sglang", "replayssm_overlay.fold", "replayssm_overlay.kernels")


def _under(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def modules_after_import(names, then: str = "") -> set:
    """sys.modules of a fresh interpreter (this tree's overlay first) after importing `names`."""
    code = (
        "import importlib, json, sys\n"
        f"for name in {list(names)!r}:\n    importlib.import_module(name)\n"
        f"{then}\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    env = dict(os.environ, PYTHONPATH=str(OVERLAY))
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return set(json.loads(run.stdout.splitlines()[-1]))


def static_closure(root: pathlib.Path, package: str, roots) -> set:
    """The modules reachable from `roots` by import statements, through the modules under `root/package`;
    outside modules are reported by their top-level name."""
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        parts = name.split(".")
        if parts[0] != package:
            seen.add(parts[0])
            continue
        for depth in range(1, len(parts) + 1):  # importing a.b.c runs a and a.b first
            prefix = ".".join(parts[:depth])
            file = module_file(root, prefix)
            if file is not None and prefix not in seen:
                seen.add(prefix)
                todo.extend(imports_of(file, prefix))
    return seen


def test_run_time_modules_load_nothing_of_the_patcher_or_the_aot_build():
    loaded = modules_after_import(RUN_TIME, then="from replayssm_overlay import fold; fold.describe()")
    assert "replayssm_overlay.kernels.loader" in loaded  # describe() took the lazy path
    assert sorted(m for m in loaded if _under(m, BUILD_TIME)) == []


def test_run_time_modules_import_nothing_of_the_patcher_or_the_aot_build_even_lazily():
    reached = static_closure(OVERLAY, "replayssm_overlay", RUN_TIME)
    assert "replayssm_overlay.kernels.loader" in reached and "triton" in reached
    assert sorted(m for m in reached if _under(m, BUILD_TIME)) == []


def test_the_patcher_loads_no_torch_triton_sglang_fold_or_kernels():
    loaded = modules_after_import(PATCHER)
    assert "replayssm_overlay.patcher.hookpoints" in loaded
    assert sorted(m for m in loaded if _under(m, NOT_IN_PATCHER)) == []


def test_the_patcher_imports_no_torch_triton_sglang_fold_or_kernels_even_lazily():
    reached = static_closure(OVERLAY, "replayssm_overlay", PATCHER)
    assert "replayssm_overlay.patcher.store" in reached
    assert sorted(m for m in reached if _under(m, NOT_IN_PATCHER)) == []


def test_control_the_fresh_interpreter_sees_transitive_imports():
    """The command line composes everything, so importing it must show all the rooms: were a hook to
    import it, the run-time check above would fail."""
    loaded = modules_after_import(["replayssm_overlay.cli"])
    assert {"replayssm_overlay.patcher", "replayssm_overlay.aot.build", "replayssm_overlay.fold"} <= loaded


def test_control_the_static_walk_follows_lazy_and_relative_imports(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "hooks").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "hooks" / "__init__.py").write_text("def hook():\n    from ..middle import helper\n")
    (pkg / "middle.py").write_text("from . import patcher\n\ndef helper():\n    pass\n")
    (pkg / "patcher.py").write_text("def f():\n    import torch\n")
    reached = static_closure(tmp_path, "pkg", ["pkg.hooks"])
    assert {"pkg.hooks", "pkg.middle", "pkg.patcher", "torch"} <= reached
