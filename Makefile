# One entry point for people and CI. Every target creates what it needs and is safe to re-run.
PYTHON ?= python3.11
VENV := .venv
DOCKER ?= docker
PYTEST_FLAGS ?= -x -q --timeout=900 --durations=20 --durations-min=20
# Large wheels (DALI 424 MB, TensorFlow, torch's CUDA libraries) come over the network: pip resumes a cut
# download, and a failed install is run again, up to 3 times.
PIP_FLAGS := -q --retries 10 --resume-retries 20
pip_retry = for try in 1 2 3; do $(1) && break; [ $$try = 3 ] && exit 1; \
	echo "pip install failed (attempt $$try of 3); trying again" >&2; sleep 15; done

PT_REQS := $(wildcard PyTorch/*/*/requirements.txt)
# Packages whose declared dependencies must not be installed (a model says why in the file).
PT_NODEPS := $(wildcard PyTorch/*/*/requirements-nodeps.txt)
TF_REQS := $(wildcard TensorFlow/*/*/requirements.txt)
TF_NODEPS := $(wildcard TensorFlow/*/*/requirements-nodeps.txt)
MX_REQS := $(wildcard MXNet/*/*/requirements.txt)

.PHONY: help setup setup-pytorch setup-tensorflow setup-mxnet test test-common demo lint format docker-build clean new-model

help:
	@echo "make demo          train, evaluate, export and serve ResNet-50 on a small embedded dataset (CPU)"
	@echo "make test          create the venvs and run every test (CPU)"
	@echo "make setup         create .venv/pytorch, .venv/tensorflow, .venv/mxnet"
	@echo "make lint          ruff check + ruff format --check + hadolint"
	@echo "make new-model NAME=PyTorch/<Domain>/<Model> PACKAGE=<name>   a new model from the skeleton (CONTRIBUTING.md)"
	@echo "make docker-build  build the base images and every model image (needs a Docker engine);"
	@echo "                  MODEL=PyTorch/Classification/ResNet50 builds one model and its base"

setup: setup-pytorch setup-tensorflow setup-mxnet
setup-pytorch: $(VENV)/pytorch/.ready
setup-tensorflow: $(VENV)/tensorflow/.ready
setup-mxnet: $(VENV)/mxnet/.ready

# A venv is rebuilt in place when its requirement files change; the stamp is written last.
$(VENV)/pytorch/.ready: common/envs/pytorch.txt common/pyproject.toml $(PT_REQS) $(PT_NODEPS)
	$(PYTHON) -m venv $(VENV)/pytorch
	$(call pip_retry,$(VENV)/pytorch/bin/python -m pip install -q --retries 10 --upgrade pip)
	$(call pip_retry,$(VENV)/pytorch/bin/python -m pip install $(PIP_FLAGS) -r common/envs/pytorch.txt $(addprefix -r ,$(PT_REQS)))
	$(if $(PT_NODEPS),$(VENV)/pytorch/bin/python -m pip install -q --no-deps $(addprefix -r ,$(PT_NODEPS)))
	$(VENV)/pytorch/bin/python -m pip install -q --no-deps -e common
	touch $@

$(VENV)/tensorflow/.ready: common/envs/tensorflow.txt common/pyproject.toml $(TF_REQS) $(TF_NODEPS)
	$(PYTHON) -m venv $(VENV)/tensorflow
	$(call pip_retry,$(VENV)/tensorflow/bin/python -m pip install -q --retries 10 --upgrade pip)
	$(call pip_retry,$(VENV)/tensorflow/bin/python -m pip install $(PIP_FLAGS) -r common/envs/tensorflow.txt $(addprefix -r ,$(TF_REQS)))
	$(if $(TF_NODEPS),$(VENV)/tensorflow/bin/python -m pip install -q --no-deps $(addprefix -r ,$(TF_NODEPS)))
	$(VENV)/tensorflow/bin/python -m pip install -q --no-deps -e common
	touch $@

