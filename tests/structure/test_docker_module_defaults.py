"""The community.docker modules get the node's daemon from one place, and the container is stopped by one
task file. Every play of `deploy/playbooks` over the nodes sets `module_defaults` for the module group
`group/community.docker.docker` from `sglang_docker_module_defaults` (roles/sglang/vars/main.yml), so a docker
task names `docker_host` only where it is delegated to another node (whose daemon the play host's defaults do
not name). Stopping the service container is `roles/sglang_service/tasks/stop.yml`, included with the
caller's task name; a second `docker_container` task with `state: stopped` is a copy of it. Read with PyYAML
only, so a task added with its own `docker_host` or its own stop is caught here, without Ansible."""

from __future__ import annotations

from pathlib import Path

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
HOOK = {"group/community.docker.docker": "{{ sglang_docker_module_defaults }}"}
STOP_FILE = "roles/sglang_service/tasks/stop.yml"


def _tasks(items):
    """Every task of a task list, the ones inside blocks (block, rescue, always) included."""
    for item in items or []:
        yield item
        for part in ("block", "rescue", "always"):
            yield from _tasks(item.get(part))


def docker_tasks():
    """(file relative to deploy/, task, module, its arguments) of every community.docker task in deploy/."""
    files = sorted(DEPLOY.glob("roles/*/tasks/*.yml")) + sorted(DEPLOY.glob("playbooks/*.yml"))
    for path in files:
        entries = yaml.safe_load(path.read_text()) or []
        plays = [entry for entry in entries if "hosts" in entry]
        task_lists = [play.get(part) for play in plays for part in ("pre_tasks", "tasks", "post_tasks")] or [entries]
        for task in (task for tasks in task_lists for task in _tasks(tasks)):
            for module, args in task.items():
                if module.startswith("community.docker."):
                    yield str(path.relative_to(DEPLOY)), task, module, args or {}


def test_no_docker_task_names_the_daemon_unless_delegated_to_another_node():
    found = list(docker_tasks())
    assert len(found) >= 15
    named = [
        (file, task["name"]) for file, task, _, args in found if "docker_host" in args and "delegate_to" not in task
    ]
    assert named == []


def test_every_play_over_the_nodes_gives_the_docker_modules_the_node_daemon():
    plays = [
        (path.name, play)
        for path in sorted(DEPLOY.glob("playbooks/*.yml"))
        for play in yaml.safe_load(path.read_text())
        if "sglang_hosts" in str(play.get("hosts", ""))
    ]
    assert len(plays) >= 10
    assert [(name, play["name"]) for name, play in plays if play.get("module_defaults") != HOOK] == []
    shared = yaml.safe_load((DEPLOY / "roles/sglang/vars/main.yml").read_text())
    assert shared["sglang_docker_module_defaults"] == {"docker_host": "{{ sglang_docker_host }}"}


def test_the_service_container_is_stopped_by_one_task_file():
    stops = [(file, module) for file, _, module, args in docker_tasks() if args.get("state") == "stopped"]
    assert stops == [(STOP_FILE, "community.docker.docker_container")]
    callers = [
        task
        for path in sorted(DEPLOY.glob("roles/sglang_service/tasks/*.yml"))
        for task in _tasks(yaml.safe_load(path.read_text()))
        if task.get("ansible.builtin.include_tasks") == "stop.yml"
    ]
    assert len(callers) == 5
    # the included task takes the caller's name, so a failure's message names the same task as before
    assert all(task["vars"]["sglang_service_stop_task"] == task["name"] for task in callers)
