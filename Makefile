# Set-up is part of every target: a fresh clone needs only `make demo` or `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint clean conformance footprint

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,models]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) samples/digits.py

test: $(STAMP)
	$(PY) -m pytest graphdef tests

footprint: $(STAMP)
	$(PY) bench/footprint.py

conformance: $(STAMP)
	$(PY) tests/onnx/conformance.py

lint: $(STAMP)
	$(PY) -m pip install --quiet ruff
	$(PY) -m ruff check graphdef tests samples

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
