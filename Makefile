# accelpolicy developer entry points. `make help` lists them.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Built control-plane binaries and Go caches live outside the clone so a fresh clone reuses them.
ACCELPOLICY_CACHE ?= $(HOME)/.cache/accelpolicy
export ACCELPOLICY_CACHE

.PHONY: help install test unit lint docs docs-gen controlplane reliability demo demo-snapshot bench clean podresources-stubs \
        docker-up kind-images kind-up kind-down kind-test e2e-kind chaos-kind helm chart wheelhouse image components-images components-manifests gpu-check

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(BIN)/accelpolicy: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,docs]'
	@touch $@

install: $(BIN)/accelpolicy  ## create .venv with the accelpolicy console script

lint: install  ## layer contracts (import-linter), lines of runtime/ and probes/ at most 110 characters (ruff), rule files and rule tests (yamllint: .yamllint, 110 columns), CEL ternaries nested at most two deep
	$(BIN)/lint-imports
	$(BIN)/ruff check runtime probes
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/engine/test_rule_style.py

docs: install  ## build the documentation site into site/ (mkdocs build --strict: a broken link or missing page fails)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

docs-gen: install  ## regenerate the reference pages under docs/reference/ from the code (CLI, rule kinds, settings, CRDs, metrics)
	$(BIN)/python -m docs.gen

unit: install  ## tests that need no cluster
	$(BIN)/python -m pytest -m 'not controlplane and not e2e'

controlplane:  ## build kube-apiserver, kube-controller-manager, kube-scheduler, etcd, Kueue, nfd-master, kwok into $(ACCELPOLICY_CACHE)/bin (no-op when built)
	bash e2e/controlplane/build.sh
	bash e2e/components/build.sh

helm:  ## build helm from its Go module (deploy/tools/versions.txt) into $(ACCELPOLICY_CACHE)/bin (no-op when built)
	bash deploy/tools/build.sh

CHART_OUT ?= build/chart
chart: helm  ## lint the Helm chart (as installed: namespace gpustack-system) and package it (crds/ and rules/ resolved) into $(CHART_OUT)
	"$$(bash deploy/tools/build.sh --print helm)" lint --strict deploy/chart -n gpustack-system
	"$$(bash deploy/tools/build.sh --print helm)" package deploy/chart -d $(CHART_OUT)

wheelhouse: install  ## wheels of accelpolicy and its dependencies for the image (build/wheelhouse, cp311)
	bash deploy/image/wheelhouse.sh

image: install  ## the accelpolicy image offline: Debian base by debootstrap (cached), host wheels, docker build --network none
	bash deploy/image/build.sh

components-images: controlplane  ## Kueue and nfd-master images (docker import of the binaries built from their modules)
	bash deploy/components/images.sh

components-manifests: install helm  ## Kueue's and NFD's own charts rendered with the local images into build/components/
	$(BIN)/python deploy/components/render.py build/components

# `make test` keeps the controller's kill/restart runs short (2); `make reliability` runs RUNS of them.
RUNS ?= 10
# The order of the test files in `make test`'s first pytest run (conftest.py): given, reversed or shuffled
# (`make test ORDER=reversed`; shuffled takes --file-order-seed from PYTEST_ARGS or prints the one drawn).
ORDER ?= given

# The second pytest run is `make e2e-kind`'s walkthrough: skipped where docker or the kind images are missing,
# a failure in CI (.ci/run builds the images and sets ACCELPOLICY_REQUIRE_KIND=1).
test: install lint docs controlplane helm  ## everything: docs site, unit, rule suites, control plane, chart, e2e on the local control plane and on kind (2 kill/restart runs)
	ACCELPOLICY_RELIABILITY_RUNS=$${ACCELPOLICY_RELIABILITY_RUNS:-2} $(BIN)/python -m pytest --file-order=$(ORDER) $(PYTEST_ARGS)
	$(KIND_WALKTHROUGH)

reliability: install controlplane  ## the live controller killed and restarted: RUNS runs (default 10) vs a reference
	$(BIN)/python -m pytest tests/controlplane/test_reliability.py -s --reliability-runs=$(RUNS)

demo: install controlplane  ## the seed walkthrough live on the local control plane (steps 1-6, the seed's kubectl lines)
	$(BIN)/accelpolicy demo

demo-snapshot: install  ## the seed walkthrough replayed from snapshots (no cluster)
	$(BIN)/accelpolicy demo --snapshot

# RECORD=probes/recorded/<node>.yaml also writes the probed facts there.
gpu-check: install  ## the agent's real NVML backend in a dry run vs nvidia-smi, and its metrics (skips, exit 0, without an NVIDIA driver)
	$(BIN)/python -m testing.gpucheck $(if $(RECORD),--record $(RECORD))

# `make bench` prints figures, never pass/fail; SCALE_NODES sizes the live runs (needs `make controlplane`),
# SCALE_LARGE the second size of the live scale run (docs/performance.md "10,000 nodes on a quiet machine: the wall-clock goals"; about 15 minutes on 2 cores).
SCALE_NODES ?= 1000
SCALE_LARGE ?= 10000

