# momentgen — developer entry points.  `make install` then `make test`.
PY      ?= python3
VENV    ?= .venv
BIN      = $(VENV)/bin
# One BLAS thread per process: up to 16x faster than two on the shared 2-core machines.
export OPENBLAS_NUM_THREADS = 1
export OMP_NUM_THREADS = 1
export MKL_NUM_THREADS = 1

.PHONY: install lint test test-slow docs bench bench-smoke examples redraw-figures demo clean verify-campaign

STAMP    = $(VENV)/.installed

# editable_mode=compat: the clone's folder goes on sys.path, so a folder named momentgen beside a script (a clone)
# cannot shadow the package as an empty namespace package (the default editable finder loses to it)
$(STAMP): setup.cfg pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]' --config-settings editable_mode=compat
	touch $(STAMP)

install: $(STAMP)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	$(BIN)/python -m pytest -q -n auto --dist worksteal

test-slow: install
	$(BIN)/python -m pytest -q -m slow -n auto --dist worksteal tests

# The API reference (numpydoc docstrings, Sphinx), warnings as errors; tests/end_to_end/test_docs.py builds it in `make test`.
docs: install
	$(BIN)/sphinx-build -W -q -b html docs/api out/docs

verify-campaign: install
	$(BIN)/python -m tests.campaign --out out/campaign

bench-smoke: install
	$(BIN)/python -m pytest -q tests/end_to_end/test_benchmarks.py

bench: install
	$(BIN)/python benchmarks/bench_hierarchy.py
	$(BIN)/python benchmarks/bench_potential.py
	$(BIN)/python benchmarks/bench_truncation.py
	$(BIN)/python benchmarks/bench_sgd.py
	$(BIN)/python benchmarks/bench_closures.py
	$(BIN)/python benchmarks/bench_edge.py
	$(BIN)/python benchmarks/bench_sigma.py
	$(BIN)/python benchmarks/bench_riccati.py
	$(BIN)/python benchmarks/bench_horizon.py
	$(BIN)/python benchmarks/bench_generic_sigma.py
	$(BIN)/python benchmarks/bench_draw_noise.py
	$(BIN)/python benchmarks/bench_precision.py
	$(BIN)/python benchmarks/bench_finite_lr.py
	$(BIN)/python benchmarks/bench_estimate.py
	$(BIN)/python benchmarks/bench_verify.py
	$(BIN)/python benchmarks/bench_closure_accuracy.py --out out/bench

examples: install
	$(BIN)/python examples/hierarchy_sizes.py --out out/examples
	$(BIN)/python examples/fig4_linear.py --out out/examples
	$(BIN)/python examples/fig2_parameterisation.py --out out/examples --d 400
	$(BIN)/python examples/fig1_softmax.py --out out/examples --d 400 --seeds 2
	$(BIN)/python examples/fig3_untied.py --out out/examples --d 200
	$(BIN)/python examples/weak_recovery.py --out out/examples
	$(BIN)/python examples/finite_lr.py --out out/examples
	$(BIN)/python examples/multihead.py --out out/examples
	$(BIN)/python examples/schedules.py --out out/examples
	$(BIN)/python examples/noise_floors.py --out out/examples
	$(BIN)/python examples/scaling_law.py --out out/examples
	$(BIN)/python examples/wishart_teacher.py --out out/examples

# Draw docs/figures again from their JSON with the current figure code (no computation repeated).
redraw-figures: install
	$(BIN)/python examples/redraw_figures.py

demo: install
	$(BIN)/momentgen generate-truncation examples/configs/fig4_linear.toml --out out/demo/fig4_linear.py
	$(BIN)/momentgen compare examples/configs/fig4_linear.toml --degrees 4,6,8 --d 200,400 --seeds 2 \
	    --theory-init finite --closures zero,quadrature,matrix-model --out out/demo
	$(BIN)/python examples/fig4_linear.py --out out/demo --d 200

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis out
