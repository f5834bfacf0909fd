# Image targets. Included from the top Makefile (`include docker/docker.mk`), or run on their own from
# the repository root: `make -f docker/docker.mk build`. The work is done by docker/tools/*.py (plain
# python3, standard library), which refuse bad input (no daemon, unpinned or mismatched digest, unknown
# release, base or lane, unreachable registry) with one clear message before any long step starts.
#
#   make build  [SGLANG_RELEASE=0.5.19] [CUDA_LANE=cu130] [KERNELS=build|skip] [IMAGE=name:tag] [ALLOW_DIRTY=1]
#   make save   [IMAGE=...] [DIST_DIR=build/docker/dist]      make load TARBALL=file.tar.gz
#   make push   REGISTRY=host[:port][/path] [IMAGE=...]       make image-diff [IMAGE=...]
#   make pin-base [SGLANG_RELEASE=...] [CUDA_LANE=...] [DIGEST=sha256:...]   make pins   make docker-lint
# Tests only: BASE_STANDIN=true BASE_IMAGE=<local image> builds on a stand-in (labelled as such).

RSO_DOCKER_DIR := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
# the lock file (another one only for tests, or a site that keeps its own pins)
BASE_LOCK ?= $(RSO_DOCKER_DIR)/base.lock
include $(BASE_LOCK)
export RSO_BASE_LOCK := $(abspath $(BASE_LOCK))

RSO_TOOLS_PY ?= python3
# builds the overlay wheel (needs pip + setuptools): the project's .venv when there is one
WHEEL_PYTHON ?= $(if $(wildcard .venv/bin/python),.venv/bin/python,python3)
BASE_PYTHON ?= python3
OVERLAY_VERSION := $(shell sed -n 's/^version *= *"\(.*\)"/\1/p' pyproject.toml)
RSO_DEFAULT_LANE := $(shell sed -n 's/^CUDA_LANE=//p' $(BASE_LOCK))
IMAGE_NAME ?= sglang-replayssm
IMAGE_TAG ?= $(SGLANG_RELEASE)-$(OVERLAY_VERSION)$(if $(filter-out $(RSO_DEFAULT_LANE),$(CUDA_LANE)),-$(CUDA_LANE))
IMAGE ?= $(IMAGE_NAME):$(IMAGE_TAG)
KERNELS ?= build
BASE_IMAGE ?=
BASE_DIGEST ?=
BASE_STANDIN ?= false
# the image is built from the commit; set 1 to build although tracked files have uncommitted changes
ALLOW_DIRTY ?=
BUILD_DIR ?= build/docker
DIST_DIR ?= $(BUILD_DIR)/dist
REGISTRY ?=
DIGEST ?=
HADOLINT ?= $(if $(wildcard .venv/bin/hadolint),.venv/bin/hadolint,hadolint)
export DOCKER_BUILDKIT ?= 0

.PHONY: build save load push image-diff pin-base pins docker-lint

build: ## build sglang-replayssm:<release>-<overlay> on the digest-pinned base (SGLANG_RELEASE=, CUDA_LANE=, KERNELS=build|skip)
	$(RSO_TOOLS_PY) $(RSO_DOCKER_DIR)/tools/build.py --image $(IMAGE) --release "$(SGLANG_RELEASE)" --lane "$(CUDA_LANE)" \
	  --kernels $(KERNELS) --python $(WHEEL_PYTHON) --base-python $(BASE_PYTHON) \
	  --build-dir $(BUILD_DIR) $(if $(BASE_IMAGE),--base-image $(BASE_IMAGE)) $(if $(BASE_DIGEST),--base-digest $(BASE_DIGEST)) \
	  $(if $(filter true 1 yes,$(BASE_STANDIN)),--standin) $(if $(filter true 1 yes,$(ALLOW_DIRTY)),--allow-dirty)

save: ## write IMAGE as DIST_DIR/<name>_<tag>.tar.gz + .sha256 + .image-id (sites without a registry)
	$(RSO_TOOLS_PY) $(RSO_DOCKER_DIR)/tools/distribute.py save --image $(IMAGE) --dir $(DIST_DIR)

load: ## load TARBALL=...tar.gz after checking its sha256, and check the loaded image ID
	$(RSO_TOOLS_PY) $(RSO_DOCKER_DIR)/tools/distribute.py load --tarball "$(TARBALL)"

push: ## tag IMAGE into REGISTRY=host[:port][/path] and push it; prints the digest to deploy by
	$(RSO_TOOLS_PY) $(RSO_DOCKER_DIR)/tools/distribute.py push --image $(IMAGE) --registry "$(REGISTRY)"

image-diff: ## what IMAGE changes versus its base: effective diff, manifest, added layers and their size
	$(RSO_TOOLS_PY) $(RSO_DOCKER_DIR)/tools/image_diff.py --image $(IMAGE) --python $(BASE_PYTHON)

pin-base: ## resolve the base tag of SGLANG_RELEASE/CUDA_LANE to its registry digest, write it to docker/base.lock (prints old and new)
	$(RSO_TOOLS_PY) $(RSO_DOCKER_DIR)/tools/pin_base.py --release "$(SGLANG_RELEASE)" --lane "$(CUDA_LANE)" $(if $(DIGEST),--digest $(DIGEST))

pins: ## every SGLang release and CUDA lane in docker/base.lock, pinned or not (JSON: PINS_JSON=1)
	$(RSO_TOOLS_PY) $(RSO_DOCKER_DIR)/tools/pins.py $(if $(PINS_JSON),--json)

docker-lint: ## hadolint docker/Dockerfile
	$(HADOLINT) $(RSO_DOCKER_DIR)/Dockerfile
