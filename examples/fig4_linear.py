"""Fig. 4: truncation degrees vs the closed form vs SGD on the exactly solvable case.

Tied, L = 1, linear activation, Wishart student (entries N(0, σ²/d), width ratio r),
teacher S2 = cI (examples/configs/fig4_linear.toml). The d = ∞ solution is known in closed
form (every eigenvalue follows a logistic flow, averaged over Marchenko–Pastur), so the
truncation error of each degree M is measured exactly, together with each degree's
validity horizon (degrees M and M − 2 agree within the configured tolerance).

Third panel, beyond every degree's window (t ∈ [0, 0.5], where learning happens): online
SGD (default d = 400, η = 0.01, B = 512, seed 0), the closed form, and the quadrature
closure (n = 16 and 32), which stays valid.

Writes ``OUT/fig4_linear.png``, ``OUT/fig4_linear.csv`` (the curves) and
``OUT/fig4_linear.json`` (sup-errors inside each validity window, horizons, statuses, and
the long-horizon errors). Run: ``python examples/fig4_linear.py --out out/examples``.
"""

import argparse
import pathlib

import numpy as np

from momentgen.compiler.truncation import from_config
from momentgen.core import figures
from momentgen.core.files import PAPER_FORMATS, write_series_csv
from momentgen.dynamics.closures import solve_with_closure
from momentgen.dynamics.integrate import solve, validity_horizon
from momentgen.evidence.oracles import solvable_tied_moments
from momentgen.reference import simulate_config
from momentgen.setting.config import load_config

CONFIG = pathlib.Path(__file__).with_name("configs") / "fig4_linear.toml"
DEGREES = (2, 4, 6, 8, 10, 12)
WORDS = ("S1", "S1 S1", "S1 S2")


def run(T=0.15, points=151):
    config = load_config(CONFIG)
    student, teacher = config.inits()[1], config.inits()[2]
    runs = {}
    for M in DEGREES:
        truncation, y0 = from_config(config, M)
        runs[M] = solve(truncation, y0, T, points, "LSODA", rtol=1e-11, atol=1e-13)
    grid = np.linspace(0, T, points)
    exact = solvable_tied_moments(grid, student.width_ratio, student.scale, teacher.c, config.settings.model.gamma)
    table = []
    for M in DEGREES:
        result = runs[M]
        horizon = validity_horizon(result, runs.get(M - 2), list(WORDS), 1e-4)
        inside = result.t <= horizon
        error = max(np.abs(result.series(w)[inside] - exact[w][: len(result.t)][inside]).max() for w in WORDS)
        table.append(
            {
                "degree": M,
                "words": len(result.words),
                "status": result.status,
                "t_stop": result.t_stop,
                "valid_until": horizon,
                "sup_error_in_window": float(error),
            }
        )
    return grid, exact, runs, table


def long_horizon(d, T=0.5, points=51):
    """SGD at ``d``, the closed form and the quadrature closure on [0, T], past every degree's window."""
    config = load_config(CONFIG)
    config = config.replace(integrate=dict(T=T, points=points))
    config = config.replace(sgd={"d": d})
    student, teacher = config.inits()[1], config.inits()[2]
    grid = np.linspace(0, T, points)
    exact = solvable_tied_moments(grid, student.width_ratio, student.scale, teacher.c)
    sgd = simulate_config(config, progress=False)
    closures = {n: solve_with_closure(config, "quadrature", degree=2 * n + 1) for n in (16, 32)}
    zero = solve_with_closure(config, "zero", degree=12)
    summary = {
        "sgd": {
            "d": sgd["d"],
            "lr": sgd["lr"],
            "batch": sgd["batch"],
            "steps": sgd["steps"][-1],
            "sup_minus_exact_q11": float(np.abs(np.array(sgd["series"]["S1 S1"]) - exact["S1 S1"]).max()),
        },
        "quadrature": {
            n: {
                "sup_minus_exact_q11": float(np.abs(np.array(c.series["S1 S1"]) - exact["S1 S1"]).max()),
                "estimate": c.error_estimate,
                "seconds": c.extra["seconds"],
            }
            for n, c in closures.items()
        },
        "zero_M12": {"status": zero.status, "stopped_at": zero.t[-1]},
    }
    return {
        "t": grid,
        "exact": exact["S1 S1"],
        "sgd": sgd["series"]["S1 S1"],
        "quadrature": {n: c.series["S1 S1"] for n, c in closures.items()},
        "summary": summary,
    }


