"""`replayssm-smoke` installed alone must work: every third-party module it imports is a declared
dependency of the distribution (pyproject.toml), matched through the installed distributions' metadata."""

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "smoke_tests" / "replayssm_smoke"


def _top_level_imports(folder: Path) -> set[str]:
    names = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name.partition(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.partition(".")[0])
    return names


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_third_party_import_of_the_smoke_suite_is_declared():
    declared = {
        _normalized(re.match(r"[A-Za-z0-9._-]+", requirement).group())
        for requirement in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    }
    own = {"replayssm_smoke", "replayssm_overlay"}  # both import packages ship in this one distribution
    third_party = _top_level_imports(PACKAGE) - set(sys.stdlib_module_names) - own
    assert third_party, "the smoke suite imports nothing outside the standard library: check this test"
    providers = importlib.metadata.packages_distributions()
    undeclared = {
        name: providers.get(name)
        for name in third_party
        if not declared & {_normalized(dist) for dist in providers.get(name, [])}
    }
    assert not undeclared, f"imported by replayssm_smoke but not in pyproject's dependencies: {undeclared}"
