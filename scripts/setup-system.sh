#!/usr/bin/env bash
# Installs the Debian packages the README's commands need on a minimal Debian 12, where only `make` (to run
# them) must already be there. usage: setup-system.sh [demo|test]
#   demo: what `make demo` needs: the Python that builds .venv (python3.11, or PYTHON=python3.X) and its
#         venv module, which Debian ships apart (python3.X-venv), and make
#   test (the default, `make setup`): that, plus what the tests need: the Docker daemon, debootstrap for
#         the stand-in base image, docker-registry for the push/pull-by-digest tests, sshd, iproute2,
#         rsync and python3-requests for the Ansible test hosts, Prometheus (with promtool), Alertmanager
#         and node_exporter for the monitoring tests
# Idempotent: installs only what is missing. Needs root when something is missing; says what to install
# otherwise. Waits (up to DPKG_LOCK_WAIT seconds, default 600) for another apt/dpkg run to let go of the
# dpkg lock instead of failing. Progress goes to stderr, so `make demo-json` keeps stdout for its JSON.
# (Where systemd runs, Debian starts docker-registry's own service on :5000; the tests never use it,
# they start their own registries.) tests/docker/test_fresh_setup.py runs it in a bare Debian 12 rootfs.
set -euo pipefail
DPKG_LOCK_WAIT=${DPKG_LOCK_WAIT:-600}
need=(docker.io docker-registry debootstrap openssh-server openssh-client iproute2 rsync make python3-requests)
need+=(prometheus prometheus-alertmanager prometheus-node-exporter)
# the Python setup-venv.sh builds .venv with (a bare name like python3.11; a path is left to setup-venv.sh)
python_name=$(basename "${PYTHON:-python3.11}")
demo_need=(make)
[[ $python_name =~ ^python3\.[0-9]+$ ]] && demo_need+=("$python_name" "$python_name-venv")
case "${1:-test}" in
  demo) need=("${demo_need[@]}") ;;
  test) need=("${demo_need[@]}" "${need[@]}") ;;
  *) echo "usage: setup-system.sh [demo|test]   (demo: what make demo needs; test, the default: make test's too)" >&2
     exit 2 ;;
esac
missing=()
for p in "${need[@]}"; do
  [[ " ${missing[*]} " == *" $p "* ]] && continue
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
