"""Where is the noise floor, and which schedule removes it fastest? (MATH.md §11, §13, §14)

Label noise (``[loss] noise = σ``) gives online SGD at a finite learning rate a floor: its excess risk (the risk less
what a perfect student pays, σ² per output) stops falling at O(κσ²). Three questions, each answered by the theory
with the finite-learning-rate term (the stochastic matrix model of the matrix-model closure) and by online SGD at
d = 200 (several seeds, the risk measured on fresh samples):

1. `configs/noise_floors.toml` — tied softmax attention, L = 2, σ = 0.3 on each attention entry, peak κ = ηd/B = 0.2:
   constant vs cosine vs warm-up/stable/decay (WSD) vs power (1 − v)² at an equal number of samples (nominal
   t = 4nη_eff/d ∈ [0, 10]), plain SGD and heavy ball β = 0.9 at the same κ_eff = ηd/((1 − β)B), the theory an
   ensemble of 8 stochastic matrix models of n = 100 (`THEORY_DRAWS`), one run for both β (`theory_key`);
2. a power-law Σ (the shipped `scaling_law` case, a = 1) with σ = 0.5 at peak κ = 0.05 (at 0.2 its largest
   directions are at the stability edge): constant vs WSD, the theory an ensemble of 8 stochastic matrix models of
   n = 128 (one draw's risk wanders by a few per cent at the floor: its own noise, which SGD's seeds average away);
3. the floor's dependence on κ and σ on MATH.md §13's solvable case (tied, L = 1, mse(h1), teacher I), against the
   closed form Φ₀(∞) = 4κσ²/(1 − 4κ) (the theory 8 noise draws of n = 100).

Writes ``OUT/noise_floors.png`` (and ``.svg``, ``.pdf``), ``OUT/noise_floors.csv`` (every excess-risk curve),
``OUT/noise_floors_table.csv`` (final excess risks with standard errors — SGD's over seeds, an ensemble's over its
draws; the floors) and ``OUT/noise_floors.json``
(all numbers, run times, provenance). Run: ``python examples/noise_floors.py --out out/examples`` (about 9 min on
2 cores; ``--quick`` for a 3-minute smoke run at smaller sizes).
"""

import argparse
import json
import pathlib

import numpy as np

from momentgen.core import figures
from momentgen.core.files import PAPER_FORMATS, write_csv
from momentgen.evidence.comparison import run_tasks, sgd_task, theory_task
from momentgen.setting.config import load_config
from momentgen.setting.schedules import lr_for_kappa

CONFIG = pathlib.Path(__file__).with_name("configs") / "noise_floors.toml"
SCHEDULES = {
    "constant": {"schedule": "constant", "warmup": 0.0},
    "cosine": {"schedule": "cosine", "warmup": 0.1},
    "WSD": {"schedule": "wsd", "warmup": 0.1, "decay": 0.2},
    "power (1 − v)²": {"schedule": "power", "warmup": 0.1, "exponent": 2.0},
}
MOMENTA = (0.0, 0.9)
#: Draws of the stochastic matrix model behind each softmax and floor curve (each its own noise; a Gaussian student's
#: its own Haar draw): their standard error is the theory's, which one draw does not measure.
THEORY_DRAWS = 8
SIGMA_CASE = {"kappa": 0.05, "noise": 0.5, "schedules": ("constant", "WSD"), "size": 128, "draws": 8}
FLOOR_KAPPAS, FLOOR_SIGMAS = (0.025, 0.05, 0.1), (0.5, 1.0)


def with_kappa(config, kappa, momentum, keys, seeds):
    """``config`` at peak κ_eff = ``kappa`` with heavy ball ``momentum`` and the schedule ``keys``."""
    sgd = config.settings.sgd
    lr = lr_for_kappa(kappa, sgd.d, sgd.batch, momentum)
    return config.replace(sgd={**keys, "lr": lr, "momentum": momentum, "seeds": list(range(seeds))})


def cases(seeds, quick):
    """{(group, label): Config} of the three questions."""
    draws = {"draws": 4 if quick else THEORY_DRAWS}
    size = (
        {"truncation": {"size": 50, **draws}, "integrate": {"T": 4.0, "points": 9}} if quick else {"truncation": draws}
    )
    softmax = load_config(CONFIG, **size)
    out = {}
    for beta in MOMENTA:
        for name, keys in SCHEDULES.items():
            out[(f"softmax, β = {beta:g}", name)] = with_kappa(softmax, 0.2, beta, keys, seeds)
    sigma = load_config(
        "scaling_law",
        loss={"noise": SIGMA_CASE["noise"]},
        truncation={
            "closure": "matrix-model",
            "size": 32 if quick else SIGMA_CASE["size"],
            "draws": 4 if quick else SIGMA_CASE["draws"],
        },
        integrate={"T": 4.0 if quick else 10.0, "points": 9 if quick else 21, "finite_lr": True},
        sgd={"d": 200, "batch": 64},
    )
    for name in SIGMA_CASE["schedules"]:
        out[("power-law Σ, β = 0", name)] = with_kappa(sigma, SIGMA_CASE["kappa"], 0.0, SCHEDULES[name], seeds)
    for kappa in FLOOR_KAPPAS:
        for noise in FLOOR_SIGMAS:
            out[("floor", f"κ = {kappa:g}, σ = {noise:g}")] = floor_config(kappa, noise, seeds, quick)
    return out


