"""Which GDN ReplaySSM protocol an SGLang tree runs, read from its files: what commits DFLASH/DSPARK there.

SGLang 0.5.19 keeps a raw verify window per request, sized to the window, and the overlay's fold commits
it ("fold"); from 0.5.20 on the releases keep a circular ring of `--linear-replayssm-cache-len` rows, and
the commit is that release's own MTP commit ("ring", `hooks/ring_commit.py`). The commit decides per pool,
from the pool's own attributes (`hooks/commit.py`); the configurator's rule runs before the pool exists
and `status` runs in another process, so they read the same fact from the installed tree instead: a
release whose GDN ReplaySSM kernel module (`gdn_replayssm_spec_decode.py`, in one of `KERNEL_PACKAGES`)
defines `commit_gdn_replayssm_circular` -- the ring commit its MTP commit calls on a ring pool -- builds
ring pools; one without it whose fold module defines `commit_gdn_replayssm_fold_after_verify` builds fold
pools. Never a version string. tests/releases checks, for every supported release, that this answer is
the pool SGLang builds.

`KERNEL_PACKAGES` is the one place that says where a release keeps its GDN kernels: the patcher's
release table and the self-check's reference read it from here (the harness keeps a copy, held equal by
tests/releases/test_release_coverage.py).

Standard library only (`ast`): the hooks import it on SGLang's start-up path, `status` without SGLang.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import sys
from pathlib import Path

FOLD, RING = "fold", "ring"
FLA_KERNELS = "kernels/ops/attention/fla"  # the GDN kernels' package up to 0.5.22
LINEAR_KERNELS = "kernels/ops/attention/linear"  # and from 0.5.23 on (`fla` remains, without them)
KERNEL_PACKAGES = (LINEAR_KERNELS, FLA_KERNELS)  # newest first: where a tree's GDN kernels are looked for
RING_MODULE, RING_COMMIT = "gdn_replayssm_spec_decode.py", "commit_gdn_replayssm_circular"
FOLD_MODULE, FOLD_COMMIT = "gdn_replayssm_spec_fold.py", "commit_gdn_replayssm_fold_after_verify"
MTP_COMMIT = "spec_utils.commit_mamba_states_after_verify"


def kernel_module_names(module: str) -> tuple:
    """The import names under which a release may hold GDN kernel module `module` (e.g.
    `fused_sigmoid_gating_recurrent`), newest package first."""
    return tuple(f"sglang.{package.replace('/', '.')}.{module}" for package in KERNEL_PACKAGES)


def _defines(path: Path, function: str) -> bool:
    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return False
    return any(isinstance(node, ast.FunctionDef) and node.name == function for node in tree.body)


@functools.cache
def of_tree(sglang_dir: Path) -> str | None:
    """ "ring", "fold", or None (neither kernel module: not a release the overlay knows) for the `sglang`
    package directory `sglang_dir`."""
    modules = [Path(sglang_dir) / package for package in KERNEL_PACKAGES]
    if any(_defines(folder / RING_MODULE, RING_COMMIT) for folder in modules):
        return RING
    if any(_defines(folder / FOLD_MODULE, FOLD_COMMIT) for folder in modules):
        return FOLD
    return None


def installed() -> str | None:
    """The protocol of the `sglang` this process imports (imported already, or found without importing)."""
    location = sglang_location()
    return of_tree(location) if location else None


def sglang_location() -> Path | None:
    """The `sglang` package directory this process imported (or would import, found without importing it),
    resolved, or None."""
    module = sys.modules.get("sglang")
    locations = list(getattr(module, "__path__", None) or [])
    if not locations:
        try:
            spec = importlib.util.find_spec("sglang")
        except (ImportError, ValueError):  # a stand-in `sglang` module without a spec (GPU benchmarks)
            spec = None
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(locations[0]).resolve() if locations else None
