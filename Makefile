# One entry point for people and CI. Every target creates what it needs and is safe to re-run.
PYTHON ?= python3.11
VENV := .venv
PYTEST_FLAGS ?= -x -q --timeout=900

PT_REQS := $(wildcard PyTorch/*/*/requirements.txt)
TF_REQS := $(wildcard TensorFlow/*/*/requirements.txt)
MX_REQS := $(wildcard MXNet/*/*/requirements.txt)

.PHONY: help setup setup-pytorch setup-tensorflow setup-mxnet test test-common demo lint format docker-build clean

help:
	@echo "make demo          train, evaluate, export and serve ResNet-50 on a small embedded dataset (CPU)"
	@echo "make test          create the venvs and run every test (CPU)"
	@echo "make setup         create .venv/pytorch, .venv/tensorflow, .venv/mxnet"
	@echo "make lint          ruff check + ruff format --check + hadolint"
	@echo "make docker-build  build the base images and every model image (needs a Docker engine)"

setup: setup-pytorch setup-tensorflow setup-mxnet
setup-pytorch: $(VENV)/pytorch/.ready
setup-tensorflow: $(VENV)/tensorflow/.ready
setup-mxnet: $(VENV)/mxnet/.ready

# A venv is rebuilt in place when its requirement files change; the stamp is written last.
$(VENV)/pytorch/.ready: common/envs/pytorch.txt common/pyproject.toml $(PT_REQS)
	$(PYTHON) -m venv $(VENV)/pytorch
	$(VENV)/pytorch/bin/python -m pip install -q --upgrade pip
	$(VENV)/pytorch/bin/python -m pip install -q -r common/envs/pytorch.txt $(addprefix -r ,$(PT_REQS))
	$(VENV)/pytorch/bin/python -m pip install -q --no-deps -e common
	touch $@

$(VENV)/tensorflow/.ready: common/envs/tensorflow.txt common/pyproject.toml $(TF_REQS)
	$(PYTHON) -m venv $(VENV)/tensorflow
	$(VENV)/tensorflow/bin/python -m pip install -q --upgrade pip
	$(VENV)/tensorflow/bin/python -m pip install -q -r common/envs/tensorflow.txt $(addprefix -r ,$(TF_REQS))
	$(VENV)/tensorflow/bin/python -m pip install -q --no-deps -e common
	touch $@

$(VENV)/mxnet/.ready: common/envs/mxnet.txt common/pyproject.toml $(MX_REQS)
	$(PYTHON) -m venv $(VENV)/mxnet
	$(VENV)/mxnet/bin/python -m pip install -q --upgrade pip
	$(VENV)/mxnet/bin/python -m pip install -q -r common/envs/mxnet.txt $(addprefix -r ,$(MX_REQS))
	$(VENV)/mxnet/bin/python -m pip install -q --no-deps -e common
	touch $@

# The README's test command. Top-level checks and the common layer run in the PyTorch venv;
# tests/test_model_suites.py runs each model's own tests in its framework's venv.
test: setup
	$(VENV)/pytorch/bin/python -m pytest $(PYTEST_FLAGS) common/tests tests

test-common: setup-pytorch
	$(VENV)/pytorch/bin/python -m pytest $(PYTEST_FLAGS) common/tests

demo: setup-pytorch
	PATH="$(CURDIR)/$(VENV)/pytorch/bin:$$PATH" bash PyTorch/Classification/ResNet50/scripts/demo.sh

lint: setup-pytorch
	$(VENV)/pytorch/bin/ruff check .
	$(VENV)/pytorch/bin/ruff format --check .
	$(VENV)/pytorch/bin/hadolint Dockerfiles/*/Dockerfile */*/*/Dockerfile

format: setup-pytorch
	$(VENV)/pytorch/bin/ruff format .
	$(VENV)/pytorch/bin/ruff check --fix .

docker-build:
	docker build -t zoo/pytorch:latest -f Dockerfiles/pytorch/Dockerfile .
	docker build -t zoo/tensorflow:latest -f Dockerfiles/tensorflow/Dockerfile .
	docker build -t zoo/mxnet:latest -f Dockerfiles/mxnet/Dockerfile .
	docker build -t zoo/triton:latest -f Dockerfiles/triton/Dockerfile .
	for d in PyTorch/*/* TensorFlow/*/* MXNet/*/*; do \
	  [ -f $$d/Dockerfile ] || continue; \
	  tag=$$(echo $$d | tr '[:upper:]/' '[:lower:]-'); \
	  docker build -t zoo/$$tag:latest $$d || exit 1; \
	done

clean:
	rm -rf $(VENV) .pytest_cache
