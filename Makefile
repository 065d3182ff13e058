# pytest-dgxspark: `make demo` (the suite against a simulated DGX Spark) and `make test` (the project's own tests).
# Both set themselves up on a fresh Debian/Ubuntu machine: system packages, a virtualenv, the package.

SHELL := /bin/bash
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
PYTEST := $(VENV)/bin/pytest
ANSIBLE_PLAYBOOK ?= $(VENV)/bin/ansible-playbook
# `make demo` passes --site only when SITE is given (a scenario carrying its own site keeps it); `make conformance`
# and `make rke2/*` need SITE= (a real target is never implied).
SITE_GIVEN := $(filter-out undefined default,$(origin SITE))
SITE ?=
SCENARIO ?= healthy
REPORT_DIR ?= reports
PYTEST_ARGS ?=
# make test's pytest-xdist workers; --dist loadfile keeps each test file on one worker, so a module's shared fixture
# (a testbed, tests/test_e2e.py's pool of suite runs) is made once. Three on two cores: two carry the bundled
# scenarios' pools (tests/test_e2e.py, tests/test_e2e_other_half.py), the third the files that mostly wait
# (timeouts, deadlines, SSH); measured 2026-12-02: 972 s with 3 against 1038 s with 2, the same CPU.
TEST_WORKERS ?= 3
# make bench's node counts, comma separated: on the stand-in (empty: 1,4,16,32), and on the real control plane where it
# is built, each beside a stand-in run of the same checks (empty: 1,4; none: the stand-in only)
BENCH_NODES ?=
BENCH_REAL_NODES ?=
# Debian packages the testbed and the report tests need: a real sshd, gcc for the NVML mock, iproute2 for
# network namespaces, Chromium and poppler to render and print the handover summary.
SYSTEM_PACKAGES := openssh-server openssh-client gcc libc6-dev iproute2 procps util-linux chromium poppler-utils fonts-noto-cjk
SYSTEM_BINARIES := /usr/sbin/sshd /usr/bin/ssh gcc ip ps unshare chromium pdftotext

# The machines' images set PYTHONDONTWRITEBYTECODE=1: without .pyc files every suite run and testbed process compiles
# the package from source and pytest rewrites its asserts again (1.6-1.8 CPU s of a 6.5 s suite run, measured
# 2026-12-02); __pycache__/ is ignored by git.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: help setup system-deps controlplane demo test test-fast test-provisioning test-realplane test-standin lint conformance bench clean site-given

help: ## list every target with one line (this list)
	@awk 'BEGIN {FS = ":[^#]*## "} /^[A-Za-z0-9_.\/-]+:[^=]*## / {printf "make %-26s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

system-deps: ## install the Debian packages the testbed and the report tests need, when missing
	@missing=""; for b in $(SYSTEM_BINARIES); do command -v $$b >/dev/null 2>&1 || missing="$$missing $$b"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages (missing:$$missing)"; \
	  if [ "$$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $(SYSTEM_PACKAGES) >/dev/null; \
	fi

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $@

controlplane: ## build the real control plane (kube-apiserver, kube-scheduler, kube-controller-manager, etcd, kwok) into .cache/controlplane/bin once; without Go it says so and setup goes on
	@./pytest_dgxspark/testbed/controlplane/build.sh

setup: system-deps $(VENV)/.installed controlplane ## system packages, the virtualenv .venv, the package and the real control plane

