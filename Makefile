# veritrain: two commands set everything up.
#   make demo   train, record and verify a small run on the embedded defaults, then serve its audit page
#   make test   unit + integration + e2e tests against real PostgreSQL and SeaweedFS
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The exact PyTorch of make demo/test and CI, the CPU build from PyTorch's CPU index (PyPI's wheel
# of the same version pulls several GB of CUDA libraries); pyproject asks only torch>=2.7.
TORCH  := 2.13.0

.PHONY: demo test venv services-start services-stop lint typecheck clean

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==$(TORCH) --index-url https://download.pytorch.org/whl/cpu
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/veritrain demo

# Lint and type-check first (cheap), then start the services, run the tests, and stop the
# services even when tests fail.
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	scripts/services.sh start $(VENV)
	. .ci-state/env && status=0; \
	  CI=$${CI:-true} $(BIN)/python -m pytest $(PYTEST_ARGS) || status=$$?; \
	  scripts/services.sh stop $(VENV); exit $$status

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .ci-state veritrain-data .pytest_cache .mypy_cache
