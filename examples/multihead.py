"""Two-head attention: a two-head student learns a two-head teacher (K = 4), theory vs SGD.

Tied S_k = W_k W_kᵀ, L = 2 tokens, `multihead-softmax-mse` (each head its own row softmax, a
model's attention the sum of its heads'), student heads 1, 2 (trainable, scale 0.7), teacher
heads 3, 4 (momentgen/examples/configs/multihead_softmax.toml). The quadrature closure (order
n = 2, d = ∞, with its error estimate) against online SGD (default d = 200, η = 0.01, B = 256,
2 seeds) over t ∈ [0, 1]; observables: the student–teacher overlaps μ(S1 S3), μ(S2 S4),
μ(S1 S4), the student's μ(S1 S1) and the two student heads' overlap μ(S1 S2).

Writes ``OUT/multihead.png`` (and ``.svg``, ``.pdf``), ``OUT/multihead.csv`` and ``OUT/multihead.json``
(sup |theory − SGD| per observable, the closure's estimate, provenance). Run:
``python examples/multihead.py --out out/examples`` (about 5 min on 2 cores, most of it the
closure: Φ of four softmax heads costs ~30 ms an evaluation).
"""

import argparse
import pathlib

import numpy as np

import momentgen as mg
from momentgen.core import figures
from momentgen.core.files import PAPER_FORMATS, write_series_csv

WORDS = ("S1 S3", "S2 S4", "S1 S4", "S1 S1", "S1 S2")
SAME = 1e-6  # two theory curves closer than this (the integration tolerance is 1e-9 relative) are one curve


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out/examples")
    parser.add_argument("--d", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    config = mg.load_config("multihead_softmax")
    theory = mg.solve(config)
    sgd = mg.simulate(config, d=args.d, seeds=range(args.seeds), progress=False)
    errors = {w: float(np.max(np.abs(theory.series[w] - sgd.series[w]))) for w in WORDS}
    out.mkdir(parents=True, exist_ok=True)
    series = {f"theory {w}": theory.series[w] for w in WORDS} | {f"sgd {w}": sgd.series[w] for w in WORDS}
    write_series_csv(out / "multihead.csv", theory.t, series)
    data = {
        "time_scale": theory.time_scale,
        "t": theory.t,
        "theory": {w: theory.series[w] for w in WORDS},
        "estimate": theory.error_series["estimate"],
        "sgd": {w: sgd.series[w] for w in WORDS},
        "sup_theory_minus_sgd": errors,
        "closure": {"status": theory.status, "error_estimate": theory.error_estimate, "message": theory.message},
        "sgd_run": {"d": args.d, "seeds": args.seeds, "seconds": sgd.extra["seconds"]},
    }
    figures.save(
        figure(data),
        out / "multihead.png",
        data,
        config,
        formats=PAPER_FORMATS,
        drawn_by="examples/multihead.py:figure",
    )
    for w, e in errors.items():
        print(f"μ({w}): sup |quadrature − SGD d={args.d}| = {e:.3g}")
    print(f"closure: {theory.status}, estimate {theory.error_estimate:.2g}; wrote {out / 'multihead.png'}")


def figure(data):
    """Overlaps of the heads: theory (with the closure's error band) over SGD; curves equal by the heads'
    symmetry are drawn once, and say so (tests/core/test_figures.py redraws docs/figures/multihead.json)."""
    fig, (left, right) = figures.new_figure(2, width=4.8, height=3.8)
    t, estimate = np.asarray(data["t"]), np.array([np.nan if e is None else e for e in data["estimate"]], float)
    for ax, words in ((left, WORDS[:3]), (right, WORDS[3:])):
        drawn = []
        for w in words:
            y = np.asarray(data["theory"][w])
            twin = next((v for v in drawn if np.max(np.abs(np.asarray(data["theory"][v]) - y)) < SAME), None)
            color = f"C{len(drawn)}"
            if twin is None:
                figures.theory(ax, t, y, f"μ({w}), quadrature closure n = 2", color=color)
                band = estimate * np.maximum(1.0, np.abs(y))
                ax.fill_between(t, y - band, y + band, color=color, alpha=0.2, lw=0, zorder=1,
                                label=f"μ({w}): the closure's error estimate")  # fmt: skip
                drawn.append(w)
            else:
                color = f"C{drawn.index(twin)}"
                ax.plot([], [], " ", label=f"μ({w}) = μ({twin}) at d = ∞ (the heads are exchangeable)")
            figures.measured(ax, t, data["sgd"][w], None, f"μ({w}), online SGD, d = {data['sgd_run']['d']}",
                             marker="os^"[words.index(w)], color=color)  # fmt: skip
        title = "student–teacher head overlaps" if ax is left else "student heads"
        figures.finish(ax, figures.time_label(data["time_scale"]), "normalised trace moment", title, fontsize=7)
    estimate = data["closure"]["error_estimate"]
    fig.suptitle(f"two-head student vs two-head teacher (L = 2, K = 4): the closure's estimate ≤ {estimate:.2g}",
                 fontsize=9)  # fmt: skip
    return fig


if __name__ == "__main__":
    main()
