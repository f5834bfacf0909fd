"""The files an image may be built from: what git tracks, at the commit, nothing else.

Why it exists: copying the working tree let an untracked file (a local settings module holding a token)
into the overlay wheel and so into an image labelled with the clean commit. So the wheel source is
exported with `git archive` from a tree object: HEAD's tree for a clean checkout; for a checkout with
uncommitted changes to tracked files (refused unless the caller allows it, `ALLOW_DIRTY=1`), a tree
written from a copy of the index (HEAD plus what is staged) with those changes added (`git add -u`). Untracked files are
never in either, ignored or not, and the revision names a dirty build as `<commit>-dirty`.
Standard library only; no stash, no change to the checkout's own index or files.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from common import Refusal


@dataclass(frozen=True)
class Source:
    """What was exported: the commit, whether tracked files differed from it, the revision label."""

    commit: str
    dirty: bool

    @property
    def revision(self) -> str:
        return f"{self.commit}-dirty" if self.dirty else self.commit


def _git(repo: Path, *args: str, env: dict | None = None, binary: bool = False) -> str | bytes:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, env=env)
    if proc.returncode != 0:
        raise Refusal(
            f"`git {' '.join(args)}` failed in {repo}: {proc.stderr.decode(errors='replace').strip()}",
            "build from a git checkout of the project (the image is built from its commit)",
        )
    return proc.stdout if binary else proc.stdout.decode().strip()


def changed_tracked_files(repo: Path) -> list[str]:
    """Tracked paths whose working-tree or staged content differs from HEAD."""
    return _git(repo, "diff", "--name-only", "HEAD", "--").splitlines()


def export(repo: Path, names: tuple[str, ...], dest: Path, allow_dirty: bool) -> Source:
    """Write the tracked files under `names` (paths relative to `repo`) into `dest`, from the commit."""
    repo = Path(_git(repo, "rev-parse", "--show-toplevel"))
    commit = _git(repo, "rev-parse", "--verify", "HEAD^{commit}")
    changed = changed_tracked_files(repo)
    if changed and not allow_dirty:
        shown = ", ".join(changed[:8]) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
        raise Refusal(
            f"the checkout has uncommitted changes to tracked files ({shown}); the image is built "
            f"from the commit {commit[:12]} and would not hold them",
            "commit them (or `git stash` them yourself), or build anyway with ALLOW_DIRTY=1 "
            "(the image is then labelled <commit>-dirty)",
        )
    tree = f"{commit}^{{tree}}"
    if changed:  # a copy of the index (HEAD + what is staged) plus the unstaged changes of tracked files
        with tempfile.TemporaryDirectory(prefix="rso-index-") as tmp:
            index = Path(tmp) / "index"
            shutil.copyfile(repo / _git(repo, "rev-parse", "--git-path", "index"), index)
            env = dict(os.environ, GIT_INDEX_FILE=str(index))
            _git(repo, "add", "-u", "--", ".", env=env)
            tree = _git(repo, "write-tree", env=env)
    archive = _git(repo, "archive", "--format=tar", tree, "--", *names, binary=True)
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    return Source(commit=commit, dirty=bool(changed))
