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
import csv
import json
import pathlib

import numpy as np
from matplotlib.figure import Figure

from momentgen.closures import solve_with_closure
from momentgen.config import load_config
from momentgen.files import PAPER_FORMATS, save_figure
from momentgen.integrate import solve, validity_horizon
from momentgen.oracles import solvable_tied_moments
from momentgen.reference import simulate_config
from momentgen.truncation import from_config

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
    exact = solvable_tied_moments(grid, student.width_ratio, student.scale, teacher.c, config.section("model")["gamma"])
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
    config.raw["integrate"].update(T=T, points=points)
    config.raw["sgd"]["d"] = d
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
                "sup_minus_exact_q11": float(np.abs(np.array(c["series"]["S1 S1"]) - exact["S1 S1"]).max()),
                "estimate": c["error_estimate"],
                "seconds": c["seconds"],
            }
            for n, c in closures.items()
        },
        "zero_M12": {"status": zero["status"], "stopped_at": zero["t"][-1]},
    }
    return {
        "t": grid,
        "exact": exact["S1 S1"],
        "sgd": sgd["series"]["S1 S1"],
        "quadrature": {n: c["series"]["S1 S1"] for n, c in closures.items()},
        "summary": summary,
    }


def write(out, grid, exact, runs, table, long):
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "fig4_linear.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["t", "exact_q11"] + [f"M{M}_q11" for M in DEGREES])
        for i, t in enumerate(grid):
            row = [t, exact["S1 S1"][i]]
            row += [runs[M].series("S1 S1")[i] if i < len(runs[M].t) else "" for M in DEGREES]
            writer.writerow(row)
    (out / "fig4_linear.json").write_text(
        json.dumps({"time_scale": "t = 4 n eta / d", "table": table, "long_horizon": long["summary"]}, indent=1)
    )

    fig = Figure(figsize=(16, 4))
    left, right, third = fig.subplots(1, 3)
    left.plot(grid, exact["S1 S1"], "k-", lw=3, alpha=0.4, label="closed form (d = ∞)")
    for row in table:
        result = runs[row["degree"]]
        (line,) = left.plot(result.t, result.series("S1 S1"), label=f"M = {row['degree']}")
        left.axvline(row["valid_until"], color=line.get_color(), ls=":", lw=1)
        right.semilogy(
            result.t, np.abs(result.series("S1 S1") - exact["S1 S1"][: len(result.t)]) + 1e-17, color=line.get_color()
        )
    left.set(
        xlabel="t = 4nη/d",
        ylabel="q11 = μ(S1 S1)",
        ylim=(0, 2.5 * exact["S1 S1"].max()),
        title="zero-closure truncations (dotted: valid_until)",
    )
    right.set(xlabel="t = 4nη/d", ylabel="|q11(M) − exact|", ylim=(1e-16, 10), title="truncation error")
    left.legend(fontsize=8)
    third.plot(long["t"], long["exact"], "k-", lw=3, alpha=0.4, label="closed form (d = ∞)")
    for n, q11 in long["quadrature"].items():
        third.plot(long["t"], q11, "--", label=f"quadrature closure n = {n}")
    sgd = long["summary"]["sgd"]
    third.plot(long["t"], long["sgd"], "o", ms=3, label=f"SGD d = {sgd['d']}, η = {sgd['lr']}, B = {sgd['batch']}")
    third.set(xlabel="t = 4nη/d", ylabel="q11", title="past every degree's window: closures and SGD")
    third.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, out / "fig4_linear.png", formats=PAPER_FORMATS, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out/examples")
    parser.add_argument("--d", type=int, default=400, help="dimension of the SGD run")
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    grid, exact, runs, table = run()
    long = long_horizon(args.d)
    write(out, grid, exact, runs, table, long)
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
