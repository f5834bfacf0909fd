"""Prints a JSON map {path: sha256 | "symlink:<target>" | "dir"} of a container's whole filesystem.

Fed on stdin to the image's own `python3 -` (standard library only), so the tests can compare the overlay
image with its base file by file, inside both images. Kernel and runtime mounts (/proc, /sys, /dev, and
the per-container /etc/hostname, /etc/hosts, /etc/resolv.conf) are skipped.
"""

import hashlib
import json
import os
import sys

SKIP_DIRS = {"/proc", "/sys", "/dev"}
SKIP_FILES = {"/etc/hostname", "/etc/hosts", "/etc/resolv.conf", "/.dockerenv"}


def snapshot(top="/"):
    entries = {}
    for root, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if os.path.join(root, d) not in SKIP_DIRS)
        for name in dirs:
            path = os.path.join(root, name)
            entries[path] = "symlink:" + os.readlink(path) if os.path.islink(path) else "dir"
        for name in files:
            path = os.path.join(root, name)
            if path in SKIP_FILES:
                continue
            if os.path.islink(path):
                entries[path] = "symlink:" + os.readlink(path)
            elif os.path.isfile(path):
                with open(path, "rb") as handle:
                    entries[path] = hashlib.sha256(handle.read()).hexdigest()
            else:
                entries[path] = "special"
    return entries


if __name__ == "__main__":
    json.dump(snapshot(), sys.stdout)
