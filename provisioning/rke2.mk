# RKE2 provisioning targets (ADR 0001 §10, ADR 0002 §5-1, §5-4, §8). Included by the top-level Makefile:
#   make rke2/server/install SITE=tirosh-home
# Order at a site: rke2/server/install -> rke2/agent/install -> rke2/kubeconfig -> rke2/gpu/operator/apply CONFIRM=yes
#                  -> rke2/argocd/register -> rke2/suite/rbac. The install targets never deploy the GPU Operator.

# SITE= is required (a real target is never implied): every target here reaches the site's hosts or API.
SITE ?=
VENV ?= .venv
PYTHON ?= $(VENV)/bin/python
ANSIBLE_PLAYBOOK ?= $(VENV)/bin/ansible-playbook
# The site folder and its inventory (another inventory: INVENTORY=...; a rehearsal: the testbed's inventory.yml).
SITE_DIR ?= sites/$(SITE)
INVENTORY ?= $(SITE_DIR)/inventory.yml
# The controller kubeconfig rke2/kubeconfig merges into. The later targets (the operator preflight and apply,
# argocd/register) read the kubeconfig the suite reads: KUBECONFIG_OUT when given here, else the site's
# rke2/kubeconfig.yml, else $KUBECONFIG's first file, else ~/.kube/config (playbooks/vars/kubeconfig.yml).
RKE2_KUBECONFIG_GIVEN := $(filter command line environment override,$(origin KUBECONFIG_OUT))
KUBECONFIG_OUT ?= $(HOME)/.kube/config
# An OpenSSH client config for Ansible and the suite's preflight (bastions, keys, known_hosts), e.g.
# SSH_CONFIG=~/.ssh/config.d/site; without it, ssh reads ~/.ssh/config as usual.
SSH_CONFIG ?=
# The suite's own kubeconfig that rke2/suite/rbac writes (its least-privilege identity; hand it to the suite with
# --dgxspark-kubeconfig).
SUITE_KUBECONFIG ?= $(HOME)/.kube/dgxspark-suite.config
# rke2/gpu/operator/apply runs only with CONFIRM=yes (ADR 0002 §5-4: RKE2 and containerd may restart).
CONFIRM ?=
# Extra ansible-playbook arguments, e.g. ANSIBLE_ARGS="--limit gpu-01 -vv".
ANSIBLE_ARGS ?=

RKE2_PROVISIONING := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
RKE2_SITE_DIR = $(abspath $(SITE_DIR))
RKE2_PLAYBOOKS := $(RKE2_PROVISIONING)/playbooks
RKE2_ANSIBLE = ANSIBLE_CONFIG=$(RKE2_PROVISIONING)/ansible.cfg \
	$(if $(SSH_CONFIG),ANSIBLE_SSH_ARGS="-F $(abspath $(SSH_CONFIG)) -o ControlMaster=auto -o ControlPersist=60s") $(ANSIBLE_PLAYBOOK) \
	-i $(abspath $(INVENTORY)) -e rke2_site_dir=$(RKE2_SITE_DIR) -e rke2_kubeconfig_out=$(abspath $(KUBECONFIG_OUT)) \
	$(if $(RKE2_KUBECONFIG_GIVEN),-e rke2_kubeconfig_given=$(abspath $(KUBECONFIG_OUT))) \
	$(if $(SSH_CONFIG),-e gpu_operator_preflight_ssh_config=$(abspath $(SSH_CONFIG))) $(ANSIBLE_ARGS)

.PHONY: rke2/site-exists rke2/server/install rke2/agent/install rke2/status rke2/kubeconfig \
	rke2/gpu/operator/apply rke2/argocd/register rke2/suite/rbac rke2/check

rke2/site-exists: ## fail unless SITE= is given and the site's inventory and rke2/vars.yml exist
	@test -n "$(SITE)$(filter-out file default undefined,$(origin SITE_DIR))" || \
	  { echo "make: SITE= is required: these targets reach the site's hosts and API (sites: $(notdir $(wildcard sites/*)))," \
	    "e.g. make $(MAKECMDGOALS) SITE=tirosh-home" >&2; exit 2; }
	@test -f $(abspath $(INVENTORY)) -a -f $(RKE2_SITE_DIR)/rke2/vars.yml || \
	  { echo "$(SITE_DIR): $(INVENTORY) and $(SITE_DIR)/rke2/vars.yml must exist (SITE=$(SITE))" >&2; exit 2; }

rke2/server/install: rke2/site-exists ## install RKE2 on rke2_servers: the first bootstraps, the others join it
	$(RKE2_ANSIBLE) $(RKE2_PLAYBOOKS)/rke2-server-install.yml

rke2/agent/install: rke2/site-exists ## install RKE2 on rke2_agents; each joins the first server (token-file, :9345)
	$(RKE2_ANSIBLE) $(RKE2_PLAYBOOKS)/rke2-agent-install.yml

rke2/status: rke2/site-exists ## read-only: units, rke2 --version, nodes; fails unless active and pinned
	$(RKE2_ANSIBLE) $(RKE2_PLAYBOOKS)/rke2-status.yml

rke2/kubeconfig: rke2/site-exists ## merge the admin kubeconfig as context rke2_context_name into KUBECONFIG_OUT
	$(RKE2_ANSIBLE) $(RKE2_PLAYBOOKS)/rke2-kubeconfig.yml

rke2/gpu/operator/apply: rke2/site-exists ## preflight (host, rke2, runtime layers), then the GPU Operator; CONFIRM=yes
	$(RKE2_ANSIBLE) -e gpu_operator_confirm=$(if $(CONFIRM),$(CONFIRM),no) $(RKE2_PLAYBOOKS)/rke2-gpu-operator-apply.yml

rke2/argocd/register: rke2/site-exists ## register the cluster in Argo CD on the management context argocd_context
	$(RKE2_ANSIBLE) $(RKE2_PLAYBOOKS)/rke2-argocd-register.yml

rke2/suite/rbac: rke2/site-exists ## the suite's least-privilege identity; writes SUITE_KUBECONFIG and prints its user
	$(RKE2_ANSIBLE) -e suite_kubeconfig_out=$(abspath $(SUITE_KUBECONFIG)) $(RKE2_PLAYBOOKS)/rke2-suite-rbac.yml

rke2/check: rke2/site-exists ## syntax-check every playbook, then --check --diff of the server install (writes nothing)
	$(RKE2_ANSIBLE) --syntax-check $(wildcard $(RKE2_PLAYBOOKS)/*.yml)
	$(RKE2_ANSIBLE) --check --diff $(RKE2_PLAYBOOKS)/rke2-server-install.yml