$(VENV)/mxnet/.ready: common/envs/mxnet.txt common/pyproject.toml $(MX_REQS)
	$(PYTHON) -m venv $(VENV)/mxnet
	$(call pip_retry,$(VENV)/mxnet/bin/python -m pip install -q --retries 10 --upgrade pip)
	$(call pip_retry,$(VENV)/mxnet/bin/python -m pip install $(PIP_FLAGS) -r common/envs/mxnet.txt $(addprefix -r ,$(MX_REQS)))
	$(VENV)/mxnet/bin/python -m pip install -q --no-deps -e common
	touch $@

# The README's test command. Top-level checks and the common layer run in the PyTorch venv;
# tests/test_model_suites.py runs each model's own tests in its framework's venv. Waiting OpenMP threads
# sleep rather than spin: two 2-thread processes on 2 busy cores ran 20x slower spinning (2026-11-27).
test: setup
	OMP_WAIT_POLICY=PASSIVE $(VENV)/pytorch/bin/python -m pytest $(PYTEST_FLAGS) common/tests tests

test-common: setup-pytorch
	$(VENV)/pytorch/bin/python -m pytest $(PYTEST_FLAGS) common/tests

demo: setup-pytorch
	PATH="$(CURDIR)/$(VENV)/pytorch/bin:$$PATH" bash PyTorch/Classification/ResNet50/scripts/demo.sh

lint: setup-pytorch
	$(VENV)/pytorch/bin/ruff check .
	$(VENV)/pytorch/bin/ruff format --check .
	$(VENV)/pytorch/bin/hadolint Dockerfiles/*/Dockerfile */*/*/Dockerfile

# A new PyTorch model directory from common/templates/pytorch, in the zoo's one shape (CONTRIBUTING.md).
new-model: setup-pytorch
	@test -n "$(NAME)" -a -n "$(PACKAGE)" || { echo "usage: make new-model NAME=PyTorch/<Domain>/<Model> PACKAGE=<name>" >&2; exit 2; }
	$(VENV)/pytorch/bin/python -m zoo.new_model $(NAME) --package $(PACKAGE)

format: setup-pytorch
	$(VENV)/pytorch/bin/ruff format .
	$(VENV)/pytorch/bin/ruff check --fix .

# Images: zoo/<framework>:latest (Dockerfiles/<framework>), zoo/triton:latest, and one per model named
# zoo/<framework>-<domain>-<model>:latest in lower case. A model image builds FROM its framework's base, so
# the bases come first. MODEL=PyTorch/Classification/ResNet50 builds that model and its base only.
MODEL ?=
MODEL_DIRS = $(if $(MODEL),$(MODEL),$(patsubst %/Dockerfile,%,$(sort $(wildcard PyTorch/*/*/Dockerfile TensorFlow/*/*/Dockerfile MXNet/*/*/Dockerfile))))

docker-build:
	@set -e; \
	for fw in $$(for d in $(MODEL_DIRS); do echo "$${d%%/*}"; done | tr '[:upper:]' '[:lower:]' | sort -u); do \
	  echo "docker build -t zoo/$$fw:latest -f Dockerfiles/$$fw/Dockerfile ."; \
	  $(DOCKER) build -t zoo/$$fw:latest -f Dockerfiles/$$fw/Dockerfile .; \
	done; \
	if [ -z "$(MODEL)" ]; then \
	  echo "docker build -t zoo/triton:latest -f Dockerfiles/triton/Dockerfile ."; \
	  $(DOCKER) build -t zoo/triton:latest -f Dockerfiles/triton/Dockerfile .; \
	fi; \
	for d in $(MODEL_DIRS); do \
	  [ -f "$$d/Dockerfile" ] || { echo "no Dockerfile in $$d" >&2; exit 1; }; \
	  tag=zoo/$$(echo "$$d" | tr '[:upper:]/' '[:lower:]-'):latest; \
	  echo "docker build -t $$tag $$d"; \
	  $(DOCKER) build -t $$tag $$d; \
	done

clean:
	rm -rf $(VENV) .pytest_cache
