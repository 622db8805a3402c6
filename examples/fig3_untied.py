"""Fig. 3: untied attention S = UVᵀ, L = 1, MSE — h1 learns on the slow scale, h2 and h3 stall.

`examples/configs/fig3_untied_h1.toml` with the activation set to h1, h2, h3: standard
Gaussian U, V for student and teacher (N(0, 1/d) entries), no weight decay, N(0, I_d) data.
Online SGD at d (default 200; the paper uses d = 800, B = 4096, which two cores cannot run
in minutes) with η = 0.01, B = 1024 (ηd/B = 0.002), one seed per activation, on the slow axis
τ = nη/d; theory: the quadrature closure (d = ∞, order n = 3 for h1, 2 for h2/h3).

What it shows, measured: the symmetric overlap μ((M1+M1ᵀ)(M2+M2ᵀ)) of h1 rises at once and
the closure follows it; for h2 and h3, a_12 = 0 on the free manifold (E[σ′] = 0), so at d = ∞
the overlap stays exactly 0 — at finite d SGD leaves it only after an O(ln d) delay (h2,
MATH.md §4) or later still (h3). The zero closure leaves the feasible set at once here.

Writes ``OUT/fig3_untied.png``, ``.json`` and ``.csv``. Run:
``python examples/fig3_untied.py --out out/examples [--d 200 --T 0.8]`` (about 10 minutes at d = 200).
"""

import argparse
import pathlib

import numpy as np

from momentgen.core import figures
from momentgen.core.files import PAPER_FORMATS, write_csv
from momentgen.dynamics.closures import solve_with_closure
from momentgen.evidence.comparison import run_tasks, sgd_task
from momentgen.setting.config import load_config

CONFIG = pathlib.Path(__file__).with_name("configs") / "fig3_untied_h1.toml"
ACTIVATIONS = ("h1", "h2", "h3")
ESCAPE = 0.5  # the |overlap| level that counts as "escaped" (h2 is even, so −M2 is a solution too)


def configure(activation, d, T, points):
    config = load_config(CONFIG)
    config = config.replace(loss={"activation": activation})
    config = config.replace(integrate=dict(T=T, points=points))
    config = config.replace(sgd=dict(d=d, lr=0.01, batch=1024, seeds=[0]))
    return config


def symmetric_overlap(series):
    return 2 * np.asarray(series["M1 M2^T"]) + 2 * np.asarray(series["M1 M2"])


def first_crossing(t, values, level=ESCAPE):
    above = np.flatnonzero(np.abs(values) >= level)  # h2 is even: M1 → −M2 learns as well
    return float(t[above[0]]) if above.size else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out/examples")
    parser.add_argument("--d", type=int, default=200)
    parser.add_argument("--T", type=float, default=0.8)
    parser.add_argument("--points", type=int, default=41)
    args = parser.parse_args()
    configs = {a: configure(a, args.d, args.T, args.points) for a in ACTIVATIONS}
    runs = run_tasks([(sgd_task, (c.raw, c.source, args.d, 0)) for c in configs.values()], n_jobs=2)
    rows, panels = [], {}
    for (activation, config), sgd in zip(configs.items(), runs):
        theory = solve_with_closure(config, "quadrature", degree=7 if activation == "h1" else 5)
        t = np.array(theory.t)
        measured, predicted = symmetric_overlap(sgd["series"]), np.array(theory.derived["symmetric_overlap"])
        zero = solve_with_closure(config, "zero", degree=4)
        panels[activation] = {
            "t": t.tolist(),
            "sgd": measured.tolist(),
            "theory": predicted.tolist(),
            "estimate": theory.error_series["estimate"],
        }
        rows.append(
            {
                "activation": activation,
                "d": args.d,
                "sgd_seconds": sgd["seconds"],
                "sgd_escape_tau": first_crossing(t, measured),
                "theory_escape_tau": first_crossing(t, predicted),
                "sgd_overlap_end": float(measured[-1]),
                "theory_overlap_end": float(predicted[-1]),
                "sup_theory_minus_sgd": float(np.abs(predicted - measured).max()),
                "theory_order": theory.size,
                "theory_seconds": theory.extra["seconds"],
                "zero_closure_status": zero.status,
                "zero_closure_stopped_at": zero.t[-1],
            }
        )
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = {"d": args.d, "lr": 0.01, "batch": 1024, "time_scale": "tau = n eta / d", "table": rows, "panels": panels}
    write_csv(
        out / "fig3_untied.csv",
        ["activation", "tau", "sgd_overlap", "theory_overlap"],
        [[a, *row] for a, p in panels.items() for row in zip(p["t"], p["sgd"], p["theory"])],
    )
    figures.save(
        figure(data),
        out / "fig3_untied.png",
        data,
        load_config(CONFIG),
        formats=PAPER_FORMATS,
        dpi=110,
        drawn_by="examples/fig3_untied.py:figure",
    )
    print(
        f"{'act':>4s} {'SGD escape τ':>13s} {'theory escape τ':>16s} {'SGD end':>8s} {'theory end':>11s} {'sup|Δ|':>8s}"
    )
    for r in rows:
        print(
            f"{r['activation']:>4s} {str(r['sgd_escape_tau']):>13s} {str(r['theory_escape_tau']):>16s} "
            f"{r['sgd_overlap_end']:8.3f} {r['theory_overlap_end']:11.3f} {r['sup_theory_minus_sgd']:8.3f}"
        )
    print(f"wrote {out}/fig3_untied.png, .json, .csv")


#: What the d = ∞ theory says about each activation, in the legend (h2's student sits on a saddle at d = ∞).
NOTES = {"h2": " — stays at the saddle 0 at d = ∞; SGD leaves it after O(ln d)"}


def figure(data):
    """Theory (with its error band) over SGD per activation (tests/core/test_figures.py redraws
    docs/figures/fig3_untied.json)."""
    fig, (ax,) = figures.new_figure(1, width=6.4, height=4.4)
    for i, (activation, p) in enumerate(data["panels"].items()):
        color, theory = f"C{i}", np.asarray(p["theory"])
        note = NOTES.get(activation, "")
        figures.theory(ax, p["t"], theory, f"{activation}: quadrature closure (d = ∞){note}", color=color,
                       ls=("-", "--", "-.")[i], lw=2.2 - 0.4 * i)  # fmt: skip
        band = np.array([np.nan if e is None else e for e in p["estimate"]], float) * np.maximum(1.0, np.abs(theory))
        ax.fill_between(p["t"], theory - band, theory + band, color=color, alpha=0.2, lw=0, zorder=1)
        figures.measured(ax, p["t"], p["sgd"], None, f"{activation}: online SGD, d = {data['d']}", color=color,
                         marker="osD"[i])  # fmt: skip
    title = "untied, L = 1, MSE: weak recovery by activation"
    return figures.finish(ax, "τ = nη/d", "overlap μ((M1 + M1ᵀ)(M2 + M2ᵀ))", title, fontsize=7).figure


if __name__ == "__main__":
    main()
