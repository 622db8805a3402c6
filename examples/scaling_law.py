"""Scaling laws: the risk against samples when the data covariance is a power law (MATH.md §10).

`configs/scaling_law.toml`: tied linear attention, tokens with covariance Σ whose eigenvalue at quantile u is
(1 + a)u^a, a teacher aligned with it (S2 = 1.2 Σ^{1/2}) and a student started at 0.5 I. Each direction λ of Σ
is learned at the rate 4λ^{2+b}c: the many small directions of a large exponent a are learned last, and the risk
falls towards a power of the samples. For a = 0.5, 1, 2: the theory (the quadrature closure with Σ's edge-adapted
rule, degree 7, words vouched for to 5e-3) and online SGD at d = 50 and 100 (η = 0.0025, B = 64, κ = ηd/B ≤ 0.004),
the risk on fresh samples, and its *local slope* d log risk / d log t (the derived column ``risk_slope``). A slope is
an exponent only once it has settled (`dynamics.risk.settled_slope`: flat to 0.05 over the last decade of t); on
t ≤ 5 none has — the exact local slope of this commuting case still moves for decades (for a = 0.5 it is −3.1 at
t ≈ 3, −0.8 at t ≈ 30 and −1.7 at t = 10⁴), so the slope at the horizon is reported as what it is.

The ``exponent`` a here is that of the quantile law λ(u) = (1 + a)u^a (Tr Σ/d = 1): the *smallest* eigenvalues are a
power of their rank, λ_(k) ∝ (k/d)^a, and the law's density near 0 is ∝ λ^{1/a − 1}. The scaling-law literature's
λ_k ∝ k^{−α} ranks the *largest* first; its counting density near 0 is ∝ λ^{−1 − 1/α}, not a normalisable law. The
two give the same risk tail only through the teacher's weights: what the tail reads is the density times the
teacher's weight on each direction, here ∝ λ^{1/a − 1} · λ^{2 + 2b}.

Writes ``OUT/scaling_law.png`` (and ``.svg``, ``.pdf``), ``OUT/scaling_law.csv`` (the risk curves and their local
slopes) and ``OUT/scaling_law.json`` (slopes at the horizon, whether they settled, run times, provenance).
Run: ``python examples/scaling_law.py --out out/examples`` (about 3 min on 2 cores).
"""

import argparse
import pathlib

import matplotlib.ticker
import numpy as np

from momentgen.core import figures
from momentgen.core.files import PAPER_FORMATS, write_csv
from momentgen.dynamics.risk import local_slope, settled_slope
from momentgen.evidence.comparison import run_tasks, sgd_task, theory_task
from momentgen.setting.config import load_config

CONFIG = pathlib.Path(__file__).with_name("configs") / "scaling_law.toml"
EXPONENTS = (0.5, 1.0, 2.0)
DIMENSIONS = (50, 100)


def listed(values):
    """An array as a JSON list: NaN (the slope at t = 0, or where the risk is not positive) as null."""
    return [float(v) if np.isfinite(v) else None for v in np.asarray(values, float)]


def end_slope(t, risk):
    """The mean slope of log risk against log t over the last factor 2 of t, [T/2, T] (least squares: SGD's mean risk
    is noisy point to point) — a slope at the horizon, not an exponent (`dynamics.risk.settled_slope`); None where
    the risk is not positive."""
    t, risk = np.asarray(t, float), np.asarray(risk, float)
    keep = (t >= t[-1] / 2) & (risk > 0)
    return float(np.polyfit(np.log(t[keep]), np.log(risk[keep]), 1)[0]) if keep.sum() >= 2 else None


