"""Finding the SGLang installation to patch, without importing it.

Importing `sglang` would execute its package `__init__` (and may fail, or be slow, or pull in CUDA), and
the patcher must work on an installation whose files it is about to change. So the default target is
located with `importlib.util.find_spec`, which resolves the package directory without running it; a
path given on the command line wins, once it is checked to be a directory (an empty value, a file or a
missing path is refused, saying which). The declared version is only reported: the release is identified
by the files' hashes (see `releases.py`).
"""

import ast
import importlib.metadata
import importlib.util
import pathlib

from replayssm_overlay.errors import OverlayError, from_os_error


def find_sglang_dir(explicit=None) -> pathlib.Path:
    """The `sglang` package directory: `explicit` if given, else the one this Python would import."""
    if explicit is not None:
        return _checked_dir(str(explicit))
    spec = importlib.util.find_spec("sglang")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise OverlayError(
            "no `sglang` package is importable in this Python",
            "run the command with SGLang's own Python, or pass --sglang-dir PATH (the sglang package directory)",
        )
    return pathlib.Path(locations[0]).resolve()


_EXAMPLE = "pass the `sglang` package directory (the folder that holds srt/), e.g. .../site-packages/sglang"


def _checked_dir(explicit: str) -> pathlib.Path:
    """`--sglang-dir`'s value as a directory, or a refusal that says what it is instead."""
    if not explicit.strip():
        raise OverlayError(
            "--sglang-dir is empty (an unset shell variable?); an empty path would mean the current directory",
            _EXAMPLE + ", or leave --sglang-dir out to use the sglang this Python would import",
        )
    path = pathlib.Path(explicit).expanduser()
    try:
        resolved = path.resolve()
        if resolved.is_dir():
            return resolved
        if resolved.exists():
            raise OverlayError(f"--sglang-dir {explicit}: {resolved} is a file, not a directory", _EXAMPLE)
    except OSError as err:
        raise from_os_error(err, "look at --sglang-dir", explicit) from err
    raise OverlayError(f"--sglang-dir {explicit}: no such directory", _EXAMPLE)


def declared_version(sglang_dir: pathlib.Path):
    """The version the installation claims (dist-info beside it, else sglang/_version.py), or None."""
    for dist in importlib.metadata.distributions(name="sglang", path=[str(sglang_dir.parent)]):
        return dist.version
    return _version_from_source(sglang_dir / "_version.py")


def _version_from_source(path: pathlib.Path):
    """`__version__ = "..."` (possibly chained `__version__ = version = ...`) read with ast, never run."""
    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            return node.value.value
    return None
