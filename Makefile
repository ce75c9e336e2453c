# make demo: set up and run the main job.   make test: set up and pass the tests.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.remat-installed

.PHONY: setup demo test test-core bench clean

$(STAMP): pyproject.toml setup.py remat/solvers/_chain_dp_c.c remat/schedule/_rs_c.c
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch is pinned in pyproject (torch==2.14.1, torchvision==0.29.1): pip never fetches another build
	$(PY) -m pip install -q -e ".[torch,cp,bench,test]"
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(VENV)/bin/remat demo

CORE_TESTS := tests/test_graph.py tests/test_schedule.py tests/test_baselines.py

# the torch-free core first, with torch made unimportable, then the rest (the core's tests
# import no torch either way: run once)
test-core: setup
	REMAT_NO_TORCH=1 $(PY) -m pytest -q -p no:cacheprovider $(CORE_TESTS)

test: test-core
	$(PY) -m pytest -q -p no:cacheprovider -m "not slow" $(addprefix --ignore=,$(CORE_TESTS)) tests

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info remat/solvers/*.so remat/schedule/*.so
