"""Weak recovery of tied attention in Θ(d² log d) samples (the paper's claim), measured.

Tied, L = 1, linear activation (h1), Gaussian student (entries N(0, 1/d)) and an
independent Gaussian teacher: Γ12 = −2 ≠ 0 at initialisation. Online SGD with one sample a
step (B = 1) and η = c0/(d ln d). N_wr(c) is the first step at which the centred overlap
|p12| = |q12 − t1 t2| reaches c; if the claim holds, N_wr/(d² ln d) does not depend on d.

Writes ``OUT/weak_recovery.png`` and ``OUT/weak_recovery.json`` (every run's N_wr, the
means, and the fitted exponent of d in N_wr/(d² ln d)).
Run: ``python examples/weak_recovery.py --out out/examples`` (about 7 minutes on 2 cores).
"""

import argparse
import pathlib

import numpy as np

from momentgen.compiler.hierarchy import Model
from momentgen.compiler.initial import InitSpec
from momentgen.core import figures
from momentgen.core.files import PAPER_FORMATS
from momentgen.reference import sgd
from momentgen.setting.losses import builtin

MODEL = Model("tied", 2, [1])
LOSS = builtin("mse", L=1, K=2, activation="h1")
INITS = {1: InitSpec(scale=1.0), 2: InitSpec(scale=1.0)}


def first_passage(d, seed, c0, threshold, t_max, points=400):
    """First SGD step with |p12| ≥ threshold (interpolated between measurements), or None."""
    lr = c0 / (d * np.log(d))
    times = np.linspace(0.0, t_max, points)
    run = sgd(
        MODEL, LOSS, INITS, d=d, lr=lr, batch=1, times=times, words=["S1 S2", "S1", "S2"], seed=seed, progress=False
    )
    p12 = np.abs(run.series["S1 S2"] - run.series["S1"] * run.series["S2"])
    above = np.flatnonzero(p12 >= threshold)
    if not above.size:
        return None
    i = above[0]
    if i == 0:
        return 0.0
    frac = (threshold - p12[i - 1]) / (p12[i] - p12[i - 1])
    return float(run.steps[i - 1] + frac * (run.steps[i] - run.steps[i - 1]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out/examples")
    parser.add_argument("--c0", type=float, default=0.5, help="η = c0 / (d ln d)")
    parser.add_argument("--threshold", type=float, default=0.1, help="c in N_wr(c)")
    parser.add_argument("--seeds", type=int, default=4)
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dims = [50, 100, 200, 400]
    runs = {
        d: [first_passage(d, seed, args.c0, args.threshold, t_max=0.15) for seed in range(args.seeds)] for d in dims
    }
    scaled = {d: [n / (d**2 * np.log(d)) for n in runs[d] if n is not None] for d in dims}
    mean = [float(np.mean(scaled[d])) for d in dims]
    exponent = float(np.polyfit(np.log(dims), np.log(mean), 1)[0])
    data = {
        "c0": args.c0,
        "threshold": args.threshold,
        "dims": dims,
        "N_wr": {str(d): runs[d] for d in dims},
        "N_wr_over_d2_log_d": {str(d): scaled[d] for d in dims},
        "mean_scaled": mean,
        "fitted_exponent_of_d": exponent,
    }
    figures.save(
        figure(data),
        out / "weak_recovery.png",
        data,
        None,
        formats=PAPER_FORMATS,
        drawn_by="examples/weak_recovery.py:figure",
    )
    for d in dims:
        print(
            f"d={d:4d}: N_wr = {[round(n) if n is not None else None for n in runs[d]]}, "
            f"N_wr/(d² ln d) = {np.mean(scaled[d]):.4f}"
        )
    print(
        f"fitted exponent of d in N_wr/(d² ln d): {exponent:+.3f} (0 if N_wr = Θ(d² ln d)); wrote {out}/weak_recovery.*"
    )


def figure(data):
    """N_wr/(d² ln d) per seed and its mean against d, with the fitted power of d (tests/core/test_figures.py
    redraws docs/figures/weak_recovery.json)."""
    fig, (ax,) = figures.new_figure(1, width=5.2, height=3.8)
    dims, scaled, mean = data["dims"], data["N_wr_over_d2_log_d"], data["mean_scaled"]
    for i, d in enumerate(dims):
        label = "one seed" if i == 0 else None
        figures.measured(ax, [d] * len(scaled[str(d)]), scaled[str(d)], None, label, color="C0")
    error = [float(np.std(v, ddof=1) / np.sqrt(len(v))) if len(v) > 1 else 0.0 for v in (scaled[str(d)] for d in dims)]
    figures.measured(ax, dims, mean, error, "mean ± standard error over seeds", marker="s", color="k")
    fit = np.exp(np.polyval(np.polyfit(np.log(dims), np.log(mean), 1), np.log(dims)))
    exponent = data["fitted_exponent_of_d"]
    ax.plot(dims, fit, "k--", zorder=figures.THEORY_Z, label=f"fit ∝ $d^{{{exponent:+.2f}}}$ (0: N_wr = Θ(d² ln d))")
    ax.set_xscale("log")
    ax.set_xticks(dims, [str(d) for d in dims])
    ax.set_xticks([], minor=True)
    title = f"tied h1, η = {data['c0']}/(d ln d), B = 1, |p12| ≥ {data['threshold']}"
    return figures.finish(ax, "dimension d", "N_wr / (d² ln d)", title).figure


if __name__ == "__main__":
    main()