def run(seeds):
    """Per exponent: the theory's JSON and SGD at each d (one task per seed), all in parallel."""
    base = load_config(CONFIG)
    cases = {a: base.replace(data={"exponent": a}, sgd={"seeds": list(range(seeds))}) for a in EXPONENTS}
    tasks = [(theory_task, (c.raw, c.source, None, None)) for c in cases.values()]
    tasks += [(sgd_task, (c.raw, c.source, d, s)) for c in cases.values() for d in DIMENSIONS for s in range(seeds)]
    results = run_tasks(tasks)
    out, cursor = {}, len(cases)
    for i, (a, config) in enumerate(cases.items()):
        theory = results[i]
        entry = {
            "t": theory["t"],
            "theory": theory["derived"]["risk"],
            "risk_relative_estimate": theory["error_series"].get("risk_relative"),
            "status": theory["status"],
            "slope": listed(local_slope(theory["t"], theory["derived"]["risk"])),
            "slope_end_theory": end_slope(theory["t"], theory["derived"]["risk"]),
            "settled": settled_slope(theory["t"], local_slope(theory["t"], theory["derived"]["risk"]))[2],
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
                "slope_t": runs[0]["t"][::4],  # every 4th time: finite differences of a noisy mean
                "slope": listed(local_slope(runs[0]["t"][::4], risks.mean(0)[::4])),
                "slope_end": end_slope(runs[0]["t"], risks.mean(0)),
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
        {"a": a, "theory": r["slope_end_theory"], **{f"sgd_d{d}": s["slope_end"] for d, s in r["sgd"].items()},
         "settled": r["settled"]}
        for a, r in results.items()
    ]  # fmt: skip
    data = {"slopes_at_horizon": table, "args": vars(args), "runs": results}
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
    """Left: the risk against samples on log–log axes; right: its local slope d log risk / d log t — theory (lines)
    and SGD (markers) per exponent a (tests/core/test_figures.py redraws it)."""
    fig, (risk_ax, slope_ax) = figures.new_figure(2, width=4.8, height=4.2)
    for color, (a, r) in zip(("C0", "C1", "C2"), data["runs"].items()):
        t = np.array(r["t"])
        keep = t > 0
        figures.theory(risk_ax, t[keep], np.array(r["theory"])[keep], f"a = {a}: theory", color=color)
        figures.theory(slope_ax, t[keep], np.array(r["slope"], float)[keep], f"a = {a}: theory", color=color)
        for marker, (d, s) in zip(("o", "s"), r["sgd"].items()):
            ts = np.array(s["t"])
            figures.measured(
                risk_ax, ts[ts > 0], np.array(s["risk"])[ts > 0], np.array(s["risk_se"])[ts > 0],
                f"a = {a}: SGD d = {d}", color=color, marker=marker,
            )  # fmt: skip
            tk = np.array(s["slope_t"])
            figures.measured(slope_ax, tk[tk > 0], np.array(s["slope"], float)[tk > 0], None, None, color=color,
                             marker=marker)  # fmt: skip
    for ax in (risk_ax, slope_ax):
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # a decade and a half: no crowded labels
    xlabel = "samples seen, as t = 4nη/d"
    figures.finish(risk_ax, xlabel, "population risk", r"power-law data $\Sigma$, teacher $1.2\,\Sigma^{1/2}$",
                   log=True, fontsize=6)  # fmt: skip
    title = "local slope d log risk / d log t: still moving (not yet an exponent)"
    figures.finish(slope_ax, xlabel, "local slope", title, legend=False)
    return fig


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out/examples")
    parser.add_argument("--seeds", type=int, default=1)
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    results = run(args.seeds)
    table = write(out, results, args)
    print(
        f"{'a':>5s} {'theory':>8s} "
        + " ".join(f"{'SGD d=' + str(d):>9s}" for d in DIMENSIONS)
        + "   (slope on [T/2, T])"
    )
    for row in table:
        print(f"{row['a']:>5s} {row['theory']:8.3f} " + " ".join(f"{row[f'sgd_d{d}']:9.3f}" for d in DIMENSIONS))
        print(f"      theory: {row['settled']}")
    print(f"wrote {out / 'scaling_law.png'}, .svg, .pdf, .csv and .json")


if __name__ == "__main__":
    main()
