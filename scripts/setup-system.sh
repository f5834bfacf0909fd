#!/usr/bin/env bash
# Installs the Debian packages the tests need (Docker daemon, debootstrap for the stand-in base image,
# docker-registry for the push/pull-by-digest tests, sshd, iproute2, rsync and python3-requests for the
# Ansible test hosts). Idempotent: installs only what is missing. Needs root when something is missing;
# says what to install otherwise. Waits (up to DPKG_LOCK_WAIT seconds, default 600) for another apt/dpkg
# run to let go of the dpkg lock instead of failing. Progress goes to stderr, so `make demo-json` keeps
# stdout for its JSON. (Where systemd runs, Debian starts docker-registry's own service on :5000; the
# tests never use it, they start their own registries.)
set -euo pipefail
DPKG_LOCK_WAIT=${DPKG_LOCK_WAIT:-600}
need=(docker.io docker-registry debootstrap openssh-server openssh-client iproute2 rsync make python3-requests)
missing=()
for p in "${need[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then echo "setup-system: all packages present" >&2; exit 0; fi
if [ "$(id -u)" != 0 ]; then
  echo "setup-system: missing Debian packages: ${missing[*]}; install them as root (apt-get install ${missing[*]})" >&2
  exit 2
fi
echo "setup-system: installing ${missing[*]} (waiting up to ${DPKG_LOCK_WAIT}s if another apt holds the dpkg lock)" >&2
export DEBIAN_FRONTEND=noninteractive
apt=(apt-get -o "DPkg::Lock::Timeout=$DPKG_LOCK_WAIT")
"${apt[@]}" update -qq >&2
"${apt[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup-system: done" >&2
