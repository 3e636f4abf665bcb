# veritrain: two commands set everything up.
#   make demo   train, record and verify a small run on the embedded defaults, then serve its audit page
#   make test   unit + integration + e2e tests against real PostgreSQL and SeaweedFS
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The exact PyTorch of make demo/test and CI, installed first so that the project's torch>=2.7 is
# already satisfied: pip takes the CPU wheel of this version where the machine provides one (as CI
# does); pyproject itself asks only torch>=2.7, so a GPU host keeps the CUDA torch it has.
TORCH  := 2.13.0
SOURCES := attestation ledger migrations records storage trainer veritrain web tests

.PHONY: demo test venv services-start services-stop lint typecheck clean

venv: $(STAMP)

# torch through pip (it honours the machine's own wheel folder and constraints); everything else
# through uv, which resolves and installs in parallel: ~20 s instead of pip's ~70 s on 2 cores. uv
# keeps the torch already installed, as pip would (pyproject asks torch>=2.7). Bytecode is compiled
# at install time (where PYTHONDONTWRITEBYTECODE=1, as on CI's machines, every process would
# compile what it imports): what pip installed -- torch and its dependencies -- by compileall
# on every core, since pip compiles one file at a time (36 s wall, 34 s CPU here for torch
# alone, against ~21 s and 27 s for pip --no-compile then compileall -j 0). The dependencies
# matter as much: torch.distributed.pipelining imports sympy, and without its bytecode every
# process that builds a pipeline compiled sympy again (5.9 instead of 4.2 s of CPU to import).
# torch ships a file that only newer Pythons parse; it fails to compile, as under pip: harmless.
SITE_PACKAGES = $$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --no-compile torch==$(TORCH) uv
	$(BIN)/python -m compileall -q -j 0 "$(SITE_PACKAGES)" > /dev/null || true
	$(BIN)/uv pip install --python $(BIN)/python --quiet --compile-bytecode -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/veritrain demo

# Lint first (cheap); compile the tree's bytecode (the tests start a few hundred Python processes
# that import it; where PYTHONDONTWRITEBYTECODE is set, as on CI's machines, each would compile it
# again: ~0.5 s of CPU apiece); type-check beside the tests (mypy uses one core, ~50 s from a fresh
# clone, which the services' start and the tests' first minute overlap; its verdict is printed and
# counted at the end); start the services, run the tests, and stop the services even when tests
# fail. The tests run in two phases:
#   1. in TEST_WORKERS parallel processes (pytest-xdist); 4 keep both cores busy to the end
#      (scripts/test_cpu_profile.py: the run is CPU-bound). A file's tests stay on one worker
#      (--dist loadfile), so a module's recorded run is trained once.
#   2. the tests marked `serial` (timing, machine-wide state), one at a time (--only-serial).
# Exit status 5 is "no test selected": PYTEST_ARGS may leave one phase empty, not both.
# Serially, in one process: make test TEST_WORKERS=0
TEST_WORKERS ?= 4
# The files that hold serial tests: the second phase collects only these (collecting the whole
# suite costs ~16 s of CPU for two tests) unless PYTEST_ARGS names what to run.
SERIAL_TESTS = $(shell grep -rl --include='test_*.py' 'pytest.mark.serial' tests)
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m compileall -q -j 0 $(SOURCES) > /dev/null
	@echo "mypy runs beside the tests (it uses one core); its verdict comes at the end"
	typed=$$(mktemp); $(BIN)/mypy > $$typed 2>&1 & mypy=$$!; status=0; \
	scripts/services.sh start $(VENV) || status=$$?; \
	if [ $$status -eq 0 ]; then \
	  . .ci-state/env && export CI=$${CI:-true}; \
	  if [ "$(TEST_WORKERS)" = 0 ]; then \
	    $(BIN)/python -m pytest $(PYTEST_ARGS) || status=$$?; \
	  else \
	    parallel=0; serial=0; \
	    $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=30 $(PYTEST_ARGS) || parallel=$$?; \
	    $(BIN)/python -m pytest --only-serial $(or $(PYTEST_ARGS),$(SERIAL_TESTS)) || serial=$$?; \
	    for s in $$parallel $$serial; do \
	      if [ $$status -eq 0 ] && [ $$s -ne 5 ]; then status=$$s; fi; \
	    done; \
	    if [ $$parallel -eq 5 ] && [ $$serial -eq 5 ]; then status=5; fi; \
	  fi; \
	fi; \
	scripts/services.sh stop $(VENV); \
	echo "== mypy"; wait $$mypy; typing=$$?; cat $$typed; \
	if [ $$typing -ne 0 ] && { [ $$status -eq 0 ] || [ $$status -eq 5 ]; }; then status=1; fi; \
	rm -f $$typed; exit $$status

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .ci-state veritrain-data .pytest_cache .mypy_cache
