"""The finite-learning-rate term against online SGD over whole learning curves (docs/FINITE_LR.md).

The paper's hierarchy is the ηd/B → 0 limit; SGD at κ = ηd/B > 0 drifts away from it by an Itô
bias ∝ κ. For fig. 4's exactly solvable case (tied, L = 1, linear; t ∈ [0, 0.5]) and fig. 1
(tied, L = 2, softmax-mse; t ∈ [0, 1]), at κ ∈ {0.1, 0.3} (d = 300, B = 64, η = κB/d), per seed from
the same initial matrices: online SGD, the paper's hierarchy at this d (the matrix flow, κ = 0;
no closure) and the corrected one (the stochastic matrix model of the matrix-model closure, which
carries the term over the whole curve, at the run's own κ), each averaged over seeds.

Writes ``OUT/finite_lr.png`` (and ``.svg``, ``.pdf``), ``OUT/finite_lr.csv`` (the curves),
``OUT/finite_lr.json`` (sup-errors per observable, run times, provenance).
Run: ``python examples/finite_lr.py --out out/examples`` (about 20 min on 2 cores, most of it fig. 1's
stochastic matrix model, whose softmax noise moments cost ~50 ms an evaluation; ``--quick``:
fig. 4 only, 2 seeds).
"""

import argparse
import pathlib

import numpy as np

from momentgen.core import figures
from momentgen.core.files import PAPER_FORMATS, write_csv
from momentgen.evidence.comparison import run_tasks, sgd_task, theory_task
from momentgen.setting.config import load_config

CONFIGS = pathlib.Path(__file__).with_name("configs")
CASES = {  # config, horizon, the observable drawn
    "fig4_linear": (0.5, "S1 S1"),
    "fig1_tied_softmax": (1.0, "S1 S1"),
}
KAPPAS = (0.1, 0.3)


def case_config(name, kappa, d, batch, seeds):
    """The case's config with SGD at κ = lr·d/batch and the finite-learning-rate term on."""
    T, _ = CASES[name]
    config = load_config(CONFIGS / f"{name}.toml")
    return config.replace(
        integrate={"T": T, "points": 41, "finite_lr": True},
        sgd={"d": d, "lr": kappa * batch / d, "batch": batch, "seeds": list(seeds)},
    )


def run_case(name, kappa, d, batch, seeds):
    """Per seed: SGD, the matrix flow of its own initial matrices (the paper's hierarchy at this d) and
    the stochastic matrix model of the same matrices (the term); means over seeds and sup-errors."""
    config = case_config(name, kappa, d, batch, seeds)
    raw, source = config.raw, config.source
    tasks = [(sgd_task, (raw, source, d, s)) for s in seeds]
    tasks += [(theory_task, (raw, source, "matrix-model", None, d, s, k)) for s in seeds for k in (0.0, kappa)]
    results = run_tasks(tasks)
    runs, theories = results[: len(seeds)], results[len(seeds) :]
    words = [w for w in runs[0]["series"] if w in theories[0]["series"] and np.ptp(runs[0]["series"][w]) > 0]
    stack = {
        label: {w: np.array([r["series"][w] for r in group]) for w in words}
        for label, group in (("sgd", runs), ("paper", theories[0::2]), ("corrected", theories[1::2]))
    }
    mean = {label: {w: v.mean(0) for w, v in series.items()} for label, series in stack.items()}
    se = {w: stack["sgd"][w].std(0, ddof=1) / np.sqrt(len(seeds)) for w in words}
    errors = {
        w: {
            "sup_sgd_minus_paper": float(np.abs(mean["sgd"][w] - mean["paper"][w]).max()),
            "sup_sgd_minus_corrected": float(np.abs(mean["sgd"][w] - mean["corrected"][w]).max()),
            "sup_sgd_standard_error": float(se[w].max()),
        }
        for w in words
    }
    return {
        "t": runs[0]["t"],
        **{label: {w: v.tolist() for w, v in series.items()} for label, series in mean.items()},
        "sgd_se": {w: v.tolist() for w, v in se.items()},
        "errors": errors,
        "kappa": kappa,
        "lr": config.settings.sgd.lr,
        "config_hash": config.digest,
        "seconds": {"sgd": sum(r["seconds"] for r in runs), "theory": sum(r["seconds"] for r in theories)},
    }


