"""Which learning-rate schedule reaches the lowest risk at a fixed sample budget? (MATH.md §11)

`configs/schedules.toml`: tied linear attention, a rank-d/2 student and a full-rank teacher I (the risk
cannot fall below 1), online SGD at κ = ηd/B = 0.2. Three schedules over the same samples (nominal
t = 4nη/d ∈ [0, 2]): constant, cosine with a 10 % warm-up, and steps ×0.3 at 50 % and 80 % of the run.
For each: the theory (the stochastic matrix model of the matrix-model closure at n = 400, which carries
the finite-learning-rate term with κ(s) along the schedule) and online SGD at d = 200 (4 seeds), the
risk measured on fresh samples. The figure shows the excess risk over the floor on a log axis.

Writes ``OUT/schedules.png`` (and ``.svg``, ``.pdf``), ``OUT/schedules.csv`` (the risk curves) and
``OUT/schedules.json`` (final risks, SGD − theory, run times, provenance).
Run: ``python examples/schedules.py --out out/examples`` (about 1 min on 2 cores).
"""

import argparse
import pathlib

import numpy as np

from momentgen.core import figures
from momentgen.core.files import PAPER_FORMATS, write_csv
from momentgen.evidence.comparison import run_tasks, sgd_task, theory_task
from momentgen.setting.config import load_config

CONFIG = pathlib.Path(__file__).with_name("configs") / "schedules.toml"
FLOOR = 1.0  # the best rank-d/2 fit of the teacher I: 2·τ((S − I)²) with half the eigenvalues at 0
SCHEDULES = {
    "constant": {"schedule": "constant", "warmup": 0.0},
    "cosine, 10 % warm-up": {"schedule": "cosine", "warmup": 0.1},
    "steps ×0.3 at 50 %, 80 %": {"schedule": "step", "warmup": 0.0, "milestones": [0.5, 0.8], "factor": 0.3},
}


def configs(seeds):
    base = load_config(CONFIG)
    return {name: base.replace(sgd={**keys, "seeds": list(range(seeds))}) for name, keys in SCHEDULES.items()}


def run(seeds):
    """Per schedule: the theory's JSON and the SGD runs (one task per seed), all in parallel."""
    cases = configs(seeds)
    tasks = [(theory_task, (c.raw, c.source, None, None)) for c in cases.values()]
    tasks += [(sgd_task, (c.raw, c.source, c.settings.sgd.d, s)) for c in cases.values() for s in range(seeds)]
    results = run_tasks(tasks)
    out = {}
    for i, (name, config) in enumerate(cases.items()):
        runs = results[len(cases) + i * seeds : len(cases) + (i + 1) * seeds]
        risks = np.array([r["risk"] for r in runs])
        theory = results[i]
        out[name] = {
            "t": theory["t"],
            "theory": theory["derived"]["risk"],
            "integrated_t": theory["derived"]["integrated_t"] if "integrated_t" in theory["derived"] else theory["t"],
            "sgd": risks.mean(0).tolist(),
            "sgd_se": (risks.std(0, ddof=1) / np.sqrt(seeds)).tolist(),
            "status": theory["status"],
            "config_hash": config.digest,
            "seconds": {"theory": theory["seconds"], "sgd": sum(r["seconds"] for r in runs)},
        }
    return out


def summary(results):
    """Final risks and the excess over the floor, theory and SGD, per schedule."""
    rows = []
    for name, r in results.items():
        theory, sgd, se = r["theory"][-1], r["sgd"][-1], r["sgd_se"][-1]
        rows.append({
            "schedule": name, "final_risk_theory": theory, "final_risk_sgd": sgd, "sgd_se": se,
            "excess_theory": theory - FLOOR, "excess_sgd": sgd - FLOOR,
            "sup_sgd_minus_theory": float(np.max(np.abs(np.subtract(r["sgd"], r["theory"])))),
        })  # fmt: skip
    return rows


def write(out, results, rows, args):
    out.mkdir(parents=True, exist_ok=True)
    header = ["schedule", "t", "integrated_t", "risk_theory", "risk_sgd", "risk_sgd_se"]
    write_csv(
        out / "schedules.csv",
        header,
        [[name, *values] for name, r in results.items()
         for values in zip(r["t"], r["integrated_t"], r["theory"], r["sgd"], r["sgd_se"])],
    )  # fmt: skip
    data = {"floor": FLOOR, "summary": rows, "args": vars(args), "runs": results}
    figures.save(
        figure(data),
        out / "schedules.png",
        data,
        load_config(CONFIG),
        formats=PAPER_FORMATS,
        dpi=130,
        drawn_by="examples/schedules.py:figure",
    )


def figure(data):
    """The excess risk per schedule on a log axis (tests/core/test_figures.py redraws docs/figures/schedules.json)."""
    fig, (ax,) = figures.new_figure(1, width=6.4, height=4.2)
    for color, (name, r) in zip(("C0", "C1", "C2"), data["runs"].items()):
        t = np.array(r["t"])
        figures.theory(ax, t, np.array(r["theory"]) - data["floor"], f"{name}: theory", color=color)
        sgd = np.array(r["sgd"]) - data["floor"]
        figures.measured(ax, t, sgd, r["sgd_se"], f"{name}: online SGD, d = 200 (±1 SE)", color=color)
    xlabel = "samples seen, as t = 4nη/d (the same for every schedule)"
    title = "schedules at equal samples, κ = ηd/B = 0.2 at peak"
    return figures.finish(ax, xlabel, "excess population risk (risk − 1)", title, log=True, fontsize=7).figure


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out/examples")
    parser.add_argument("--seeds", type=int, default=4)
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    results = run(args.seeds)
    rows = summary(results)
    write(out, results, rows, args)
    header = ("risk theory", "risk SGD", "± SE", "excess th.", "sup|SGD-th|")
    print(f"{'schedule':26s} " + " ".join(f"{h:>11s}" for h in header))
    for row in rows:
        keys = ("final_risk_theory", "final_risk_sgd", "sgd_se", "excess_theory", "sup_sgd_minus_theory")
        print(f"{row['schedule']:26s} " + " ".join(f"{row[k]:11.4f}" for k in keys))
    print(f"wrote {out / 'schedules.png'}, .svg, .pdf, .csv and .json")


if __name__ == "__main__":
    main()
