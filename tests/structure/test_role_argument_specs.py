"""Every role's variables are typed: `meta/argument_specs.yml` has an entry (type, description; choices
where the values are few) for every variable of the role's `defaults/main.yml`, its literal default is the
defaults file's value, and every tasks file of the role is an entry point with those options (a role
included with `tasks_from` is validated too). So a variable added to a role without its spec is caught
here. Read with PyYAML only; the control shows a missing entry, a wrong default and a missing entry point
are found. That Ansible then refuses a wrong type before any task is `tests/deploy/test_static.py`'s."""

from __future__ import annotations

from pathlib import Path

import yaml

ROLES = Path(__file__).resolve().parents[2] / "deploy" / "roles"
TYPES = {"str", "int", "float", "bool", "list", "dict", "path", "raw"}


def spec_problems(role: Path) -> list:
    """What the role's argument specs lack against its defaults and tasks files."""
    defaults_file = role / "defaults" / "main.yml"
    defaults = (yaml.safe_load(defaults_file.read_text()) or {}) if defaults_file.is_file() else {}
    spec_file = role / "meta" / "argument_specs.yml"
    if not spec_file.is_file():
        return [f"{role.name}: no meta/argument_specs.yml"]
    specs = (yaml.safe_load(spec_file.read_text()) or {}).get("argument_specs") or {}
    found = []
    entry_points = {"main"} | {p.stem for p in (role / "tasks").glob("*.yml")}
    found += [
        f"{role.name}: tasks/{name}.yml is no entry point of the spec" for name in sorted(entry_points - set(specs))
    ]
    main = (specs.get("main") or {}).get("options") or {}
    found += [
        f"{role.name}: entry point {name} has other options than main"
        for name, spec in sorted(specs.items())
        if ((spec or {}).get("options") or {}) != main
    ]
    for variable, value in defaults.items():
        option = main.get(variable)
        if option is None:
            found.append(f"{role.name}: {variable} has no spec entry")
            continue
        if option.get("type") not in TYPES or not option.get("description"):
            found.append(f"{role.name}: {variable} needs a type and a description")
        templated = isinstance(value, str) and "{{" in value
        if not templated and option.get("default") != value:
            found.append(f"{role.name}: {variable}'s spec default {option.get('default')!r} is not {value!r}")
        if "choices" in option and not templated and value not in option["choices"]:
            found.append(f"{role.name}: {variable}'s default {value!r} is not one of its choices")
    found += [
        f"{role.name}: {variable} is in the spec but not in defaults/main.yml"
        for variable in sorted(main)
        if variable not in defaults
    ]
    return found


def test_every_role_variable_has_a_typed_spec_entry_on_every_entry_point():
    roles = sorted(p for p in ROLES.iterdir() if p.is_dir())
    assert len(roles) >= 9
    assert [problem for role in roles for problem in spec_problems(role)] == []


def test_control_a_missing_entry_a_wrong_default_and_a_missing_entry_point_are_found(tmp_path):
    role = tmp_path / "demo_role"
    for folder in ("defaults", "meta", "tasks"):
        (role / folder).mkdir(parents=True)
    (role / "defaults" / "main.yml").write_text("demo_port: 80\ndemo_mode: a\ndemo_new: 1\n")
    (role / "tasks" / "main.yml").write_text("[]\n")
    (role / "tasks" / "other.yml").write_text("[]\n")
    (role / "meta" / "argument_specs.yml").write_text(
        yaml.safe_dump(
            {
                "argument_specs": {
                    "main": {
                        "options": {
                            "demo_port": {"type": "int", "default": 8080, "description": "port"},
                            "demo_mode": {"type": "str", "choices": ["b"], "default": "a", "description": "mode"},
                        }
                    }
                }
            }
        )
    )
    assert spec_problems(role) == [
        "demo_role: tasks/other.yml is no entry point of the spec",
        "demo_role: demo_port's spec default 8080 is not 80",
        "demo_role: demo_mode's default 'a' is not one of its choices",
        "demo_role: demo_new has no spec entry",
    ]
