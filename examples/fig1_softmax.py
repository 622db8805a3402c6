"""Fig. 1: tied attention, L = 2 tokens, row-softmax, MSE — truncation degrees vs online SGD.

`examples/configs/fig1_tied_softmax.toml`: d = 400, η = 0.01, B = 512 (ηd/B = 0.0078 ≪ 1, so
the Itô bias of SGD is below 1 %), no weight decay, both student and teacher N(0, 1/d).

Panel a (`OUT/fig1/compare.{png,json}`), t ∈ [0, T] (default T = 1: 10 000 SGD steps, p12
from 0 to ≈ 0.5): zero-closure degrees 2…10, each with its validity horizon, and the
quadrature closure (order 6), all started from the moments of the first seed's d × d
matrices (MATH.md §7); the matrix-model closure (n = 400, from the d = ∞ law); reference:
SGD (mean ± sd over seeds) and the finite-d matrix flow from the same matrices. The
``sup_error_valid`` column of the table is each degree's error on its validity window.

Panel b (`OUT/fig1_learning_curve.{png,json}`): the whole learning curve t ∈ [0, 20]
(p12 → 0.99; 200 000 SGD steps at d = 400): exact from the riccati closure (one trainable tied letter, MATH.md §15),
and the quadrature closure at orders 5–7 with its estimate, against it.

Run: ``python examples/fig1_softmax.py --out out/examples [--d 400 --seeds 2 --T 1]``
(about 10 minutes on two cores at the defaults).
"""

import argparse
import pathlib

import numpy as np

from momentgen.core import figures
from momentgen.core.files import PAPER_FORMATS
from momentgen.dynamics.closures import solve_with_closure
from momentgen.evidence.comparison import compare
from momentgen.setting.config import load_config

CONFIG = pathlib.Path(__file__).with_name("configs") / "fig1_tied_softmax.toml"
QUADRATURE_DEGREE = 13  # order n = 6


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out/examples")
    parser.add_argument("--d", type=int, default=400)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--T", type=float, default=1.0)
    parser.add_argument("--points", type=int, default=41)
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    config = load_config(CONFIG)
    config = config.replace(integrate=dict(T=args.T, points=args.points))
    config = config.replace(truncation={"degree": QUADRATURE_DEGREE})
    data = compare(
        config,
        degrees=(2, 4, 6, 8, 10),
        dims=(args.d,),
        seeds=list(range(args.seeds)),
        out=out / "fig1",
        closures=("zero", "quadrature", "matrix-model"),
        theory_init="finite",
    )
    sgd = config.settings.sgd
    print(f"eta d / B = {sgd.lr * args.d / sgd.batch:.4f}; horizon t = {args.T}")
    print(f"{'theory':>26s} {'valid_until':>11s}  sup|theory − SGD| on q12: all / in window")
    for name, theory in data["theory"].items():
        row = next(
            r
            for r in data["table"]
            if r["theory"] == name and r["comparison"] == "theory-sgd" and r["observable"] == "S1 S2"
        )
        print(f"{name:>26s} {theory['valid_until']:11.4f}  {row['sup_error']:.2e} / {row['sup_error_valid']:.2e}")
    flow = next(r for r in data["table"] if r["comparison"] == "flow-sgd" and r["observable"] == "S1 S2")
    print(f"flow vs SGD on q12: {flow['sup_error']:.2e}; wrote {out}/fig1/compare.png and compare.json")
    learning_curve(out)


def learning_curve(out, T=20.0):
    config = load_config(CONFIG)
    config = config.replace(integrate=dict(T=T, points=201, validity_tol=1e-2))
    runs = {n: solve_with_closure(config, "quadrature", degree=2 * n + 1) for n in (5, 6, 7)}
    exact = solve_with_closure(config, "riccati")  # one trainable tied letter: the exact d = ∞ flow (MATH.md §15)
    summary = {
        str(n): {
            "seconds": r.extra["seconds"],
            "error_estimate": r.error_estimate,
            "p12_end": r.derived["p12"][-1],
            "max_traciality_defect": max(r.error_series["traciality_defect"]),
        }
        for n, r in runs.items()
    }
    data = {
        "t": runs[7].t,
        "p12": {str(n): r.derived["p12"] for n, r in runs.items()},
        "estimate": {str(n): r.error_series["estimate"] for n, r in runs.items()},
        "summary": summary,
        "exact": {
            "p12": exact.derived["p12"],
            "risk": exact.derived["risk"],
            "seconds": exact.extra["seconds"],
            "error_estimate": exact.error_estimate,
        },
    }
    path = out / "fig1_learning_curve.png"
    figure = learning_curve_figure(data)
    figures.save(
        figure, path, data, config, formats=PAPER_FORMATS, drawn_by="examples/fig1_softmax.py:learning_curve_figure"
    )
    for n, s in summary.items():
        print(
            f"learning curve, quadrature n={n}: {s['seconds']:.1f} s, p12(20) = {s['p12_end']:.4f}, "
            f"estimate {s['error_estimate']:.1e}, true error "
            f"{np.abs(np.asarray(data['p12'][n]) - np.asarray(data['exact']['p12'])).max():.1e}"
        )
    print(f"learning curve, riccati (exact): {exact.extra['seconds']:.1f} s, p12(20) = {exact.derived['p12'][-1]:.4f}")


def learning_curve_figure(data):
    """Left: p12 over the whole curve, exact (the riccati closure) and from the quadrature closure's highest order with
    its estimate band; right: every order's true error against the exact curve and the top order's estimate, on a log
    axis (tests/core/test_figures.py redraws docs/figures/fig1_learning_curve.json)."""
    fig, (left, right) = figures.new_figure(2, width=5.0, height=3.9)
    t = np.asarray(data["t"])
    top = max(data["p12"], key=int)
    p12 = np.asarray(data["p12"][top])
    band = np.array([np.nan if e is None else e for e in data["estimate"][top]], float) * np.maximum(1.0, np.abs(p12))
    seconds = data["summary"][top]["seconds"]
    exact = np.asarray(data["exact"]["p12"])
    figures.exact(left, t, exact, f"riccati closure, exact ({data['exact']['seconds']:.1f} s)")
    figures.theory(left, t, p12, f"quadrature closure, order n = {top} ({seconds:.1f} s)", color="C0")
    left.fill_between(t, p12 - band, p12 + band, color="C0", alpha=0.25, lw=0, zorder=1, label="its error estimate")
    title = "fig. 1 setting, the whole learning curve (d = ∞)"
    figures.finish(left, "t = 4nη/d", "centred overlap p12 = q12 − t1 t2", title)
    for i, (n, values) in enumerate(sorted(data["p12"].items(), key=lambda item: int(item[0]))):
        gap = np.abs(np.asarray(values) - exact) + 1e-16
        figures.theory(right, t, gap, f"|p12(n = {n}) − p12(exact)|", color=f"C{i + 1}")
    figures.theory(right, t, band + 1e-16, f"the estimate of order n = {top}", color="C0", ls="--")
    figures.finish(right, "t = 4nη/d", "error of p12", "quadrature orders against the exact curve", log=True)
    return fig


if __name__ == "__main__":
    main()
