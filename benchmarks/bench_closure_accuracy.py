"""Benchmark: error against cost of the closures on the cases of issue 18, against a d → ∞ reference.

Cases (``--cases``, default all three):

* ``untied-h1`` — fig. 3 (untied S = UVᵀ, L = 1, MSE, h1), slow phase τ ∈ [0, 0.8];
* ``untied-h2-mean`` — the same with h2, teacher mean m₂ = 1.5 and student mean m₁ = 0.2 (h2 is
  even: from m₁ = 0 exactly, the unstable symmetric point, finite-d runs pick the branch ±m* at
  random and their average means nothing); the overlap rises at once and saturates at 0.5;
* ``tied-K4`` — `multihead_softmax` (tied, K = 4: two trainable heads, two teacher heads, row
  softmax, L = 2), t ∈ [0, 1] (reference seeds 48/64/24: a flow at d = 800 costs ~35 s).

Reference: the finite-d slow matrix flow (the matrix-model closure run on Gaussian matrices of
size d: `momentgen.evidence.comparison.theory_task`) at d = 200, 400, 800 with several seeds, fitted as
``y = f∞ + a/d + β·(x₀ − μ₀)`` by least squares (``--quadratic``: + b/d²), where ``x₀`` are each
run's initial values of every reported word and ``μ₀`` their exact d = ∞ values (control variates:
the part of a run's deviation explained by its own initial fluctuation is removed; on untied h1
they cut the standard error from 3.5e-3 to 1.1e-3). The reference's standard error (max over the
compared words and times) is printed with a lack-of-fit check, and 3 × SE is the *resolution*: an
error below it cannot be told from the reference's own noise. Flows are cached under ``--cache`` (keyed by the config
hash, d and seed), so a second run costs only the closures.

Methods: the quadrature closure at order n (its whole solve, legs included), the Richardson
combination ``2 q_n − q_{n−1}`` of two orders (cost: both solves), the matrix-model closure
at size n (one Haar draw, its n/2 leg included), and its ensemble of S draws with control
variates (``n×S``; `momentgen.dynamics.ensemble`, two processes, the n/2 ensemble included); for tied K = 4
also the baseline *before* the pair-of-heads grouping of Φ (`common.row_by_row`: the quadrature
closure with Φ integrated row by row, 4-D, timed in the same run), for untied h2 with a mean one
draw with the factors shifted to the mean as before they were centred (`common.shifted_law_factors`;
the previous ensembles, shifted, were 1.5e-2 at 200×16). Columns:
method, seconds, sup error over the compared words and times, the closure's own estimate, and
the horizon the run reached (a run that stopped early is compared on what it reached).

Writes ``OUT/closure_error_vs_cost.{png,svg,pdf}`` and ``.json``/``.csv`` of every number.
Run: ``python benchmarks/bench_closure_accuracy.py [--cases untied-h1] [--seeds 8,8,6] [--out out/bench]``
(the first run computes the reference flows: about 10 minutes a case on two cores).
"""

import argparse
import pathlib
import tempfile
import time

import numpy as np
from common import SMOKE, pick, row_by_row, shifted_law_factors

from momentgen.compiler.initial import exact_moments
from momentgen.core import figures
from momentgen.core.files import PAPER_FORMATS, write_csv
from momentgen.dynamics.closures import solve_with_closure
from momentgen.dynamics.ensemble import usable_controls
from momentgen.evidence.comparison import run_tasks, theory_task
from momentgen.models.words import parse
from momentgen.setting.config import load_config

UNTIED_WORDS = ["M1 M2^T", "M1 M2", "M1 M1^T"]
UNTIED = dict(  # what both untied cases run and aim at
    name="fig3_untied_h1",
    quadrature=(1, 2, 3),
    sizes=(50, 100, 200, 400),
    ensembles=((50, 40), (100, 40), (150, 20), (200, 16)),
    target=5e-3,
)
UNTIED_HORIZON = dict(integrate={"T": 0.8, "points": 17}, truncation={"observables": UNTIED_WORDS})
CASES = {
    "untied-h1": dict(UNTIED, changes=UNTIED_HORIZON),
    "untied-h2-mean": dict(
        UNTIED,
        changes=dict(UNTIED_HORIZON, loss={"activation": "h2"}, init={1: {"mean": 0.2}, 2: {"mean": 1.5}}),
        shifted=(200, 400),  # one draw with the factors shifted to the mean, as before they were centred
    ),
    "tied-K4": dict(
        name="multihead_softmax",
        changes=dict(integrate={"T": 1.0, "points": 11}),
        quadrature=(1, 2, 3, 4),
        before=(1, 2),  # the quadrature closure with Φ integrated row by row, as before the pair grouping
        sizes=(50, 100, 200),
        ensembles=((100, 16), (200, 8)),
        target=1e-3,
        seeds=(48, 64, 24),  # a flow at d = 800 costs ~35 s: this many make the resolution ~1e-3
    ),
}


