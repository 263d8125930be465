# Set-up is part of every target: a fresh clone needs only `make demo` or `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast lint clean conformance bench bench-compile bench-cuda bench-mcu footprint

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,models,mpi]'
	touch $(STAMP)

# the digit classifier, then the same classifier split over 2 MPI ranks (skipped without MPI);
# then a GPT-2 decoder's greedy text generation as one binary
demo: $(STAMP)
	$(PY) samples/digits.py
	$(PY) samples/pipeline.py
	$(PY) samples/finetune.py
	$(PY) samples/generate.py

# the whole suite, a worker per core; a test file stays on one worker (its shared builds once)
PYTEST := $(PY) -m pytest -n auto --dist loadfile
test: $(STAMP)
	$(PYTEST) graphdef codegen tests

# the loop to run while working (under 2 minutes here): the graph library, the passes, the
# schedule and memory plan, ONNX import and hostile input in pure Python, and one small
# compiled model per backend (tests/codegen/test_smoke.py); `make test` before a commit
FAST := graphdef codegen tests/graphdef tests/codegen/test_passes.py tests/codegen/test_schedule.py \
	tests/codegen/test_memory.py tests/codegen/test_storage.py tests/codegen/test_pipeline.py \
	tests/codegen/test_smoke.py tests/codegen/test_backends.py tests/mpi/test_partition.py tests/onnx/test_import.py \
	tests/hostile/test_import.py tests/hostile/test_limits.py
test-fast: $(STAMP)
	$(PYTEST) $(FAST)

# speed: the GEMM kernel against numpy and the FMA peak, the vector math's accuracy and speed,
# the memory bandwidth and the memory-bound steps, then the model sets (small, and the zoo of
# torchvision/transformers models through both exporters) against onnxruntime at 1 and 2
# threads, greedy text generation against onnxruntime and PyTorch; prints the tables the README quotes
bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) bench/gemm.py
	$(PY) bench/vmath.py
	$(PY) bench/membound.py
	$(PY) bench/models.py --threads 1 2
	$(PY) bench/generate.py
	$(PY) bench/int8.py
	$(PY) bench/train.py --threads 1 2
	$(PY) bench/pingpong.py
	$(PY) bench/pipeline.py

# compile time of generated 1k/10k/100k-node graphs to C sources, seconds per stage
bench-cuda: $(STAMP)
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) bench/cuda.py

# the four MLPerf Tiny models, int8 and float, on emulated Cortex-M4, M7 and M55: instructions
# per inference counted under qemu-system-arm -icount (needs gcc-arm-none-eabi and qemu-system-arm);
# then their int8 TFLite files through flowc and through CMSIS-NN's kernels (../shared/anchors)
bench-mcu: $(STAMP)
	$(PY) bench/mcu.py
	$(PY) bench/cmsis_nn.py

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
