"""One error tree: every exception class the overlay, the smoke suite and the harness
define descends from `replayssm_overlay.errors.OverlayError`, the only one that derives from a built-in
exception; and `errors.NotCovered` ("the overlay's kernel does not take this call or pool") is caught in
one place, `fold.covered`, which serving, the fold choice and the self-check all go through. Read with
`ast` from every module (nothing is imported); the controls show the walk finds a stray root and a second
catch."""

import ast
import builtins

from tests.structure import import_graph

ROOT_CLASS = ("replayssm_overlay.errors", "OverlayError")
NOT_COVERED = "NotCovered"
BUILTIN_EXCEPTIONS = {
    name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)
}


def _classes(packages=None) -> dict:
    """(module, class name) -> the last names of its bases, for every class of `packages`."""
    found = {}
    for module, file in import_graph.modules(packages).items():
        for node in ast.walk(ast.parse(file.read_text(), str(file))):
            if isinstance(node, ast.ClassDef):
                found[(module, node.name)] = [ast.unparse(base).rpartition(".")[2] for base in node.bases]
    return found


def exception_roots(packages=None) -> dict:
    """The classes that derive from a built-in exception directly -> those built-ins."""
    return {
        key: [b for b in bases if b in BUILTIN_EXCEPTIONS]
        for key, bases in _classes(packages).items()
        if set(bases) & BUILTIN_EXCEPTIONS
    }


def exception_classes(packages=None) -> set:
    """Every class that is an exception: derives from a built-in one, directly or through this tree's."""
    classes = _classes(packages)
    exceptions, new = set(), set(exception_roots(packages))
    while new:
        exceptions |= new
        known = {name for _module, name in exceptions}
        new = {key for key, bases in classes.items() if set(bases) & known} - exceptions
    return exceptions


def descends_from(key, ancestor: str, classes: dict) -> bool:
    """Whether class `key` has a base named `ancestor`, directly or through this tree's classes."""
    bases = classes[key]
    if ancestor in bases:
        return True
    return any(descends_from(other, ancestor, classes) for other in classes if other[1] in bases)


def catches(name: str, packages=None) -> list:
    """(module, innermost enclosing function) of every `except` clause that names the exception `name`."""
    found = []
    for module, file in import_graph.modules(packages).items():
        found += [
            (module, where)
            for where, handler in _handlers(ast.parse(file.read_text(), str(file)), "<module>")
            if handler.type is not None
            and any(
                isinstance(n, ast.Name) and n.id == name or isinstance(n, ast.Attribute) and n.attr == name
                for n in ast.walk(handler.type)
            )
        ]
    return sorted(found)


def _handlers(node, where: str):
    """(innermost enclosing function, handler) for every `except` clause under `node`."""
    for child in ast.iter_child_nodes(node):
        inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else where
        if isinstance(child, ast.ExceptHandler):
            yield where, child
        yield from _handlers(child, inner)


def test_one_root_every_exception_class_descends_from_overlay_error():
    roots = exception_roots()
    assert roots == {ROOT_CLASS: ["Exception"]}, roots
    classes = _classes()
    strays = sorted(
        key for key in exception_classes() if key != ROOT_CLASS and not descends_from(key, ROOT_CLASS[1], classes)
    )
    assert strays == []
    # the walk reaches every package, and through two levels (RequestTimeout -> SmokeEnvironmentError -> root)
    assert {
        ("replayssm_smoke.httpclient", "RequestTimeout"),
        ("harness.errors", "HarnessError"),
        ("replayssm_overlay.patcher.writes", "Interrupted"),
    } <= exception_classes()


def test_not_covered_is_one_class_caught_in_fold_covered_only():
    assert catches(NOT_COVERED) == [("replayssm_overlay.fold", "covered")]
    retired = ("FoldShapeNotSupported", "ConvShapeNotSupported", "CudaError", "ArtifactRefused")
    assert [key for key in _classes() if key[1] in retired] == []


def test_control_a_second_root_and_a_second_catch_are_found(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "errors.py").write_text(
        "class OverlayError(Exception):\n    pass\n\n\nclass NotCovered(OverlayError):\n    pass\n"
    )
    (pkg / "shapes.py").write_text(
        "from pkg.errors import NotCovered\n\n\nclass Odd(ValueError):\n    pass\n\n\n"
        "class Late(Odd):\n    pass\n\n\n"
        "def plan():\n    try:\n        pass\n"
        "    except (KeyError, NotCovered):\n        pass\n"
    )
    packages = {"pkg": tmp_path}
    assert exception_roots(packages) == {
        ("pkg.errors", "OverlayError"): ["Exception"],
        ("pkg.shapes", "Odd"): ["ValueError"],
    }
    assert ("pkg.shapes", "Late") in exception_classes(packages)
    assert not descends_from(("pkg.shapes", "Late"), "OverlayError", _classes(packages))
    assert catches(NOT_COVERED, packages) == [("pkg.shapes", "plan")]
