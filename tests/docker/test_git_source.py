"""The image's source is what git tracks at the commit (docker/tools/git_source.py), on a throw-away
repository: an untracked file never reaches the export, a dirty checkout is refused unless allowed, and
an allowed dirty export holds the uncommitted changes and is labelled `<commit>-dirty`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docker" / "tools"))
from git_source import export  # noqa: E402

from common import Refusal  # noqa: E402


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("VERSION = 1\n")
    (repo / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    _git(tmp_path, "init", "-q", str(repo))
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    # what must never be baked into an image: an untracked module with a secret, and an ignored one
    (repo / ".gitignore").write_text("")
    (repo / "pkg" / "_local_settings.py").write_text("TOKEN = 'secret'\n")
    return repo


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_clean_checkout_exports_the_commit_without_untracked_files(repo, tmp_path):
    source = export(repo, ("pkg", "pyproject.toml"), tmp_path / "out", allow_dirty=False)
    assert _files(tmp_path / "out") == {"pkg/__init__.py", "pyproject.toml"}
    assert source.revision == _git(repo, "rev-parse", "HEAD") and not source.dirty


@pytest.mark.parametrize("staged", [False, True])
def test_dirty_checkout_is_refused_unless_allowed_then_labelled_dirty(repo, tmp_path, staged):
    (repo / "pkg" / "__init__.py").write_text("VERSION = 2\n")
    (repo / "pkg" / "new.py").write_text("NEW = 1\n")
    _git(repo, "add", "pkg/new.py")  # a new file staged for the next commit is tracked
    if staged:
        _git(repo, "add", "pkg/__init__.py")
    with pytest.raises(Refusal, match=r"uncommitted changes to tracked files \(pkg/__init__.py") as refused:
        export(repo, ("pkg",), tmp_path / "refused", allow_dirty=False)
    assert "ALLOW_DIRTY=1" in refused.value.fix
    assert not (tmp_path / "refused").exists()
    source = export(repo, ("pkg",), tmp_path / "out", allow_dirty=True)
    assert _files(tmp_path / "out") == {"pkg/__init__.py", "pkg/new.py"}
    assert (tmp_path / "out" / "pkg" / "__init__.py").read_text() == "VERSION = 2\n"
    assert source.dirty and source.revision == _git(repo, "rev-parse", "HEAD") + "-dirty"
    # the checkout's own index is untouched: what was unstaged stays unstaged
    assert _git(repo, "diff", "--name-only") == ("" if staged else "pkg/__init__.py")


def test_not_a_git_checkout_is_refused(tmp_path):
    (tmp_path / "plain").mkdir()
    with pytest.raises(Refusal, match="not a git repository") as refused:
        export(tmp_path / "plain", ("pkg",), tmp_path / "out", allow_dirty=True)
    assert "build from a git checkout" in refused.value.fix