def floor_config(kappa, noise, seeds, quick):
    """MATH.md §13's case, the student started at the teacher: the excess risk builds up to the floor from 0."""
    raw = {
        "model": {"kind": "tied", "L": 1, "K": 2, "trainable": [1]},
        "loss": {"builtin": "mse", "activation": "h1", "noise": noise},
        "init": {"1": {"kind": "identity", "c": 1.0}, "2": {"kind": "identity", "c": 1.0}},
        "truncation": {
            "degree": 5,
            "closure": "matrix-model",
            "size": 50 if quick else 100,
            "draws": 4 if quick else THEORY_DRAWS,
        },
        "integrate": {"T": 3.0, "points": 31, "finite_lr": True},
        "sgd": {"d": 200, "lr": lr_for_kappa(kappa, 200, 100), "batch": 100, "seeds": list(range(seeds))},
    }
    return load_config(raw)


def closed_form_floor(kappa, noise, c=1.0):
    """MATH.md §13: the excess risk's floor at first order in κ, resummed: 4κcσ²/(1 − 4κc)."""
    return 4 * kappa * c * noise**2 / (1 - 4 * kappa * c)


def theory_key(config):
    """What the theory of a case reads: everything but the SGD run's raw step and momentum, which it sees only
    through κ_eff (MATH.md §14: heavy ball at κ_eff is plain SGD at κ_eff) — the softmax cases with and without
    momentum share one theory run."""
    sgd = {k: v for k, v in config.raw.get("sgd", {}).items() if k not in ("lr", "momentum")}
    return json.dumps({**config.raw, "sgd": sgd}, sort_keys=True, default=repr), round(config.sgd_kappa(), 12)


def run(seeds, quick):
    """Per case: the theory's excess risk (one run per `theory_key`) and the SGD runs' (one task per seed), all in
    parallel."""
    configs = cases(seeds, quick)
    theories = {theory_key(c): c for c in configs.values()}
    tasks = [(theory_task, (c.raw, c.source, None, None)) for c in theories.values()]
    tasks += [(sgd_task, (c.raw, c.source, c.settings.sgd.d, s)) for c in configs.values() for s in range(seeds)]
    results = run_tasks(tasks)
    theory_of = dict(zip(theories, results))
    out = {}
    for i, ((group, label), config) in enumerate(configs.items()):
        theory = theory_of[theory_key(config)]
        runs = results[len(theories) + i * seeds : len(theories) + (i + 1) * seeds]
        excess = np.array([r["excess_risk"] for r in runs])
        out[f"{group} | {label}"] = {
            "group": group,
            "case": label,
            "t": theory["t"],
            "theory": theory["derived"]["excess_risk"],
            "theory_se": theory_standard_error(theory),
            "theory_status": theory["status"],
            "theory_message": theory["message"],
            "sgd": excess.mean(0).tolist(),
            "sgd_se": (excess.std(0, ddof=1) / np.sqrt(seeds)).tolist(),
            "kappa_eff": config.sgd_kappa(),
            "momentum": config.settings.sgd.momentum,
            "noise": config.settings.loss.noise,
            "config_hash": config.digest,
            "seconds": {"theory": theory["seconds"], "sgd": sum(r["seconds"] for r in runs)},
        }
    return out


def theory_standard_error(theory):
    """An ensemble's standard error of the risk over its draws (`Result.error_series`), so of the excess risk; None
    for one draw, whose own noise is not measured."""
    return theory["error_series"].get("risk_standard_error")


