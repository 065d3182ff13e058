# RKE2 provisioning targets (ADR 0001 §10, ADR 0002 §5-1, §5-4, §8). Included by the top-level Makefile:
#   make rke2/server/install SITE=tirosh-home
# Order at a site: rke2/server/install -> rke2/agent/install -> rke2/kubeconfig -> rke2/gpu/operator/apply
#                  -> rke2/argocd/register. The install targets never deploy the GPU Operator.

SITE ?= tirosh-home
VENV ?= .venv
PYTHON ?= $(VENV)/bin/python
ANSIBLE_PLAYBOOK ?= $(VENV)/bin/ansible-playbook
KUBECONFIG_OUT ?= $(HOME)/.kube/config
# Extra ansible-playbook arguments, e.g. ANSIBLE_ARGS="--limit gpu-01 -vv".
ANSIBLE_ARGS ?=

RKE2_PROVISIONING := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
RKE2_SITE_DIR = $(abspath sites/$(SITE))
RKE2_PLAYBOOKS := $(RKE2_PROVISIONING)/playbooks
RKE2_ANSIBLE = ANSIBLE_CONFIG=$(RKE2_PROVISIONING)/ansible.cfg $(ANSIBLE_PLAYBOOK) \
	-i $(RKE2_SITE_DIR)/inventory.yml -e rke2_site_dir=$(RKE2_SITE_DIR) $(ANSIBLE_ARGS)

.PHONY: rke2/site-exists rke2/server/install rke2/agent/install rke2/status rke2/kubeconfig \
	rke2/gpu/operator/apply rke2/argocd/register rke2/check

rke2/site-exists:
	@test -f $(RKE2_SITE_DIR)/inventory.yml -a -f $(RKE2_SITE_DIR)/rke2/vars.yml || \
	  { echo "sites/$(SITE): inventory.yml and rke2/vars.yml must exist (SITE=$(SITE))" >&2; exit 2; }

rke2/server/install: rke2/site-exists
	$(RKE2_ANSIBLE) $(RKE2_PLAYBOOKS)/rke2-server-install.yml

rke2/agent/install: rke2/site-exists
	$(RKE2_ANSIBLE) $(RKE2_PLAYBOOKS)/rke2-agent-install.yml

rke2/status: rke2/site-exists
	$(RKE2_ANSIBLE) $(RKE2_PLAYBOOKS)/rke2-status.yml

rke2/kubeconfig: rke2/site-exists
	$(RKE2_ANSIBLE) -e rke2_kubeconfig_out=$(abspath $(KUBECONFIG_OUT)) $(RKE2_PLAYBOOKS)/rke2-kubeconfig.yml

rke2/gpu/operator/apply: rke2/site-exists
	$(RKE2_ANSIBLE) $(RKE2_PLAYBOOKS)/rke2-gpu-operator-apply.yml

rke2/argocd/register: rke2/site-exists
	$(RKE2_ANSIBLE) $(RKE2_PLAYBOOKS)/rke2-argocd-register.yml

rke2/check: rke2/site-exists
	$(RKE2_ANSIBLE) --syntax-check $(wildcard $(RKE2_PLAYBOOKS)/*.yml)
	$(RKE2_ANSIBLE) --check --diff $(RKE2_PLAYBOOKS)/rke2-server-install.yml
