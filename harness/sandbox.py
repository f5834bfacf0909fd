"""A private copy of the installed SGLang, patched or not, and the probe run against it in a subprocess.

The installed SGLang is never modified: the demo and the end-to-end tests copy its package directory
into a temporary tree, run `harness.probe` with that tree first on PYTHONPATH (stock behaviour), apply
the overlay to the copy with the patcher's Python API, and run the probe again (patched behaviour).
"""

import contextlib
import functools
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

from harness.errors import HarnessError
from harness.release_trees import INSTALLED_RELEASE, release_tree
from replayssm_overlay import records

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def sglang_copy(release: str = INSTALLED_RELEASE):
    """A copy of `release`'s sglang package (INSTALLED_RELEASE: the installed one; later releases: see
    `harness.release_trees`) in a temporary directory (yields the copy's package dir); the directory is
    deleted when the block ends."""
    installed = release_tree(release)
    root = pathlib.Path(tempfile.mkdtemp(prefix="replayssm-sandbox-"))
    try:
        target = root / "sglang"
        shutil.copytree(installed, target, ignore=shutil.ignore_patterns("__pycache__"))
        yield target
    finally:
        shutil.rmtree(root, ignore_errors=True)


def apply_overlay(sglang_dir: pathlib.Path) -> dict:
    """Patch the copy with the overlay's patcher (its Python API), recording the fold choice in the
    manifest as the command line does; returns the patcher's report."""
    from replayssm_overlay import fold
    from replayssm_overlay.patcher import apply

    return apply(sglang_dir, kernels=fold.describe())


FOLD_VARIABLE = "RSO_FOLD"  # the overlay's fold choice (replayssm_overlay.fold): auto, triton, sglang


UNIMPORTABLE_OVERLAY = 'raise ImportError("replayssm_overlay hidden by the test (planted package)")\n'


def probe_env(sglang_dir: pathlib.Path, fold: str | None = None, overlay_importable: bool = True) -> dict:
    """The environment of a subprocess that imports the copy's sglang and this tree's packages; `fold`
    (if given) sets the overlay's fold choice. With `overlay_importable=False` a planted
    `replayssm_overlay` package that raises ImportError shadows the real one (next to the copy).
    Self-check and fallback records go next to the copy (`records.ENV_DIR`), which is deleted with it."""
    hidden = sglang_dir.parent / "overlay-hidden"
    if not overlay_importable:
        (hidden / "replayssm_overlay").mkdir(parents=True, exist_ok=True)
        (hidden / "replayssm_overlay" / "__init__.py").write_text(UNIMPORTABLE_OVERLAY)
    paths = ([] if overlay_importable else [str(hidden)]) + [
        str(sglang_dir.parent),
        str(REPO_ROOT / "overlay"),
        str(REPO_ROOT / "smoke_tests"),
        str(REPO_ROOT),
    ]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [env.get("PYTHONPATH")] if p])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["TRITON_INTERPRET"] = "1"
    env[records.ENV_DIR] = str(sglang_dir.parent / "rso-state")
    if fold is not None:
        env[FOLD_VARIABLE] = fold
    return env


def run_probe(
    sglang_dir: pathlib.Path,
    *,
    part: str = "all",
    seed: int = 0,
    quiet: bool = False,
    fold: str | None = None,
    head_k_dim: int | None = None,
    ring_scenarios: str | None = None,
    overlay_importable: bool = True,
) -> dict:
    """Run `python -m harness.probe` against the copy at `sglang_dir`; returns its JSON report.

    Progress lines of the probe go to this process's stderr as they come."""
    command = [sys.executable, "-m", "harness.probe", "--part", part, "--seed", str(seed)]
    if quiet:
        command.append("--quiet")
    if head_k_dim is not None:
        command += ["--head-k-dim", str(head_k_dim)]
    if ring_scenarios is not None:
        command += ["--ring-scenarios", ring_scenarios]
    completed = subprocess.run(
        command,
        env=probe_env(sglang_dir, fold, overlay_importable),
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        raise HarnessError(f"the probe against {sglang_dir} failed (exit {completed.returncode})")
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    if pathlib.Path(report["sglang"]) != sglang_dir:
        raise HarnessError(f"the probe imported {report['sglang']}, not the copy at {sglang_dir}")
    return report


def stock_and_patched(
    *,
    seed: int = 0,
    progress=None,
    fold: str | None = None,
    head_k_dim: int | None = None,
    release: str = INSTALLED_RELEASE,
) -> dict:
    """The probe's full report on a pristine copy of `release`'s SGLang (INSTALLED_RELEASE: the installed one;
    later releases: `harness.release_trees`) ("stock") and on the same copy after the overlay's patcher
    applied it ("patched"), with the patcher's report ("patch"). The copy lives in a temporary directory
    that is deleted before this returns. `progress(line)` (optional) gets a line per step, and the
    probe's own progress lines go to stderr; without it both are quiet. `fold` (auto, triton, sglang)
    sets the overlay's fold choice and `head_k_dim` the fold cycle model's K in both probes. On a
    circular-ring release the stock probe runs only the first ring scenario per algorithm (it crashes
    on its first step), the patched probe every one."""
    say = progress or (lambda line: None)
    say(f"[1/4] copying SGLang {release} from {release_tree(release)} to a temporary directory")
    with sglang_copy(release) as copy:
        say(f"[2/4] stock {release} on the copy: configurator cases and commit cycle (Triton interpreter)")
        stock = run_probe(
            copy, seed=seed, quiet=progress is None, fold=fold, head_k_dim=head_k_dim, ring_scenarios="first"
        )
        say("[3/4] applying the overlay to the copy")
        patch = apply_overlay(copy)
        say(f"      {patch.get('message', 'applied')}")
        say("[4/4] patched copy: configurator cases and commit cycle (Triton interpreter)")
        patched = run_probe(copy, seed=seed, quiet=progress is None, fold=fold, head_k_dim=head_k_dim)
    return {"stock": stock, "patched": patched, "patch": patch, "release": release}


@functools.cache
def stock_and_patched_reports(seed: int = 0, release: str = INSTALLED_RELEASE) -> dict:
    """`stock_and_patched` made once per process and release, quietly (tests in several modules share it)."""
    return stock_and_patched(seed=seed, release=release)
