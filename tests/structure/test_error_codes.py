"""Stable error codes: every exception class the repository ships (the overlay's tree under `OverlayError`,
and the standalone roots of the image tools, the base check and the Ansible modules) defines its own
kebab-case `code`, and no two share one, so a script can tell refusals apart by code and a new class
(or two branches that pick the same code) is caught here. Read with `ast` from every shipped Python file
(nothing is imported); the control shows the walk finds a missing and a duplicated code. The last tests
show the code reaching the `--json` errors of the overlay's command and the smoke suite's report."""

import ast
import builtins
import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
#: the folders whose Python ships (tests/ and its doubles do not)
SHIPPED = ("overlay", "smoke_tests", "harness", "docker", "deploy", "benchmarks", "scripts")
KEBAB = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
BUILTIN_EXCEPTIONS = {
    name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)
}


def _class_defs(root: pathlib.Path, folders=SHIPPED) -> dict:
    """(file relative to root, class name) -> (base last names, its own `code` string or None)."""
    found = {}
    for folder in folders:
        for file in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(file.read_text(), str(file))):
                if isinstance(node, ast.ClassDef):
                    code = next(
                        (
                            stmt.value.value
                            for stmt in node.body
                            if isinstance(stmt, ast.Assign)
                            and isinstance(stmt.value, ast.Constant)
                            and any(isinstance(t, ast.Name) and t.id == "code" for t in stmt.targets)
                        ),
                        None,
                    )
                    bases = [ast.unparse(base).rpartition(".")[2] for base in node.bases]
                    found[(str(file.relative_to(root)), node.name)] = (bases, code)
    return found


def exception_codes(root: pathlib.Path = ROOT, folders=SHIPPED) -> dict:
    """Every exception class (derives from a built-in exception, directly or through the walked classes)
    -> its own `code` (None: it defines none)."""
    classes = _class_defs(root, folders)
    known, grew = set(BUILTIN_EXCEPTIONS), True
    while grew:
        new = {name for (_file, name), (bases, _code) in classes.items() if set(bases) & known} - known
        known |= new
        grew = bool(new)
    return {key: code for key, (bases, code) in classes.items() if set(bases) & known}


def problems(codes: dict) -> list:
    """What breaks the rule: a class without its own code, a code not kebab-case, a code used twice."""
    found = [f"{file}: {name} defines no `code`" for (file, name), code in codes.items() if code is None]
    found += [
        f"{file}: {name}.code {code!r} is not kebab-case"
        for (file, name), code in codes.items()
        if code is not None and not KEBAB.match(code)
    ]
    owners = {}
    for key, code in codes.items():
        if code is not None:
            owners.setdefault(code, []).append(key)
    found += [f"code {code!r} is used by {sorted(keys)}" for code, keys in owners.items() if len(keys) > 1]
    return found


def test_every_shipped_exception_class_has_its_own_unique_kebab_case_code():
    codes = exception_codes()
    assert problems(codes) == []
    # the walk reaches the overlay's tree and the four standalone roots
    names = {name for _file, name in codes}
    assert {
        "OverlayError",
        "NotCovered",
        "RequestTimeout",
        "HarnessError",
        "Refusal",
        "CheckFailed",
        "RouterError",
        "NothingListens",
    } <= names


def test_control_a_missing_and_a_duplicated_code_are_found(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "errors.py").write_text(
        'class Root(Exception):\n    code = "root"\n\n\n'
        "class Late(Root):\n    pass\n\n\n"
        'class Twin(Root):\n    code = "root"\n\n\n'
        'class Odd(ValueError):\n    code = "Not_Kebab"\n\n\n'
        'class Plain:\n    code = "root"\n'
    )
    found = problems(exception_codes(tmp_path, ("pkg",)))
    assert found == [
        "pkg/errors.py: Late defines no `code`",
        "pkg/errors.py: Odd.code 'Not_Kebab' is not kebab-case",
        "code 'root' is used by [('pkg/errors.py', 'Root'), ('pkg/errors.py', 'Twin')]",
    ]


def test_the_overlay_command_prints_the_code_in_its_json_error(tmp_path, capsys):
    from replayssm_overlay.cli import main

    assert main(["kernels", "build", "--out", str(tmp_path / "missing-parent" / "out"), "--json"]) == 2
    payload = json.loads(capsys.readouterr().out)
    assert payload["ok"] is False and KEBAB.match(payload["code"])


@pytest.mark.parametrize("error", ["unreachable", "timeout"])
def test_the_smoke_report_carries_the_code(error):
    from replayssm_smoke import report
    from replayssm_smoke.errors import SmokeEnvironmentError
    from replayssm_smoke.httpclient import RequestTimeout

    raised = RequestTimeout("http://node:30000", 1.0) if error == "timeout" else SmokeEnvironmentError("down")
    body = report.stopped_run(raised, "http://node:30000")
    assert body["error"]["code"] == type(raised).code