def final_rows(results):
    """The final excess risk per case (theory ± an ensemble's SE over draws; SGD ± its SE over seeds), the floor
    cases as the late-time mean; their gap in standard errors of the two together (SGD's alone for one draw)."""
    rows = []
    for r in results.values():
        late = slice(len(r["t"]) // 2, None) if r["group"] == "floor" else slice(-1, None)
        theory, sgd = float(np.mean(r["theory"][late])), float(np.mean(r["sgd"][late]))
        se = float(np.mean(r["sgd_se"][late]))
        theory_se = None if r["theory_se"] is None else float(np.mean(r["theory_se"][late]))
        both = float(np.hypot(se, theory_se or 0.0))
        gap = (sgd - theory) / both if both > 0 else float("nan")
        row = {"group": r["group"], "case": r["case"], "excess_theory": theory, "theory_se": theory_se,
               "excess_sgd": sgd, "sgd_se": se, "sgd_minus_theory_in_se": gap,
               "theory_status": r["theory_status"]}  # fmt: skip
        if r["group"] == "floor":
            row["closed_form"] = closed_form_floor(r["kappa_eff"], r["noise"])
        rows.append(row)
    return rows


def write(out, results, rows, args):
    out.mkdir(parents=True, exist_ok=True)
    write_csv(
        out / "noise_floors.csv",
        ["group", "case", "t", "excess_theory", "excess_theory_se", "excess_sgd", "excess_sgd_se"],
        [
            [r["group"], r["case"], *v]
            for r in results.values()
            for v in zip(r["t"], r["theory"], r["theory_se"] or [""] * len(r["t"]), r["sgd"], r["sgd_se"])
        ],
    )
    columns = ["group", "case", "excess_theory", "theory_se", "excess_sgd", "sgd_se", "sgd_minus_theory_in_se",
               "closed_form"]  # fmt: skip
    write_csv(
        out / "noise_floors_table.csv",
        columns,
        [["" if row.get(c) is None else row[c] for c in columns] for row in rows],
    )
    data = {"summary": rows, "args": vars(args), "runs": results}
    figures.save(
        figure(data),
        out / "noise_floors.png",
        data,
        load_config(CONFIG),
        formats=PAPER_FORMATS,
        dpi=130,
        drawn_by="examples/noise_floors.py:figure",
    )


def figure(data):
    """Excess risk on log axes: the softmax case without and with momentum, the power-law Σ case, and the floor
    against κ per σ (tests/core/test_figures.py redraws docs/figures/noise_floors.json)."""
    fig, axes = figures.new_figure(2, 2, width=4.8, height=3.6)
    groups = ["softmax, β = 0", "softmax, β = 0.9", "power-law Σ, β = 0"]
    for ax, group in zip(axes.flat, groups):
        runs = [r for r in data["runs"].values() if r["group"] == group]
        for color, r in zip(("C0", "C1", "C2", "C3"), runs):
            figures.theory(ax, r["t"], r["theory"], f"{r['case']}: theory", color=color)
            figures.measured(ax, r["t"], r["sgd"], r["sgd_se"], f"{r['case']}: SGD (±1 SE)", color=color)
        kappa = runs[0]["kappa_eff"] if runs else 0.0
        figures.finish(ax, "samples, as t = 4nη_eff/d", "excess risk", f"{group}, peak κ_eff = {kappa:.2g}", log=True,
                       fontsize=6)  # fmt: skip
    floor_panel(axes[1][1], [row for row in data["summary"] if row["group"] == "floor"])
    return fig


def floor_panel(ax, rows):
    """The floor against κ: the closed form per σ (lines), the theory and SGD (markers)."""
    kappa = np.linspace(0.02, 0.11, 50)
    for color, noise in zip(("C0", "C1"), FLOOR_SIGMAS):
        figures.exact(ax, kappa, closed_form_floor(kappa, noise), f"closed form, σ = {noise:g}", color=color)
        mine = [row for row in rows if row["case"].endswith(f"σ = {noise:g}")]
        ks = [float(row["case"].split("=")[1].split(",")[0]) for row in mine]
        ax.plot(ks, [row["excess_theory"] for row in mine], "x", color=color, label=f"theory, σ = {noise:g}")
        figures.measured(ax, ks, [row["excess_sgd"] for row in mine], [row["sgd_se"] for row in mine],
                         f"SGD d = 200, σ = {noise:g}", color=color)  # fmt: skip
    ax.set_xscale("log")
    figures.finish(ax, "κ = ηd/B", "floor of the excess risk", "the floor (MATH.md §13)", log=True, fontsize=6)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out/examples")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="smaller sizes and horizons: a smoke run")
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    results = run(args.seeds, args.quick)
    rows = final_rows(results)
    write(out, results, rows, args)
    print(f"{'group':22s} {'case':22s} {'theory':>9s} {'± SE':>8s} {'SGD':>9s} {'± SE':>8s} {'(SGD-th)/SE':>11s} "
          f"{'closed':>8s}")  # fmt: skip
    for row in rows:
        closed = f"{row['closed_form']:8.4f}" if "closed_form" in row else " " * 8
        gap, theory_se = row["sgd_minus_theory_in_se"], row["theory_se"]
        theory_se = "one draw" if theory_se is None else f"{theory_se:8.4f}"
        print(f"{row['group']:22s} {row['case']:22s} {row['excess_theory']:9.4f} {theory_se:>8s} "
              f"{row['excess_sgd']:9.4f} {row['sgd_se']:8.4f} {gap:11.1f} {closed}")  # fmt: skip
    print(f"wrote {out / 'noise_floors.png'}, .svg, .pdf, .csv, _table.csv and .json")


if __name__ == "__main__":
    main()
