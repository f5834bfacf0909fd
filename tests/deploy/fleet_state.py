"""Starting states of the session's fleet, so that no rollout test relies on what an earlier test left.

The fleet is built once per session (three nodes, their Docker daemons) and every deploy module shares it,
so the state a test starts from is whatever the test before it left: another module's rollout, this
module's rollback, a test that failed half-way. A test names the state it starts from instead (`bring`),
and the state is checked, not assumed: per node, the service's containers (name, image, running), the
stand-in images the daemon holds, the state file's current and previous image, no journal and nothing
staged. When the fleet already has that shape nothing runs (the usual case in file order); otherwise the
steps run from the nearest state in its chain the fleet has, or from a wiped fleet (every container, the
stand-in images, the state and staging folders removed), and the shape is checked again.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass

#: the role's journal files (deploy/roles/sglang/vars/main.yml): their presence means an unfinished run
JOURNALS = ("switching", "swapping", "unrouted", "baking")


@dataclass(frozen=True)
class NodeShape:
    """What a test may rely on of one node: containers as {name: (version, running)}, versions held,
    the state file's (current, previous) versions or None without one, journals and staged files."""

    containers: dict
    held: tuple = ()
    recorded: tuple | None = None
    journals: tuple = ()
    staged: tuple = ()


@dataclass
class State:
    """A starting state: the shape of each node (by name; None: any) and the step that builds it from `parent`
    (None: the parent's shape has it already); the state without a parent is the wiped fleet."""

    shape: Callable[[str], NodeShape | None]
    build: Callable[[], None] | None = None
    parent: str | None = None


def node_shape(node, service: str, images: dict) -> NodeShape:
    """The shape `node` has now (`images`: version -> SavedImage)."""
    versions = {image.image_id: name for name, image in images.items()}

    def version(image_id: str | None) -> str | None:
        return versions.get(image_id, image_id) if image_id else None

    containers = {name: (version(c["image"]), c["running"]) for name, c in node.containers().items()}
    held = tuple(
        sorted(
            version
            for version, image in images.items()
            if node.dockerd.docker("image", "inspect", image.image_id, check=False).returncode == 0
        )
    )
    state = node.state(service)
    recorded = None
    if state:
        recorded = tuple(version((state.get(k) or {}).get("image_id")) for k in ("current", "previous"))
    journals = tuple(sorted(k for k in JOURNALS if (node.state_dir / f"{service}.{k}.json").exists()))
    stage = node.root / "stage"
    staged = tuple(sorted(str(p.relative_to(stage)) for p in stage.rglob("*"))) if stage.is_dir() else ()
    return NodeShape(containers, held, recorded, journals, staged)


def fleet_shape(fleet, service: str, images: dict) -> dict:
    return {node.name: node_shape(node, service, images) for node in fleet.nodes}


def has_shape(now: dict, state: State) -> bool:
    """Whether the fleet's shape `now` is `state`'s, on every node that state names a shape for."""
    return all(state.shape(name) in (None, shape) for name, shape in now.items())


def wipe(fleet, images: dict) -> None:
    """Every container, the stand-in images, the state folder's files and anything staged, on every node."""
    for node in fleet.nodes:
        ids = node.dockerd.docker("ps", "-aq").stdout.split()
        if ids:
            node.dockerd.docker("rm", "-f", *ids)
        for image in images.values():
            node.dockerd.docker("rmi", "-f", image.image_id, check=False)
        for folder in (node.state_dir, node.root / "stage"):
            if folder.is_dir():
                for path in folder.iterdir():
                    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


def bring(fleet, images: dict, service: str, states: dict, name: str) -> None:
    """Give the fleet the shape of `states[name]`, building only what it lacks (module docstring)."""
    chain = [states[name]]
    while chain[-1].parent is not None:
        chain.append(states[chain[-1].parent])
    now = fleet_shape(fleet, service, images)
    start = next((i for i, state in enumerate(chain) if has_shape(now, state)), None)
    if start == 0:
        return
    if start is None:
        wipe(fleet, images)
        start = len(chain) - 1
    for state in reversed(chain[:start]):
        if state.build is not None:
            state.build()
    reached = fleet_shape(fleet, service, images)
    assert has_shape(reached, chain[0]), f"the fleet did not reach the state {name!r}: {reached}"
