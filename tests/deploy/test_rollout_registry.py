"""The rollout in registry mode, for real: a registry (Debian's docker-registry) on the controller's
bridge address, the stand-in server images pushed to it with `make push`, and the three test nodes
pulling by digest through their own Docker daemons.

Runs after tests/deploy/test_rollout.py (file order; same fleet): every node runs v1 then. A digest the
registry lacks, a tag pushed over with other bytes, and an unreachable registry each stop the run in the
Distribute play with one message, before any container is restarted; then a registry-mode rollout
of v2 to node1 switches it to the digest it pulled. (The file also runs on its own, on a fresh fleet.)
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.deploy.fleet import REGISTRY_PORT
from tests.deploy.runner import REPO, ansible_playbook, write_inventory
from tests.infra.dockerd import start_dockerd
from tests.infra.registry import start_registry

pytestmark = pytest.mark.slow

SERVICE = "sglang-test"


def _running(fleet) -> dict[str, dict]:
    return {node.name: node.containers().get(SERVICE) for node in fleet.nodes}


@pytest.fixture(scope="module")
def pushed(fleet, saved_images, tmp_path_factory):
    """The registry on the controller's bridge address with v1 and v2 pushed by `make push`, run in
    the controller namespace against a daemon there. Yields {registry, repository, digests, pusher}."""
    root = tmp_path_factory.mktemp("registry")
    address = f"{fleet.controller_address}:{REGISTRY_PORT}"
    registry = start_registry(
        root / "registry", host=fleet.controller_address, port=REGISTRY_PORT, netns=fleet.controller_ns
    )
    pusher = None
    try:
        pusher = start_dockerd(root / "pusher", netns=fleet.controller_ns, insecure_registries=(address,))
        digests = {}
        for version, image in saved_images.items():
            pusher.docker("load", "-i", str(image.tarball), timeout=300)
            proc = subprocess.run(
                fleet.netns_cmd(
                    "make",
                    "--no-print-directory",
                    "-f",
                    "docker/docker.mk",
                    "push",
                    f"IMAGE={image.ref}",
                    f"REGISTRY={address}/ml",
                    f"WHEEL_PYTHON={sys.executable}",
                ),
                cwd=REPO,
                env=pusher.env(),
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
            digests[version] = re.search(r"deploy by digest: \S+@(sha256:[0-9a-f]{64})", proc.stdout).group(1)
        yield {
            "registry": registry,
            "repository": f"{address}/ml/{image.ref.split(':')[0]}",
            "digests": digests,
            "pusher": pusher,
        }
    finally:
        if pusher is not None:
            pusher.stop()
        registry.stop()


def _inventory(fleet, saved_images, tmp_path, image_ref, version="v2"):
    return write_inventory(
        fleet,
        tmp_path / "inv.json",
        saved_images[version],
        sglang_image_source="registry",
        sglang_image=image_ref,
        sglang_image_tarball="",
        sglang_image_pull_retries=1,
        sglang_image_pull_delay=1,
        sglang_image_registry_timeout=10,
    )


def _stopped_in_distribute(result, before, fleet, message):
    assert result.rc != 0
    assert " ".join(message.split()) in " ".join(result.output.split()), result.output[-4000:]
    assert "Nothing was pulled or restarted" in result.output
    assert "PLAY [Roll out]" not in result.output
    assert _running(fleet) == before


def test_a_digest_the_registry_lacks_stops_before_any_restart(fleet, saved_images, pushed, tmp_path):
    before = _running(fleet)
    missing = "sha256:" + "7" * 64
    inventory = _inventory(fleet, saved_images, tmp_path, f"{pushed['repository']}@{missing}")
    result = ansible_playbook(fleet, "deploy.yml", inventory)
    _stopped_in_distribute(result, before, fleet, f"node1: the registry has no image {pushed['repository']}@{missing}")


def test_a_tag_pushed_over_with_other_bytes_stops_before_any_restart(fleet, saved_images, pushed, tmp_path):
    """v1's tag now carries v2's bytes; an inventory that pins v1's digest under that tag is refused."""
    repository, digests, pusher = pushed["repository"], pushed["digests"], pushed["pusher"]
    pusher.docker("tag", saved_images["v2"].ref, f"{repository}:v1")
    pusher.docker("push", f"{repository}:v1", timeout=300)
    before = _running(fleet)
    inventory = _inventory(fleet, saved_images, tmp_path, f"{repository}:v1@{digests['v1']}", version="v1")
    result = ansible_playbook(fleet, "deploy.yml", inventory)
    _stopped_in_distribute(
        result,
        before,
        fleet,
        f"{repository}:v1 now names {digests['v2']}, but sglang_image pins {digests['v1']}: "
        "other bytes were pushed over the tag",
    )
    for node in fleet.nodes:  # nothing was pulled either
        refs = node.dockerd.docker("image", "ls", "--digests", "--format", "{{.Digest}}", repository).stdout.split()
        assert digests["v1"] not in refs


def test_an_unreachable_registry_stops_before_any_restart(fleet, saved_images, pushed, tmp_path):
    before = _running(fleet)
    nowhere = f"{fleet.controller_address}:{REGISTRY_PORT + 1}/ml/rso-standin-sglang-server"
    inventory = _inventory(fleet, saved_images, tmp_path, f"{nowhere}@{pushed['digests']['v2']}")
    result = ansible_playbook(fleet, "deploy.yml", inventory)
    _stopped_in_distribute(result, before, fleet, f"the registry of {nowhere} does not answer from this node")
    assert "connection refused" in result.output


def test_registry_mode_rollout_pulls_by_digest(fleet, saved_images, pushed, tmp_path):
    """One node (a full three-batch rollout costs minutes and adds nothing to the pull path): it pulls
    by digest and runs what it pulled; the others are not touched."""
    v2 = saved_images["v2"]
    before = _running(fleet)
    ref = f"{pushed['repository']}:v2@{pushed['digests']['v2']}"
    result = ansible_playbook(fleet, "deploy.yml", _inventory(fleet, saved_images, tmp_path, ref), "--limit", "node1")
    assert result.rc == 0, result.output[-4000:]
    node = fleet.nodes[0]
    container = node.containers()[SERVICE]
    assert container["running"] and container["image"] == v2.image_id
    pulled = node.dockerd.docker("image", "inspect", "--format", "{{json .RepoDigests}}", v2.image_id).stdout
    assert f"{pushed['repository']}@{pushed['digests']['v2']}" in pulled  # it came from the registry
    state = node.state(SERVICE)["current"]
    assert state["image_id"] == v2.image_id and state["digest"] == pushed["digests"]["v2"]
    after = _running(fleet)
    assert {name: after[name] for name in ("node2", "node3")} == {name: before[name] for name in ("node2", "node3")}
