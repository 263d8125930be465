# Set-up is part of every target: a fresh clone needs only `make demo` or `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint clean conformance bench bench-compile bench-cuda footprint

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,models,mpi]'
	touch $(STAMP)

# the digit classifier, then the same classifier split over 2 MPI ranks (skipped without MPI)
demo: $(STAMP)
	$(PY) samples/digits.py
	$(PY) samples/pipeline.py
	$(PY) samples/finetune.py

test: $(STAMP)
	$(PY) -m pytest graphdef codegen tests

# speed: the GEMM kernel against numpy and the FMA peak, the vector math's accuracy and speed,
# the memory bandwidth and the memory-bound steps, then the model sets (small, and the zoo of
# torchvision/transformers models through both exporters) against onnxruntime at 1 and 2
# threads; prints the tables the README quotes
bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) bench/gemm.py
	$(PY) bench/vmath.py
	$(PY) bench/membound.py
	$(PY) bench/models.py --threads 1 2
	$(PY) bench/train.py --threads 1 2
	$(PY) bench/pingpong.py
	$(PY) bench/pipeline.py

# compile time of generated 1k/10k/100k-node graphs to C sources, seconds per stage
bench-cuda: $(STAMP)
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) bench/cuda.py

bench-compile: $(STAMP)
	$(PY) bench/compile_time.py

footprint: $(STAMP)
	$(PY) bench/footprint.py

conformance: $(STAMP)
	$(PY) tests/onnx/conformance.py

lint: $(STAMP)
	$(PY) -m pip install --quiet ruff
	$(PY) -m ruff check graphdef codegen tests samples bench

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
