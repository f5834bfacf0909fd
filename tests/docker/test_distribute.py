"""Moving the image to a site without a registry: `make save` writes tarball + sha256 + image ID, and
`make load` checks both and yields the same image ID (a refused load leaves the daemon as it was);
`make push` refuses an unreachable registry."""

from __future__ import annotations

import io
import tarfile

import pytest

from tests.docker.helpers import make

pytestmark = pytest.mark.slow


def test_save_then_load_yields_the_same_image_id(dockerd, built_image, tmp_path):
    proc = make(dockerd, "save", f"IMAGE={built_image.ref}", f"DIST_DIR={tmp_path}")
    assert proc.returncode == 0, proc.stdout
    stem = built_image.ref.replace(":", "_")
    tarball = tmp_path / f"{stem}.tar.gz"
    assert (tmp_path / f"{stem}.image-id").read_text().strip() == built_image.id
    assert (tmp_path / f"{stem}.tar.gz.sha256").read_text().split()[1] == tarball.name
    dockerd.docker("tag", built_image.ref, "rso-keep:saved")  # keep the layers; drop the name the tarball restores
    dockerd.docker("rmi", built_image.ref)
    try:
        proc = make(dockerd, "load", f"TARBALL={tarball}")
        assert proc.returncode == 0, proc.stdout
        assert f"{built_image.id} (image ID checked)" in proc.stdout
        assert (
            dockerd.docker("image", "inspect", "--format", "{{.Id}}", built_image.ref).stdout.strip() == built_image.id
        )
    finally:
        dockerd.docker("tag", "rso-keep:saved", built_image.ref)
        dockerd.docker("rmi", "rso-keep:saved")


def test_load_refuses_a_stale_image_id_file_naming_an_image_already_there(dockerd, built_image, standin_base, tmp_path):
    """The .image-id names the base (on the daemon already): the tarball loads as the overlay image, so
    `make load` must refuse, not report the base as checked because it exists."""
    proc = make(dockerd, "save", f"IMAGE={built_image.ref}", f"DIST_DIR={tmp_path}")
    assert proc.returncode == 0, proc.stdout
    stem = built_image.ref.replace(":", "_")
    (tmp_path / f"{stem}.image-id").write_text(built_image.base_id + "\n")
    proc = make(dockerd, "load", f"TARBALL={tmp_path / (stem + '.tar.gz')}")
    assert proc.returncode != 0, proc.stdout
    assert f"loaded as {built_image.id}, not {built_image.base_id}" in proc.stdout, proc.stdout
    assert "image ID checked" not in proc.stdout


def test_load_refuses_a_damaged_copy(dockerd, built_image, tmp_path):
    tarball = tmp_path / "img.tar.gz"
    tarball.write_bytes(b"not an image")
    (tmp_path / "img.tar.gz.sha256").write_text("0" * 64 + "  img.tar.gz\n")
    (tmp_path / "img.image-id").write_text(built_image.id + "\n")
    proc = make(dockerd, "load", f"TARBALL={tarball}")
    assert proc.returncode != 0 and "the copy is damaged" in proc.stdout, proc.stdout


def test_push_refuses_an_unreachable_registry(dockerd, built_image):
    proc = make(dockerd, "push", f"IMAGE={built_image.ref}", "REGISTRY=127.0.0.1:9/ml")
    assert proc.returncode != 0 and "registry 127.0.0.1:9 is not reachable" in proc.stdout, proc.stdout
    proc = make(dockerd, "push", f"IMAGE={built_image.ref}")
    assert proc.returncode != 0 and "push needs REGISTRY=" in proc.stdout, proc.stdout


def _tiny_image(dockerd, folder, tag: str, marker: str) -> str:
    """A one-file image (`docker import`), tagged `tag`; returns its image ID."""
    tar = folder / f"{marker}.tar"
    with tarfile.open(tar, "w") as archive:
        info = tarfile.TarInfo("marker")
        info.size = len(marker)
        archive.addfile(info, io.BytesIO(marker.encode()))
    dockerd.docker("import", str(tar), tag)
    return dockerd.docker("image", "inspect", "--format", "{{.Id}}", tag).stdout.strip()


@pytest.mark.parametrize("tag_was_there", [True, False], ids=["tag-held-another-image", "tag-new"])
def test_a_refused_load_leaves_the_daemon_as_it_was(dockerd, tmp_path, tag_was_there):
    """The tarball's image does not have the ID its .image-id names (the refused image
    must not stay loaded and hold the tag): the image is removed again, the tag names what it named before."""
    tag = f"rso-refused-load:{'held' if tag_was_there else 'new'}"
    refused = _tiny_image(dockerd, tmp_path, tag, f"refused-{tag_was_there}")
    proc = make(dockerd, "save", f"IMAGE={tag}", f"DIST_DIR={tmp_path}")
    assert proc.returncode == 0, proc.stdout
    dockerd.docker("rmi", tag)
    other = _tiny_image(dockerd, tmp_path, "rso-refused-load:other", f"other-{tag_was_there}")
    if tag_was_there:
        dockerd.docker("tag", other, tag)
    stem = tag.replace(":", "_")
    (tmp_path / f"{stem}.image-id").write_text(other + "\n")
    try:
        proc = make(dockerd, "load", f"TARBALL={tmp_path / (stem + '.tar.gz')}")
        assert proc.returncode == 2, proc.stdout
        assert f"loaded as {refused}, not {other}" in proc.stdout
        assert f"removed the refused image {refused}" in proc.stdout
        assert dockerd.docker("image", "inspect", refused, check=False).returncode != 0
        now = dockerd.docker("image", "inspect", "--format", "{{.Id}}", tag, check=False)
        if tag_was_there:
            assert now.stdout.strip() == other and f"{tag} names {other} again" in proc.stdout
        else:
            assert now.returncode != 0 and f"removed the tag {tag} (it was not there before)" in proc.stdout
    finally:
        dockerd.docker("rmi", "-f", other, check=False)
