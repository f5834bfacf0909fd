"""The import statements of this repository's Python packages, read with `ast` (nothing is imported): what
`tests/test_layout_imports.py` walks for its rooms and `test_no_import_cycles.py` for cycles.

Both kinds of import count: module level and inside functions. A function-level import defers the load,
but it is still a dependency of the module that writes it, and a cycle through one is a cycle of the
design (two modules that each need the other, held together by import order). An edge goes to the
module an import names (`from pkg import mod` names `pkg.mod` when that is a module, else `pkg`); the
package `__init__` that Python runs first is not an edge of its own, or every package whose `__init__`
imports one of its children would be a cycle.
"""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
#: import name of a top-level package -> the folder that holds it (this tree's sys.path entries)
PACKAGES = {"replayssm_overlay": ROOT / "overlay", "replayssm_smoke": ROOT / "smoke_tests", "harness": ROOT}


def module_file(root: pathlib.Path, name: str):
    """The file of module `name` under `root` (a package's `__init__.py`), or None."""
    path = root.joinpath(*name.split("."))
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _statements(file: pathlib.Path, name: str):
    """(module, names) for each import statement anywhere in `file` (module `name`), by absolute name:
    `import a.b` gives ("a.b", ()), `from m import x, y` gives ("m", ("x", "y"))."""
    package = name if file.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(file.read_text(), str(file))):
        if isinstance(node, ast.Import):
            yield from ((alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            yield ".".join(part for part in (base, node.module) if part), tuple(a.name for a in node.names)


def imports_of(file: pathlib.Path, name: str) -> set:
    """Every module an import statement anywhere in `file` (module `name`) may load, by absolute name;
    `from m import x` gives both `m` and `m.x` (the caller keeps `m.x` where it is a module)."""
    return {found for module, names in _statements(file, name) for found in (module, *(f"{module}.{n}" for n in names))}


def modules(packages=None) -> dict:
    """Module name -> file, for every module of `packages` (default: PACKAGES)."""
    found = {}
    for top, root in (packages or PACKAGES).items():
        for file in sorted((root / top).rglob("*.py")):
            parts = list(file.relative_to(root).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = file
    return found


def graph(packages=None) -> dict:
    """Module -> the modules of `packages` its import statements name (see the module docstring)."""
    known = modules(packages)
    return {name: _named_modules(file, name, known) - {name} for name, file in known.items()}


def _named_modules(file: pathlib.Path, name: str, known) -> set:
    named = set()
    for module, names in _statements(file, name):
        named.update(f"{module}.{n}" if f"{module}.{n}" in known else module for n in names)
        if not names:
            named.add(module)
    return named & set(known)


def cycles(edges: dict) -> list:
    """The import cycles of `edges`: each strongly connected set of more than one module, sorted (Tarjan's
    algorithm, iterative)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return sorted(found)
