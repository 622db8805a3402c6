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
(p12 → 0.99; 200 000 SGD steps at d = 400) from the quadrature closure alone, orders 5–7,
with the n vs n − 1 estimate.

Run: ``python examples/fig1_softmax.py --out out/examples [--d 400 --seeds 2 --T 1]``
(about 10 minutes on two cores at the defaults).
"""

import argparse
import json
import pathlib

import numpy as np
from matplotlib.figure import Figure

from momentgen.closures import solve_with_closure
from momentgen.comparison import compare
from momentgen.config import load_config
from momentgen.files import PAPER_FORMATS, save_figure

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
    config.raw["integrate"].update(T=args.T, points=args.points)
    config.raw["truncation"]["degree"] = QUADRATURE_DEGREE
    data = compare(
        config,
        degrees=(2, 4, 6, 8, 10),
        dims=(args.d,),
        seeds=list(range(args.seeds)),
        out=out / "fig1",
        closures=("zero", "quadrature", "matrix-model"),
        theory_init="finite",
    )
    sgd = config.section("sgd")
    print(f"eta d / B = {sgd['lr'] * args.d / sgd['batch']:.4f}; horizon t = {args.T}")
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
    config.raw["integrate"].update(T=T, points=201, validity_tol=1e-2)
    runs = {n: solve_with_closure(config, "quadrature", degree=2 * n + 1) for n in (5, 6, 7)}
    summary = {
        n: {
            "seconds": r["seconds"],
            "error_estimate": r["error_estimate"],
            "p12_end": r["derived"]["p12"][-1],
            "max_traciality_defect": max(r["error_series"]["traciality_defect"]),
        }
        for n, r in runs.items()
    }
    (out / "fig1_learning_curve.json").write_text(
        json.dumps(
            {
                "t": runs[7]["t"],
                "p12": {n: r["derived"]["p12"] for n, r in runs.items()},
                "estimate": {n: r["error_series"]["estimate"] for n, r in runs.items()},
                "summary": summary,
            },
            indent=1,
        )
    )
    fig = Figure(figsize=(5.5, 4))
    ax = fig.subplots()
    for n, r in runs.items():
        p12, band = np.array(r["derived"]["p12"]), np.array(r["error_series"]["estimate"])
        (line,) = ax.plot(r["t"], p12, label=f"quadrature n={n} ({r['seconds']:.1f} s)")
        ax.fill_between(r["t"], p12 - band, p12 + band, color=line.get_color(), alpha=0.2, lw=0)
    ax.set(xlabel="t = 4nη/d", ylabel="p12 = q12 − t1 t2", title="fig. 1 setting, whole learning curve (d = ∞)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, out / "fig1_learning_curve.png", formats=PAPER_FORMATS, dpi=110)
    for n, s in summary.items():
        print(
            f"learning curve, quadrature n={n}: {s['seconds']:.1f} s, p12(20) = {s['p12_end']:.4f}, "
            f"estimate {s['error_estimate']:.1e}"
        )


if __name__ == "__main__":
    main()