def write(out, results, args):
    out.mkdir(parents=True, exist_ok=True)
    rows = [
        [name, kappa, w, t, r["sgd"][w][i], r["sgd_se"][w][i], r["paper"][w][i], r["corrected"][w][i]]
        for (name, kappa), r in results.items()
        for w in r["sgd"]
        for i, t in enumerate(r["t"])
    ]
    header = ["case", "kappa", "observable", "t", "sgd_mean", "sgd_se", "paper_kappa0", "corrected"]
    write_csv(out / "finite_lr.csv", header, rows)
    data = {
        "args": vars(args),
        "time_scale": "t = 4 n eta / d (tied)",
        "cases": {f"{name} kappa={kappa}": {"name": name, **r} for (name, kappa), r in results.items()},
    }
    figures.save(
        figure(data), out / "finite_lr.png", data, None, formats=PAPER_FORMATS, drawn_by="examples/finite_lr.py:figure"
    )


def figure(data):
    """One panel per case and κ: SGD (±2 SE) under the paper's hierarchy and the corrected one
    (tests/core/test_figures.py redraws docs/figures/finite_lr.json)."""
    cases = list(data["cases"].values())
    names = sorted({c["name"] for c in cases}, key=list(CASES).index)
    fig, axes = figures.new_figure(len(KAPPAS), len(names), width=4.6, height=3.7)
    axes = np.atleast_2d(axes)
    args = data["args"]
    for row, name in zip(axes, names):
        w = CASES[name][1]
        for ax, kappa in zip(row, KAPPAS):
            r = next(c for c in cases if c["name"] == name and c["kappa"] == kappa)
            t, mean, se = np.array(r["t"]), np.array(r["sgd"][w]), np.array(r["sgd_se"][w])
            figures.measured(ax, t, mean, 2 * se, f"online SGD, d = {args['d']}, B = {args['batch']} (±2 SE)")
            figures.theory(ax, t, r["paper"][w], "the paper's hierarchy (κ = 0)", color="C3", ls="--")
            figures.theory(ax, t, r["corrected"][w], f"with the finite-learning-rate term (κ = {kappa})", color="k")
            title = f"{name}: κ = ηd/B = {kappa}"
            figures.finish(ax, "t = 4nη/d", f"μ({w})", title, fontsize=7)
    return fig


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out/examples")
    parser.add_argument("--d", type=int, default=300)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="fig. 4 only, 2 seeds")
    args = parser.parse_args()
    if args.quick:
        args.seeds = 2
    out = pathlib.Path(args.out)
    names = ["fig4_linear"] if args.quick else list(CASES)
    results = {}
    for name in names:
        for kappa in KAPPAS:
            results[(name, kappa)] = run_case(name, kappa, args.d, args.batch, range(args.seeds))
    write(out, results, args)
    print(f"{'case':18s} {'kappa':>5s} {'observable':>10s} {'SGD-paper':>10s} {'SGD-term':>10s} {'SGD SE':>8s}")
    for (name, kappa), r in results.items():
        for w, e in r["errors"].items():
            print(
                f"{name:18s} {kappa:5.2f} {w:>10s} {e['sup_sgd_minus_paper']:10.4f} "
                f"{e['sup_sgd_minus_corrected']:10.4f} {e['sup_sgd_standard_error']:8.4f}"
            )
    print(f"wrote {out / 'finite_lr.png'}, .svg, .csv and .json")


if __name__ == "__main__":
    main()