def configure(case, smoke):
    spec = CASES[case]
    config = load_config(spec["name"]).replace(**spec["changes"])
    if smoke:
        config = config.replace(integrate={"T": 0.05, "points": 3})
    return config


def flow_runs(config, dims, seeds, cache):
    """({d: (seeds × words × times) array}, words) of finite-d flows — every word the closure reports,
    not only the compared ones — from ``cache`` when already computed."""
    todo, out, words = [], {d: {} for d in dims}, None
    for d, count in zip(dims, seeds):
        for seed in range(count):
            path = cache / f"flow-v2_{config.digest[:16]}_d{d}_s{seed}.npz"  # v2: every reported word
            if path.exists():
                stored = np.load(path)
                out[d][seed], words = stored["series"], list(stored["words"])
            else:
                todo.append((d, seed, path))
    results = run_tasks([(theory_task, (config.raw, config.source, "matrix-model", None, d, s)) for d, s, _ in todo])
    for (d, seed, path), result in zip(todo, results):
        if result["status"] != "ok":
            raise RuntimeError(f"the reference flow d = {d}, seed {seed} stopped: {result['message']}")
        words = sorted(result["series"])
        series = np.array([result["series"][w] for w in words])
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial.npz")
        np.savez(partial, series=series, words=np.array(words))
        partial.replace(path)  # atomic: a cache entry is whole or absent
        out[d][seed] = series
    return {d: np.array([runs[s] for s in sorted(runs)]) for d, runs in out.items()}, words


def reference(config, runs, words, quadratic=False):
    """(f∞, its standard error, the worst lack of fit) on ``words``: least squares
    ``y = f∞ + a/d [+ b/d²] + β·(x₀ − μ₀)`` over every run, where ``x₀`` are the run's initial
    values of every reported word and ``μ₀`` their exact d = ∞ values. Lack of fit: max over d,
    words and times of |mean residual at that d| / its standard error (≈ 2–3 when the model fits)."""
    model = config.model
    mu0 = exact_moments(model, config.inits(), [parse(w, model.kind, model.K) for w in words])
    Y = np.concatenate(list(runs.values()))
    sizes = np.concatenate([np.full(len(v), d) for d, v in runs.items()])
    x0 = Y[:, :, 0] - mu0
    powers = [1.0 / sizes] + ([1.0 / sizes**2] if quadratic else [])
    controls = x0[:, usable_controls(x0, len(Y) - 1 - len(powers) - 4)]  # four residual degrees of freedom
    X = np.column_stack([np.ones(len(Y)), *powers, controls])
    flat = Y.reshape(len(Y), -1)
    coefficients, *_ = np.linalg.lstsq(X, flat, rcond=None)
    dof = len(Y) - X.shape[1]
    if dof < 2:
        raise RuntimeError(f"{len(Y)} reference runs for {X.shape[1]} fitted parameters: add seeds")
    residual = (flat - X @ coefficients).reshape(Y.shape)
    variance = (residual.reshape(len(Y), -1) ** 2).sum(axis=0) / dof * np.linalg.pinv(X.T @ X)[0, 0]
    misfit = 0.0
    for d in runs:
        group = residual[sizes == d]
        spread = group.std(axis=0, ddof=1) / np.sqrt(len(group))
        misfit = max(misfit, float(np.max(np.abs(group.mean(axis=0)) / np.maximum(spread, 1e-12))))
    return coefficients[0].reshape(Y.shape[1:]), np.sqrt(variance).reshape(Y.shape[1:]), misfit


