# megahour: `make up` installs the deploy toolchain (Ansible, the collections, megahour's core), stands up
# the local cluster and deploys onto it; `make test` adds the test stack and runs everything (lint, unit,
# integration, molecule).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(CURDIR)/$(VENV)/bin
export PATH := $(BIN):$(PATH)
# molecule and ansible read the project's ansible.cfg from here.
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
NODES ?= 2
GPUS_PER_NODE ?= 2
# pytest-xdist processes for the tests that need no containers (`make test`, `make unit`, `make integration`).
TEST_WORKERS ?= 2
# REMOTE_STORE=1: add the `store` container, the cache's under-store as a remote S3 server.
REMOTE_STORE ?=
# BACKUP_CONTROLLER=1: add `ctl2`, a backup slurmctld (docs/resilience.md).
BACKUP_CONTROLLER ?=
# CACHE_MASTERS=3: three Alluxio masters (ctl, gpu-1, gpu-2), an HA embedded journal (docs/delivery.md), on a
# new cluster (`make down` first: `cluster status` reads which containers run a master from their labels).
# Each later `make up` needs the same CACHE_MASTERS: another count is a changed master set, refused.
CACHE_MASTERS ?= 1
# The molecule scenarios' lanes, run at once (tests/molecule/lanes.py): a pytest -k expression a lane, its
# scenarios one after the other. One lane runs them all in turn: MOLECULE_LANES="'cluster or faults or warehouse'".
MOLECULE_LANES ?= cluster 'faults or warehouse'
# TRAIN=1: install the trainer (torch, about 3.5 GB) on the compute nodes (docs/training.md).
TRAIN ?=
DEPLOY_VARS := $(if $(TRAIN),-e runtime_train=true)

.PHONY: help venv venv-dev prereqs image up deploy down status test lint unit integration molecule bench-deploy clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

venv: $(VENV)/.installed $(VENV)/.collections ## Create .venv with what deploying needs: Ansible, the collections, megahour's core

venv-dev: venv $(VENV)/.installed-dev ## Add the test stack to .venv (torch, chDB, simulators, molecule, linters)

$(VENV)/.installed: pyproject.toml
	@if ! $(PYTHON) -c 'import ensurepip, venv' 2>/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv; \
	  else echo "error: $(PYTHON) cannot create virtual environments; install python3-venv" >&2; exit 1; fi; \
	fi
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	@echo "==> installing megahour's core and the deploy toolchain (the 'deploy' extra, about 0.6 GB)"
	$(BIN)/pip install -q -e '.[deploy]'
	touch $@

# The test and development stack, only for `make test` and the targets under it: a deploy never needs it.
$(VENV)/.installed-dev: $(VENV)/.installed
	@echo "==> installing the test stack (the 'dev' extra, about 7 GB with torch's CUDA build; minutes)"
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

# The collections requirements.yml pins: compares what ansible loads (ansible.cfg's collections_path, then the
# venv's ansible package) with the pins and runs `ansible-galaxy collection install` only for those missing or
# at another version, into .cache/collections. With the pinned ansible package nothing is downloaded.
$(VENV)/.collections: requirements.yml $(VENV)/.installed
	$(BIN)/python -m megahour.deploy.collection_pins --requirements requirements.yml --install
	touch $@

prereqs: venv ## Install podman, runc, debootstrap and podman settings (root on Debian/Ubuntu)
	megahour host prereqs --install

image: prereqs ## Build the node image (cached by recipe)
	megahour cluster image

up: prereqs ## Stand up the local cluster and deploy site.yml onto it
	megahour cluster up --nodes $(NODES) --gpus-per-node $(GPUS_PER_NODE) $(if $(REMOTE_STORE),--remote-store) $(if $(BACKUP_CONTROLLER),--backup-controller) --cache-masters $(CACHE_MASTERS)
	megahour deploy -i inventories/local $(DEPLOY_VARS)
	megahour cluster status

deploy: venv ## Deploy site.yml onto the running local cluster (megahour deploy; artifacts in .cache/deploy-runs)
	megahour deploy -i inventories/local $(DEPLOY_VARS)

down: venv ## Remove the local cluster's containers, network and inventory
	megahour cluster down

status: venv ## Show hosts, addresses and service health
	megahour cluster status

lint: venv-dev ## ruff and ansible-lint (production profile, no skip list)
	ruff check python tests benchmarks library module_utils roles
	ruff format --check python tests benchmarks library module_utils roles
	ansible-lint

unit: venv-dev ## Unit and property tests (no containers)
	pytest -m "not integration and not molecule" -n $(TEST_WORKERS)

integration: venv-dev ## Tests that run ansible-playbook/ansible-inventory locally
	pytest -m integration -n $(TEST_WORKERS)

molecule: prereqs venv-dev ## The molecule scenarios (cluster, faults, warehouse) in two lanes; one with: pytest -m molecule -k NAME
	python -m tests.molecule.lanes $(MOLECULE_LANES)

# Two steps, one after the other (docs/local-cluster.md): the tests that need no containers spread over
# TEST_WORKERS processes (most are one-threaded), then the scenarios in their lanes, `cluster` beside
# `faults` and `warehouse` (measured: one's deploys fill the other's waits). Both always run; the exit
# status is the first failure's.
test: prereqs venv-dev lint ## Everything: lint, unit, integration and molecule; each run ends with pytest's summary
	@status=0; \
	echo "==> pytest -m 'not molecule' -n $(TEST_WORKERS)"; \
	pytest -m "not molecule" -n $(TEST_WORKERS) || status=$$?; \
	echo "==> the molecule scenarios, lanes at once: $(MOLECULE_LANES)"; \
	python -m tests.molecule.lanes $(MOLECULE_LANES) || { rc=$$?; [ $$status != 0 ] || status=$$rc; }; \
	exit $$status

bench-deploy: prereqs ## Time `make up` on a cold and a warm image cache
	python benchmarks/deploy.py --json benchmarks/results/deploy.json

clean: ## Remove the venv and caches (not the cluster: use `make down`)
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache
