# Rollout targets (included from the top Makefile; standalone: make -f deploy/deploy.mk TARGET INVENTORY=...).
#   make deploy        INVENTORY=path   preflight every node, distribute the image, roll out canary-first
#   make preflight     INVENTORY=path   only the checks (nothing changes)
#   make plan          INVENTORY=path   capacity plan per service group: state per request, ReplaySSM off/on
#   make rollback      INVENTORY=path   bring back the container each node ran before the last switch
#   make fleet-status  INVENTORY=path   table of what runs where; STATUS_JSON=file also writes JSON; exits
#                                       non-zero unless every node serves (deploy/fleet-status: 0, 1 or 2)
#                                       (`make patch-status` is the overlay's patch of .venv's SGLang)
#   make deploy-smoke  INVENTORY=path   health + smoke gate against every node (nothing changes)
#   make deploy-monitor INVENTORY=path  install the node jobs Prometheus watches (overlay facts, periodic smoke)
#   make deploy-alerts INVENTORY=path PROMETHEUS_RULES_DIR=dir   rules (+ dashboard) on the Prometheus hosts
#   make deploy-lint                    ansible-lint (production profile) + --syntax-check of every playbook
# Options: LIMIT=host-pattern   SERIAL='[1,"25%"]' (batches; JSON list)   ANSIBLE_ARGS='-e k=v ...'
RSO_DEPLOY_DIR      := deploy
RSO_ANSIBLE_BIN     ?= $(if $(wildcard .venv/bin/ansible-playbook),$(CURDIR)/.venv/bin/,)
ANSIBLE_PLAYBOOK    ?= $(RSO_ANSIBLE_BIN)ansible-playbook
ANSIBLE_LINT        ?= $(RSO_ANSIBLE_BIN)ansible-lint
INVENTORY           ?=
LIMIT               ?=
SERIAL              ?=
STATUS_JSON         ?=
PROMETHEUS_RULES_DIR ?=
ANSIBLE_ARGS        ?=

rso_need_inventory = $(if $(INVENTORY),,$(error INVENTORY is not set: make $@ INVENTORY=path/to/inventory (see deploy/inventories/example)))$(if $(wildcard $(INVENTORY)),,$(error INVENTORY=$(INVENTORY) does not exist: give the path of an inventory file or folder (see deploy/inventories/example)))
rso_playbook = ANSIBLE_CONFIG=$(RSO_DEPLOY_DIR)/ansible.cfg $(ANSIBLE_PLAYBOOK) -i $(INVENTORY) \
	$(if $(LIMIT),--limit '$(LIMIT)') $(if $(SERIAL),-e '{"sglang_rollout_serial": $(SERIAL)}') \
	$(ANSIBLE_ARGS) $(RSO_DEPLOY_DIR)/playbooks/$(1)

.PHONY: deploy preflight plan rollback fleet-status deploy-smoke deploy-monitor deploy-alerts deploy-lint
deploy: ## roll the overlay image out: preflight, distribute, canary then batches (INVENTORY=...)
	$(rso_need_inventory)
	$(call rso_playbook,deploy.yml)

preflight: ## check inventory and nodes without changing anything (INVENTORY=...)
	$(rso_need_inventory)
	$(call rso_playbook,preflight.yml)

plan: ## capacity plan per service group: speculative state per request with ReplaySSM off/on (INVENTORY=...)
	$(rso_need_inventory)
	$(call rso_playbook,plan.yml)

rollback: ## start each node's previous container again, in batches (INVENTORY=...)
	$(rso_need_inventory)
	$(call rso_playbook,rollback.yml)

fleet-status: ## what each node runs, as a table (INVENTORY=..., STATUS_JSON=file for JSON); non-zero unless all serve
	$(rso_need_inventory)
	ANSIBLE_CONFIG=$(RSO_DEPLOY_DIR)/ansible.cfg ANSIBLE_PLAYBOOK=$(ANSIBLE_PLAYBOOK) $(RSO_DEPLOY_DIR)/fleet-status \
	  $(INVENTORY) $(if $(LIMIT),--limit '$(LIMIT)') $(ANSIBLE_ARGS) \
	  $(if $(STATUS_JSON),-e sglang_status_json=$(abspath $(STATUS_JSON)))

deploy-smoke: ## health + smoke gate against every node, nothing changes (INVENTORY=...)
	$(rso_need_inventory)
	$(call rso_playbook,smoke.yml)

deploy-monitor: ## install the node jobs Prometheus watches: overlay facts, periodic smoke (INVENTORY=...)
	$(rso_need_inventory)
	$(call rso_playbook,monitor.yml)

deploy-alerts: ## alert rules (promtool-checked) + dashboard on Prometheus hosts (INVENTORY=... PROMETHEUS_RULES_DIR=...)
	$(rso_need_inventory)
	$(call rso_playbook,alerts.yml) \
	  $(if $(PROMETHEUS_RULES_DIR),-e sglang_alerts_rules_dir=$(abspath $(PROMETHEUS_RULES_DIR)))

deploy-lint: ## ansible-lint (production profile) and --syntax-check of every playbook
	cd $(RSO_DEPLOY_DIR) && $(ANSIBLE_LINT) --profile production
	for p in $(RSO_DEPLOY_DIR)/playbooks/*.yml; do \
	  ANSIBLE_CONFIG=$(RSO_DEPLOY_DIR)/ansible.cfg $(ANSIBLE_PLAYBOOK) -i $(RSO_DEPLOY_DIR)/inventories/example --syntax-check $$p || exit 1; done