def closure_points(config, spec, exact):
    """Rows (method, order, seconds, sup error, estimate, horizon reached). A run that stopped early
    (e.g. a state at the feasible set's boundary) is compared on the part it reached."""
    words = list(config.settings.truncation.observables)
    times = np.linspace(0.0, config.settings.integrate.T, exact.shape[1])
    rows, quadrature = [], {}

    def timed_solve(closure, **options):
        start = time.perf_counter()
        result = solve_with_closure(config.replace(truncation={"draws": options.pop("draws", 1)}), closure, **options)
        return np.array([result.series[w] for w in words]), time.perf_counter() - start, result.error_estimate

    def add(method, order, values, seconds, estimate):
        reached = values.shape[1]
        sup = float(np.abs(values - exact[:, :reached]).max())
        rows.append((method, order, seconds, sup, estimate, float(times[reached - 1])))

    for n in pick(spec["quadrature"], spec["quadrature"][:1]):
        quadrature[n] = timed_solve("quadrature", degree=2 * n + 1)
        add("quadrature", n, *quadrature[n])
        if n - 1 in quadrature:
            (fine, seconds, _), (coarse, cost, _) = quadrature[n], quadrature[n - 1]
            reached = min(fine.shape[1], coarse.shape[1])
            add("quadrature 2q_n − q_n−1", n, 2 * fine[:, :reached] - coarse[:, :reached], seconds + cost, None)
    for n in pick(spec.get("before", ()), ()):
        with row_by_row():
            add("quadrature, Φ row by row (before)", n, *timed_solve("quadrature", degree=2 * n + 1))
    for size in pick(spec["sizes"], spec["sizes"][:1]):
        add("matrix-model", size, *timed_solve("matrix-model", size=size))
    for size in pick(spec.get("shifted", ()), ()):
        with shifted_law_factors():
            add("matrix-model, shifted factors (before)", size, *timed_solve("matrix-model", size=size))
    for size, draws in pick(spec["ensembles"], [(20, 6)] if spec["ensembles"] else []):
        add("matrix-model ensemble", f"{size}×{draws}", *timed_solve("matrix-model", size=size, draws=draws))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--dims", default="200,400,800", help="reference sizes d")
    parser.add_argument("--seeds", help="reference seeds at each d (default: the case's own, else 8,8,6)")
    parser.add_argument("--out", default="out/bench")
    parser.add_argument("--cache", default="out/bench/reference-flows")
    parser.add_argument("--quadratic", action="store_true", help="fit a 1/d² term as well (noisier)")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--redraw", metavar="JSON", help="only draw the figure again from a record this wrote")
    args = parser.parse_args()
    if args.redraw:
        redraw(args.redraw, pathlib.Path(args.out))
        return
    cases = pick(args.cases.split(","), ["untied-h1"])
    dims = pick([int(d) for d in args.dims.split(",")], [20, 40])
    given = None if args.seeds is None else [int(s) for s in args.seeds.split(",")]
    out = pathlib.Path(tempfile.mkdtemp() if SMOKE else args.out)
    cache = out / "reference-flows" if SMOKE else pathlib.Path(args.cache)
    record, table = {"cases": {}}, []
    for case in cases:
        config, spec = configure(case, SMOKE), CASES[case]
        seeds = pick(given or list(spec.get("seeds", (8, 8, 6))), [11, 11])
        print(f"\n{case}: reference flows at d = {dims} with {seeds} seeds (cached in {cache})", flush=True)
        start = time.perf_counter()
        runs, words = flow_runs(config, dims, seeds, cache)
        fitted, spread, misfit = reference(config, runs, words, args.quadratic)
        compared = [words.index(w) for w in config.settings.truncation.observables]
        exact, error = fitted[compared], spread[compared]
        print(
            f"reference: {time.perf_counter() - start:.1f} s, standard error ≤ {error.max():.2e} (resolution 3 SE), "
            f"lack of fit ≤ {misfit:.1f} SE"
        )
        print(f"{'method':>34s} {'order':>6s} {'seconds':>8s} {'sup error':>10s} {'estimate':>9s} {'reached':>8s}")
        rows = closure_points(config, spec, exact)
        for method, order, seconds, sup, estimate, reached in rows:
            shown = "" if estimate is None else f"{estimate:9.2e}"
            print(f"{method:>34s} {order:>6} {seconds:8.2f} {sup:10.2e} {shown:>9s} {reached:8.3g}", flush=True)
            table.append([case, method, order, seconds, sup, estimate, reached])
        record["cases"][case] = {
            "config": {"hash": config.digest, "tables": config.raw},
            "reference": {
                "dims": dims,
                "seeds": seeds,
                "standard_error": float(error.max()),
                "lack_of_fit_se": misfit,
                "quadratic": args.quadratic,
            },
            "target": spec["target"],
            "rows": [dict(zip(("method", "order", "seconds", "sup_error", "estimate", "reached"), r)) for r in rows],
        }
    header = ["case", "method", "order", "seconds", "sup_error", "estimate", "reached"]
    write_csv(out / "closure_error_vs_cost.csv", header, table)
    path = out / "closure_error_vs_cost.png"
    figures.save(
        plot(record), path, record, formats=PAPER_FORMATS, dpi=150, drawn_by="benchmarks/bench_closure_accuracy.py:plot"
    )
    print(f"\nwrote {out / 'closure_error_vs_cost'}.{{png,svg,pdf,json,csv}}")


