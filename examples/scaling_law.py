"""Scaling laws: the risk against samples when the data covariance is a power law (MATH.md §10).

`configs/scaling_law.toml`: tied linear attention, tokens with covariance Σ whose eigenvalue at quantile u is
(1 + a)u^a, a teacher aligned with it (S2 = 1.2 Σ^{1/2}) and a student started at 0.5 I. Each direction λ of Σ
is learned at the rate 4λ^{2+b}c: the many small directions of a large exponent a are learned last, and the risk
falls as a power of the samples. For a = 0.5, 1, 2: the theory (the quadrature closure with Σ's edge-adapted rule,
degree 7, words vouched for to 5e-3) and online SGD at d = 50 and 100 (η = 0.01, B = 64, κ = ηd/B ≤ 0.016), the
risk on fresh samples; the late-time exponent of each curve fitted on t ∈ [T/4, T] (log–log least squares).

Writes ``OUT/scaling_law.png`` (and ``.svg``, ``.pdf``), ``OUT/scaling_law.csv`` (the risk curves) and
``OUT/scaling_law.json`` (fitted exponents, run times, provenance).
Run: ``python examples/scaling_law.py --out out/examples`` (about 2 min on 2 cores).
"""

import argparse
import pathlib

import numpy as np

from momentgen import figures
from momentgen.comparison import run_tasks, sgd_task, theory_task
from momentgen.config import load_config
from momentgen.files import PAPER_FORMATS, write_csv

CONFIG = pathlib.Path(__file__).with_name("configs") / "scaling_law.toml"
EXPONENTS = (0.5, 1.0, 2.0)
DIMENSIONS = (50, 100)


def late_exponent(t, risk, T):
    """The slope of log risk against log t on t ∈ [T/4, T] (least squares; NaN where a risk is not positive)."""
    t, risk = np.asarray(t, float), np.asarray(risk, float)
    keep = (t >= T / 4) & (risk > 0)
    if keep.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.log(t[keep]), np.log(risk[keep]), 1)[0])


def run(seeds):
    """Per exponent: the theory's JSON and SGD at each d (one task per seed), all in parallel."""
    base = load_config(CONFIG)
    cases = {a: base.replace(data={"exponent": a}, sgd={"seeds": list(range(seeds))}) for a in EXPONENTS}
    tasks = [(theory_task, (c.raw, c.source, None, None)) for c in cases.values()]
    tasks += [(sgd_task, (c.raw, c.source, d, s)) for c in cases.values() for d in DIMENSIONS for s in range(seeds)]
    results = run_tasks(tasks)
    T = base.settings.integrate.T
    out, cursor = {}, len(cases)
    for i, (a, config) in enumerate(cases.items()):
        theory = results[i]
        entry = {
            "t": theory["t"],
            "theory": theory["derived"]["risk"],
            "risk_relative_estimate": theory["error_series"].get("risk_relative"),
            "status": theory["status"],
            "exponent_theory": late_exponent(theory["t"], theory["derived"]["risk"], T),
            "sgd": {},
            "config_hash": config.digest,
            "seconds": {"theory": theory["seconds"]},
        }
        for d in DIMENSIONS:
            runs = results[cursor : cursor + seeds]
            cursor += seeds
            risks = np.array([r["risk"] for r in runs])
            se = risks.std(0, ddof=1) / np.sqrt(seeds) if seeds > 1 else np.array(runs[0]["risk_se"])
            entry["sgd"][str(d)] = {
                "t": runs[0]["t"],
                "risk": risks.mean(0).tolist(),
                "risk_se": se.tolist(),
                "exponent": late_exponent(runs[0]["t"], risks.mean(0), T),
            }
            entry["seconds"][f"sgd_d{d}"] = sum(r["seconds"] for r in runs)
        out[str(a)] = entry
    return out


def write(out, results, args):
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for a, r in results.items():
        rows += [[a, "theory", "", t, v, ""] for t, v in zip(r["t"], r["theory"])]
        for d, s in r["sgd"].items():
            rows += [[a, "sgd", d, t, v, e] for t, v, e in zip(s["t"], s["risk"], s["risk_se"])]
    write_csv(out / "scaling_law.csv", ["exponent_a", "source", "d", "t", "risk", "risk_se"], rows)
    table = [
        {"a": a, "theory": r["exponent_theory"], **{f"sgd_d{d}": s["exponent"] for d, s in r["sgd"].items()}}
        for a, r in results.items()
    ]
    data = {"exponents": table, "args": vars(args), "runs": results}
    figures.save(
        figure(data),
        out / "scaling_law.png",
        data,
        load_config(CONFIG),
        formats=PAPER_FORMATS,
        dpi=130,
        drawn_by="examples/scaling_law.py:figure",
    )
    return table


def figure(data):
    """Risk against samples on log–log axes, theory and SGD per exponent (tests/test_figures.py redraws it)."""
    fig, (ax,) = figures.new_figure(1, width=6.4, height=4.4)
    for color, (a, r) in zip(("C0", "C1", "C2"), data["runs"].items()):
        t = np.array(r["t"])
        keep = t > 0
        figures.theory(
            ax, t[keep], np.array(r["theory"])[keep], f"a = {a}: theory (slope {r['exponent_theory']:.2f})", color=color
        )
        for marker, (d, s) in zip(("o", "s"), r["sgd"].items()):
            ts = np.array(s["t"])
            figures.measured(
                ax, ts[ts > 0], np.array(s["risk"])[ts > 0], np.array(s["risk_se"])[ts > 0],
                f"a = {a}: SGD d = {d} (slope {s['exponent']:.2f})", color=color, marker=marker,
            )  # fmt: skip
    ax.set_xscale("log")
    xlabel = "samples seen, as t = 4nη/d"
    title = r"power-law data $\Sigma$, teacher $1.2\,\Sigma^{1/2}$: the risk's tail is a power law"
    return figures.finish(ax, xlabel, "population risk", title, log=True, fontsize=7).figure


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out/examples")
    parser.add_argument("--seeds", type=int, default=1)
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    results = run(args.seeds)
    table = write(out, results, args)
    print(
        f"{'a':>5s} {'theory':>8s} " + " ".join(f"{'SGD d=' + str(d):>9s}" for d in DIMENSIONS) + "   (late-time slope)"
    )
    for row in table:
        print(f"{row['a']:>5s} {row['theory']:8.3f} " + " ".join(f"{row[f'sgd_d{d}']:9.3f}" for d in DIMENSIONS))
    print(f"wrote {out / 'scaling_law.png'}, .svg, .pdf, .csv and .json")


if __name__ == "__main__":
    main()