bench: install  ## benchmarks (figures, not pass/fail): CLI start-up vs the floor, derive, webhook under load, one review's profile, admission check, metrics scrape, live scale (SCALE_NODES, SCALE_LARGE), Instances through the API server and showback (usage counters per pass, `usage` over 30 days)
	$(BIN)/python benchmarks/cli.py --cold
	$(BIN)/python benchmarks/derive.py
	$(BIN)/python benchmarks/webhook.py
	$(BIN)/python benchmarks/profile_review.py --kind slice
	$(BIN)/python benchmarks/profile_review.py --kind rule1
	$(BIN)/python benchmarks/admissioncheck.py
	$(BIN)/python benchmarks/metrics_scrape.py --nodes $(SCALE_NODES)
	$(BIN)/python benchmarks/scale.py --nodes $(SCALE_NODES),$(SCALE_LARGE)
	$(BIN)/python benchmarks/instances_live.py --nodes $(SCALE_NODES)
	$(BIN)/python benchmarks/reconcile_cpu.py --nodes $(SCALE_NODES)
	$(BIN)/python benchmarks/usage.py --nodes $(SCALE_LARGE) --fleet $(SCALE_NODES) --days 30 --step 900

podresources-stubs: install  ## regenerate runtime/kube/podresources/api_pb2*.py from k8s.io/kubelet api.proto (Go proxy)
	$(BIN)/pip install --quiet -e '.[codegen]'
	PY=$(CURDIR)/$(BIN)/python bash runtime/kube/podresources/regenerate.sh

# The offline kind cluster (docs/tasks/e2e.md "The offline kind cluster"): docker behind the network guard, everything built here, nothing pulled.
KIND_CLUSTER ?= accelpolicy
KIND_WORKERS ?= 3

docker-up:  ## start dockerd behind the network guard (ip_forward=0, nftables drop of bridge traffic leaving; e2e/kind/dockerd.sh)
	bash e2e/kind/dockerd.sh start

kind-images: docker-up  ## build kind, kubelet/kubeadm/kubectl/kube-proxy, CoreDNS, pause and the kind node image (no-op when built)
	bash e2e/kind/node-image.sh

kind-up: kind-images  ## create kind cluster $(KIND_CLUSTER): 1 control-plane + $(KIND_WORKERS) workers; prints the kubeconfig path
	bash e2e/kind/kind-up.sh --name $(KIND_CLUSTER) --workers $(KIND_WORKERS)

kind-down:  ## delete kind cluster $(KIND_CLUSTER)
	bash e2e/kind/kind-down.sh --name $(KIND_CLUSTER)

# The seed walkthrough on a fresh kind cluster "accelpolicy-e2e" (pytest-kind, e2e/kind/stack.py): images loaded,
# Kueue + nfd-master, `helm install` of deploy/chart, device-plugin stand-ins; skipped when docker/the node image
# is missing unless ACCELPOLICY_REQUIRE_KIND=1 (CI). ACCELPOLICY_KIND_KEEP=1 keeps the cluster afterwards.
KIND_WALKTHROUGH = $(BIN)/python -m pytest e2e/test_walkthrough.py e2e/test_kind_attacks.py e2e/test_kind_exceptions.py e2e/test_kind_dra.py e2e/test_kind_upgrade.py e2e/test_kind_faults.py e2e/test_kind_uninstall.py --cluster=kind -m kind -p no:cacheprovider

e2e-kind: install kind-images helm components-images  ## the seed walkthrough on kind with accelpolicy installed by its chart
	ACCELPOLICY_REQUIRE_KIND=1 $(KIND_WALKTHROUGH)

# The full fault suite (e2e/chaos/, docs/reliability.md): the walkthrough, then every fault of
# e2e/chaos/faults.py CHAOS_ROUNDS times under a 20 creates/s load; results and the table in build/chaos/<run>/.
# `make test` runs the short form (the faults marked short, once) in the kind session above.
CHAOS_ROUNDS ?= 2

chaos-kind: install kind-images helm components-images  ## the full fault suite on kind (every fault CHAOS_ROUNDS times, default 2; ~30 min)
	ACCELPOLICY_REQUIRE_KIND=1 ACCELPOLICY_CHAOS=full ACCELPOLICY_CHAOS_ROUNDS=$(CHAOS_ROUNDS) \
	  $(BIN)/python -m pytest e2e/test_walkthrough.py e2e/test_kind_faults.py --cluster=kind -m kind -p no:cacheprovider -s

kind-test: install kind-images  ## the kind tests (guard refusal, a cluster up: nodes Ready, DNS, blackhole, no pulls)
	$(BIN)/python -m pytest e2e/kind -m kind

clean:  ## remove the venv and caches inside the clone (not the control-plane cache)
	rm -rf $(VENV) .pytest_cache site
