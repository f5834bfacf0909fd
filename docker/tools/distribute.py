"""`make save`, `make load` and `make push`: move a built image to sites with or without a registry.

Why it exists: `docker load` drops the registry digest (moby/moby#22011), so an air-gapped site checks a
loaded image by its IMAGE ID (the config digest, which survives save/load), never by a registry digest.
`save` therefore writes three files next to each other, atomically:
    DIR/<name>_<tag>.tar.gz          docker save, gzip-compressed (pigz when installed)
    DIR/<name>_<tag>.tar.gz.sha256   `sha256sum` format, check with `sha256sum -c`
    DIR/<name>_<tag>.image-id        the image ID that `docker load` must yield
`load` checks the sha256, loads, and refuses unless the loaded image has that ID; a refused load puts the
daemon back (the loaded image removed, each of its tags naming what it named before). `push` checks that
the registry answers before it tags and pushes, and prints the pushed digest.

    python3 docker/tools/distribute.py save --image NAME:TAG --dir DIR
    python3 docker/tools/distribute.py load --tarball FILE
    python3 docker/tools/distribute.py push --image NAME:TAG --registry HOST[:PORT][/PATH]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from preflight import check_daemon

from common import Refusal, check_registry_reachable, docker, image_id, log, run_tool


def _need_image(image: str) -> str:
    check_daemon()
    found = image_id(image)
    if found is None:
        raise Refusal(f"no image {image} in this Docker daemon", "build it first (`make build`) or pass IMAGE=NAME:TAG")
    return found


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def save(image: str, out_dir: Path) -> Path:
    found = _need_image(image)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = image.replace("/", "_").replace(":", "_")
    tarball = out_dir / f"{stem}.tar.gz"
    partial = out_dir / f".{stem}.tar.gz.partial"
    gzip = shutil.which("pigz") or "gzip"
    log(f"docker save {image} | {Path(gzip).name} -> {tarball}")
    with open(partial, "wb") as sink:
        saver = subprocess.Popen([os.environ.get("DOCKER", "docker"), "save", image], stdout=subprocess.PIPE)
        zipper = subprocess.run([gzip, "-1", "-c"], stdin=saver.stdout, stdout=sink)
        saver.stdout.close()
        if saver.wait() != 0 or zipper.returncode != 0:
            partial.unlink(missing_ok=True)
            raise Refusal(f"docker save {image} failed", "see the message above (disk space?)")
    partial.rename(tarball)
    Path(f"{tarball}.sha256").write_text(f"{_sha256(tarball)}  {tarball.name}\n")
    (out_dir / f"{stem}.image-id").write_text(found + "\n")
    print(f"saved {image} {found}\n  {tarball}\n  {tarball}.sha256\n  {out_dir / (stem + '.image-id')}")
    return tarball


def load(tarball: Path | None) -> str:
    if tarball is None:
        raise Refusal(
            "make load needs TARBALL=<the .tar.gz that `make save` wrote>",
            "e.g. make load TARBALL=build/docker/dist/sglang-replayssm_0.5.19-0.1.0.tar.gz (its .sha256 "
            "and .image-id files beside it)",
        )
    check_daemon()
    sums = Path(f"{tarball}.sha256")
    id_file = tarball.parent / (tarball.name.removesuffix(".tar.gz") + ".image-id")
    for needed in (tarball, sums, id_file):
        if not needed.exists():
            raise Refusal(f"{needed} is missing", "copy all three files that `make save` wrote")
    expected_sum = sums.read_text().split()[0]
    if _sha256(tarball) != expected_sum:
        raise Refusal(
            f"{tarball} does not match its sha256 ({expected_sum}): the copy is damaged", "copy the tarball again"
        )
    expected_id = id_file.read_text().strip()
    tags_before, ids_before = _tags(), _image_ids()
    output = docker("load", "-i", str(tarball)).stdout
    loaded = loaded_image_ids(output)
    if expected_id not in loaded:
        undone = _undo_load(output, loaded, tags_before, ids_before)
        raise Refusal(
            f"{tarball} loaded as {', '.join(loaded) or 'nothing'}, not {expected_id} as {id_file.name} "
            f"says; refused, and the daemon is as it was: {undone}",
            "the tarball and its .image-id file are not from one `make save`: copy all three files again",
        )
    tags = docker("image", "inspect", "--format", '{{join .RepoTags " "}}', expected_id).stdout.strip()
    print(f"loaded {tags} {expected_id} (image ID checked)")
    return expected_id


def _tags() -> dict[str, str]:
    """Every `repository:tag` on the daemon and the image ID it names."""
    listed = docker("images", "--no-trunc", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}").stdout.split("\n")
    return dict(line.split(" ", 1) for line in listed if line and "<none>" not in line)


def _image_ids() -> set[str]:
    return set(docker("images", "-a", "-q", "--no-trunc").stdout.split())


def _undo_load(output: str, loaded: list[str], tags_before: dict[str, str], ids_before: set[str]) -> str:
    """Put the daemon back as it was before a refused `docker load`: each tag the tarball carried names
    what it named before (or is removed, if it is new), and each image the load added is removed. Returns
    what it did, for the message (the Ansible tarball path does the same: deploy/roles/sglang_image)."""
    done = []
    refs = [
        line.removeprefix("Loaded image: ").strip() for line in output.splitlines() if line.startswith("Loaded image: ")
    ]
    for ref in refs:
        previous = tags_before.get(ref)
        if previous is None:
            docker("image", "rm", "--no-prune", ref, check=False)
            done.append(f"removed the tag {ref} (it was not there before)")
        elif image_id(ref) != previous:
            docker("tag", previous, ref)
            done.append(f"{ref} names {previous} again")
    for found in (found for found in loaded if found not in ids_before):
        if image_id(found) is not None:
            docker("image", "rm", found, check=False)
        done.append(f"{'removed' if image_id(found) is None else 'COULD NOT remove'} the refused image {found}")
    return "; ".join(done) or "it loaded nothing new"


def loaded_image_ids(output: str) -> list[str]:
    """The image IDs `docker load` reports (`Loaded image: REF` is resolved to REF's ID, `Loaded image ID: ID`
    taken as it is), in order, without repeats."""
    ids = []
    for line in output.splitlines():
        if line.startswith("Loaded image ID: "):
            found = line.removeprefix("Loaded image ID: ").strip()
        elif line.startswith("Loaded image: "):
            found = image_id(line.removeprefix("Loaded image: ").strip())
        else:
            continue
        if found and found not in ids:
            ids.append(found)
    return ids


def push(image: str, registry: str) -> str:
    if not registry:
        raise Refusal("push needs REGISTRY=host[:port][/path]", "e.g. `make push REGISTRY=registry.example.com/ml`")
    _need_image(image)
    check_registry_reachable(registry.split("/", 1)[0])
    target = f"{registry.rstrip('/')}/{image.split('/')[-1]}"
    docker("tag", image, target)
    pushed = docker("push", target, check=False, capture=False, capture_stderr=True)
    if pushed.returncode != 0:
        docker("image", "rm", target, check=False)  # drop the tag made for the push; the image stays
        raise Refusal(
            f"registry {registry} refused the push of {target} (nothing was pushed under that tag): "
            f"{(pushed.stderr or '').strip()}",
            "check the registry's state (read-only? full? your permissions: `docker login`), then push again",
        )
    digests = docker("image", "inspect", "--format", '{{join .RepoDigests " "}}', target).stdout.split()
    pushed = next((d for d in digests if d.startswith(target.rsplit(":", 1)[0] + "@")), "")
    print(f"pushed {target}\n  deploy by digest: {pushed}")
    return pushed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    p_save = sub.add_parser("save")
    p_save.add_argument("--image", required=True)
    p_save.add_argument("--dir", required=True)
    p_load = sub.add_parser("load")
    p_load.add_argument("--tarball", type=lambda text: Path(text) if text else None, default=None)
    p_push = sub.add_parser("push")
    p_push.add_argument("--image", required=True)
    p_push.add_argument("--registry", default="")
    args = parser.parse_args()
    if args.action == "save":
        save(args.image, Path(args.dir))
    elif args.action == "load":
        load(args.tarball)
    else:
        push(args.image, args.registry)
    return 0


if __name__ == "__main__":
    run_tool(main)