LABEL_OFFSETS = ((3, 3), (3, -9), (-3, 3), (-3, -9))  # right above, right below, left above, left below
#: The cases and methods in the words of the paper's reader (the record keeps the short keys).
TITLES = {
    "untied-h1": "untied S = UVᵀ, h1 (fig. 3)",
    "untied-h2-mean": "untied, h2, teacher mean 1.5",
    "tied-K4": "tied, two heads learn two (K = 4)",
}
METHODS = {
    "quadrature": "quadrature closure (label: order n)",
    "quadrature 2q_n − q_n−1": "quadrature, two orders extrapolated",
    "matrix-model": "matrix-model closure (label: size n)",
    "matrix-model ensemble": "matrix-model ensemble (n × draws)",
    "matrix-model, shifted factors (before)": "matrix model, mean not centred (earlier design)",
    "quadrature, Φ row by row (before)": "quadrature, Φ row by row (earlier design)",
}


def plot(record):
    """One panel per case: sup error against seconds, each method a line labelled by its order (one
    colour per method in every panel), the target (dashed), the 30 s budget (dotted) and the
    reference's resolution (shaded); one legend below the panels."""
    cases = record["cases"]
    methods = list(dict.fromkeys(r["method"] for data in cases.values() for r in data["rows"]))
    colours = {method: f"C{i}" for i, method in enumerate(methods)}
    figure, axes = figures.new_figure(len(cases), width=4.4, height=4.4)
    for ax, (case, data) in zip(np.atleast_1d(axes), cases.items()):
        for method in dict.fromkeys(r["method"] for r in data["rows"]):
            points = [r for r in data["rows"] if r["method"] == method]
            x, y = [p["seconds"] for p in points], [p["sup_error"] for p in points]
            figures.theory(ax, x, y, METHODS.get(method, method), color=colours[method], marker="o", ms=4)
            for i, p in enumerate(points):  # labels cycle round their points: close neighbours do not overlap
                ax.annotate(
                    str(p["order"]),
                    (p["seconds"], p["sup_error"]),
                    fontsize=6,
                    color=colours[method],
                    xytext=LABEL_OFFSETS[i % 4],
                    textcoords="offset points",
                    ha="right" if i % 4 > 1 else "left",
                )
        ax.axhline(data["target"], ls="--", c="k", lw=0.8, label="target error")
        ax.axvline(30.0, ls=":", c="k", lw=0.8, label="30 s budget")
        ax.axhspan(1e-6, 3 * data["reference"]["standard_error"], color="0.88", label="reference's resolution (3 SE)")
        ax.set_xscale("log")
        ax.set_ylim(bottom=min(1e-4, data["target"] / 3))
        left, right = ax.get_xlim()
        ax.set_xlim(min(left, 0.1), max(right, 45.0))  # the 30 s budget in view
        figures.finish(ax, "seconds (2 cores)", "sup error against the d → ∞ reference", TITLES.get(case, case),
                       legend=False, log=True)  # fmt: skip
    legend = {}  # label → handle, each once, over every panel
    for ax in np.atleast_1d(axes):
        handles, labels = ax.get_legend_handles_labels()
        legend.update(zip(labels, handles))
    figure.legend(legend.values(), legend.keys(), loc="outside lower center", ncols=3, fontsize=7)
    return figure


def redraw(path, out):
    """Draw the figure again from a record this benchmark wrote (``--redraw``): the numbers as measured then
    (their provenance kept as ``measured``), the figure and its checks as of now."""
    import json  # noqa: PLC0415

    record = json.loads(pathlib.Path(path).read_text())
    record["measured"] = record.pop("provenance")
    record.pop("figure_checks", None)
    record.pop("drawn_by", None)
    path = out / "closure_error_vs_cost.png"
    figures.save(
        plot(record), path, record, formats=PAPER_FORMATS, dpi=150, drawn_by="benchmarks/bench_closure_accuracy.py:plot"
    )


if __name__ == "__main__":
    main()