demo: setup ## the whole suite against a simulated DGX Spark [SCENARIO=healthy]; prints the bundle
	@before=$$(readlink $(REPORT_DIR)/latest 2>/dev/null || true); \
	$(PYTEST) suites --testbed $(SCENARIO) $(if $(SITE_GIVEN),--site sites/$(SITE)) --report-dir $(REPORT_DIR) -p no:cacheprovider $(PYTEST_ARGS); \
	status=$$?; \
	after=$$(readlink $(REPORT_DIR)/latest 2>/dev/null || true); \
	if [ -n "$$after" ] && [ "$$after" != "$$before" ] && [ -f $(REPORT_DIR)/latest/results.json ]; then \
	  echo "bundle: $$(readlink -f $(REPORT_DIR)/latest)"; \
	  $(PY) -c "import json,sys; d=json.load(open('$(REPORT_DIR)/latest/results.json')); print('verdict:', d['verdict'], '(SIMULATED)' if d['run']['simulated'] else '', '| root causes:', ', '.join(d['root_causes']) or 'none')"; \
	  echo "demo: pytest exit $$status"; \
	else echo "demo: this run wrote no bundle (pytest exit $$status)" >&2; [ $$status -ne 0 ] || status=3; fi; \
	exit $$status

test: setup lint ## the project's own tests (what CI runs, with test-provisioning): lint, then every test but the Ansible runs
	$(PYTEST) tests -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile -m "not (slow and provisioning)" $(PYTEST_ARGS)

test-realplane: setup ## every bundled scenario end to end on the real control plane alone (make test runs them there too; where it is not built, one line says they ran on the stand-in)
	DGXSPARK_E2E_API=real $(PYTEST) tests/test_e2e.py tests/test_e2e_other_half.py -q -p no:cacheprovider -n 2 --dist loadfile -k test_the_suites_give_the_scenarios_expected_statuses_and_root_causes $(PYTEST_ARGS)

test-standin: setup ## every bundled scenario end to end on the Python stand-in (make demo's default API; CI runs it after test-provisioning)
	DGXSPARK_E2E_API=standin $(PYTEST) tests/test_e2e.py tests/test_e2e_other_half.py -q -p no:cacheprovider -n 2 --dist loadfile -k test_the_suites_give_the_scenarios_expected_statuses_and_root_causes $(PYTEST_ARGS)

test-provisioning: setup ## the provisioning's Ansible and make runs against fake hosts over real SSH (CI runs it after make test)
	$(PYTEST) tests -q -p no:cacheprovider -m "slow and provisioning" $(PYTEST_ARGS)

test-fast: setup ## the edit-test loop: unit and pytester tests without the slow ones (-m "not slow": no suite run against a testbed)
	$(PYTEST) tests -q -p no:cacheprovider -m "not slow" $(PYTEST_ARGS)

lint: setup ## ruff (pyflakes, import order) over the code and mypy over the face and judgement (pyproject.toml)
	$(VENV)/bin/ruff check pytest_dgxspark suites tests conftest.py provisioning
	$(VENV)/bin/mypy

site-given: ## fail unless SITE= is given (the targets that reach a real site check it before any set-up)
	@test -n "$(SITE)" || { echo "make $(MAKECMDGOALS): SITE= is required (sites: $(notdir $(wildcard sites/*))), e.g." \
	  "make conformance SITE=tirosh-home; PYTEST_ARGS=--dgxspark-plan shows the run plan only" >&2; exit 2; }

conformance: site-given setup ## the suite against the real site sites/<SITE>/ (SITE= required; prints the run plan first)
	@$(PYTEST) suites --site sites/$(SITE) --report-dir $(REPORT_DIR) -p no:cacheprovider $(PYTEST_ARGS); \
	status=$$?; echo "conformance: pytest exit $$status"; exit $$status

bench: setup ## the suite against 1, 4, 16 and 32 simulated nodes, 20 ms per SSH command and API request, and 1 and 4 on the real control plane [BENCH_NODES=1,16 BENCH_REAL_NODES=none]
	$(PY) -m pytest_dgxspark.testbed.bench $(if $(BENCH_NODES),--nodes $(BENCH_NODES)) $(if $(BENCH_REAL_NODES),--real-nodes $(BENCH_REAL_NODES))

clean: ## remove the virtualenv and build outputs
	rm -rf $(VENV) build *.egg-info

-include provisioning/rke2.mk