def numbers(grid, exact, runs, table, long):
    """Everything the figure shows and the table reports, JSON-ready."""
    return {
        "time_scale": "t = 4 n eta / d",
        "t": grid,
        "exact_q11": exact["S1 S1"],
        "degrees": {
            str(row["degree"]): {"t": runs[row["degree"]].t, "q11": runs[row["degree"]].series("S1 S1")}
            for row in table
        },
        "table": table,
        "long_horizon": {
            "t": long["t"],
            "exact_q11": long["exact"],
            "sgd_q11": long["sgd"],
            "quadrature_q11": {str(n): q for n, q in long["quadrature"].items()},
            **long["summary"],
        },
    }


def figure(data):
    """The three panels from `numbers` (also what tests/core/test_figures.py redraws from docs/figures/*.json)."""
    fig, (left, right, third) = figures.new_figure(3, width=5.0)
    t, exact = np.asarray(data["t"]), np.asarray(data["exact_q11"])
    figures.exact(left, t, exact)
    for row in data["table"]:
        run = data["degrees"][str(row["degree"])]
        line = figures.theory(left, run["t"], run["q11"], f"degree M = {row['degree']}", valid_until=row["valid_until"])
        error = np.abs(np.asarray(run["q11"]) - exact[: len(run["t"])]) + 1e-17
        figures.theory(right, run["t"], error, None, valid_until=row["valid_until"], color=line.get_color())
    left.set_ylim(0, 2.5 * exact.max())
    figures.finish(left, "t = 4nη/d", "q11 = μ(S1 S1)", "zero closure, degree M (dotted: past its window)")
    figures.finish(right, "t = 4nη/d", "|q11(M) − closed form|", "truncation error", log=True)
    right.set_ylim(1e-16, 10)
    long = data["long_horizon"]
    figures.exact(third, long["t"], long["exact_q11"])
    for n, q11 in long["quadrature_q11"].items():
        figures.theory(third, long["t"], q11, f"quadrature closure, order n = {n}", ls="--" if n == "16" else "-")
    sgd = long["sgd"]
    figures.measured(
        third, long["t"], long["sgd_q11"], None, f"online SGD, d = {sgd['d']}, η = {sgd['lr']}, B = {sgd['batch']}"
    )
    figures.finish(third, "t = 4nη/d", "q11 = μ(S1 S1)", "past every degree's window")
    return fig


def write(out, data, config):
    out.mkdir(parents=True, exist_ok=True)
    columns = {"exact_q11": data["exact_q11"]}
    for M, run in data["degrees"].items():
        columns[f"M{M}_q11"] = list(run["q11"]) + [""] * (len(data["t"]) - len(run["q11"]))
    write_series_csv(out / "fig4_linear.csv", data["t"], columns)
    figures.save(
        figure(data),
        out / "fig4_linear.png",
        data,
        config,
        formats=PAPER_FORMATS,
        drawn_by="examples/fig4_linear.py:figure",
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out/examples")
    parser.add_argument("--d", type=int, default=400, help="dimension of the SGD run")
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    grid, exact, runs, table = run()
    long = long_horizon(args.d)
    write(out, numbers(grid, exact, runs, table, long), load_config(CONFIG))
    print(f"{'M':>3s} {'words':>6s} {'status':>8s} {'valid_until':>12s} {'sup error in window':>20s}")
    for row in table:
        print(
            f"{row['degree']:3d} {row['words']:6d} {row['status']:>8s} {row['valid_until']:12.4f} "
            f"{row['sup_error_in_window']:20.2e}"
        )
    summary = long["summary"]
    print(
        f"t in [0, 0.5]: SGD d={summary['sgd']['d']} vs closed form on q11 "
        f"{summary['sgd']['sup_minus_exact_q11']:.2e}; "
        + "; ".join(
            f"quadrature n={n} {q['sup_minus_exact_q11']:.1e} (estimate {q['estimate']:.1e})"
            for n, q in summary["quadrature"].items()
        )
        + f"; zero closure M=12: {summary['zero_M12']['status']} at t = {summary['zero_M12']['stopped_at']:.3f}"
    )
    print(f"wrote {out / 'fig4_linear.png'}, .csv and .json")


if __name__ == "__main__":
    main()
