"""Fig. 2: the parameterisation decides weak recovery — tied W-flow vs direct S-flow.

Left: tied, h1 / h2 / h3, small student (N(0, 0.05/d)) and teacher N(0, 0.5/d)
(`examples/configs/fig2_tied_h2.toml` with the activation set): the centred overlap
p12 = q12 − t1 t2 leaves 0 on the O(1) time scale t = 4nη/d — the exact d = ∞ curve
(Riccati equation + free subordination, `momentgen.evidence.oracles.riccati_tied_moments`), the
quadrature closure (n = 6) and the zero closure (M = 10, drawn solid only inside its
validity window) against online SGD; for h2 also the matrix-model closure (n = 200).
Right: direct S, h2 (`examples/configs/fig2_direct_h2.toml`): Σ12 = 0 is invariant at d = ∞
but a saddle; at finite d the O(1/d) initial overlap escapes at τ ≈ ln(d)/rate. The closed
system of Theorem 4 started from the empirical moments of d × d Gaussian matrices gives the
escape time for d = 100…800 (exact for those matrices), next to one SGD run.

Writes ``OUT/fig2_parameterisation.png`` and ``.json``. Run:
``python examples/fig2_parameterisation.py --out out/examples [--d 400]`` (the paper's d = 400:
about 30 minutes on two cores; d = 100: a few minutes).
"""

import argparse
import pathlib

import numpy as np

from momentgen.compiler.hierarchy import build
from momentgen.compiler.initial import empirical_moments
from momentgen.compiler.potential import Potential
from momentgen.compiler.truncation import Truncation
from momentgen.core import figures
from momentgen.core.files import PAPER_FORMATS
from momentgen.dynamics.closures import solve_with_closure
from momentgen.dynamics.integrate import solve
from momentgen.evidence.comparison import run_tasks, sgd_task
from momentgen.evidence.oracles import riccati_tied_moments
from momentgen.reference import initial_factors
from momentgen.setting.config import load_config

CONFIGS = pathlib.Path(__file__).with_name("configs")
THRESHOLD = 0.1


def tied_config(activation, T=2.5):
    config = load_config(CONFIGS / "fig2_tied_h2.toml")
    config = config.replace(loss={"activation": activation})
    config = config.replace(integrate=dict(T=T, points=51))
    return config


def direct_config(T=1.0):
    config = load_config(CONFIGS / "fig2_direct_h2.toml")
    config = config.replace(integrate=dict(T=T, points=41))
    return config


def sgd_runs(d, activations):
    """The SGD runs of both panels (seed 0), two at a time: {activation or "direct": run}."""
    configs = {a: tied_config(a) for a in activations} | {"direct": direct_config()}
    runs = run_tasks([(sgd_task, (c.raw, c.source, d, 0)) for c in configs.values()], n_jobs=2)
    return dict(zip(configs, runs))


def tied_panel(d, sgd_by_activation):
    panels = {}
    for activation, sgd in sgd_by_activation.items():
        config = tied_config(activation)
        t = np.linspace(0, config.settings.integrate.T, 51)
        inits = config.inits()
        exact = riccati_tied_moments(Potential(config.loss(), "tied"), inits[1], inits[2], t)
        exact_p12 = exact["S1 S2"] - exact["S1"] * inits[2].width_ratio * inits[2].scale ** 2
        zero = solve_with_closure(config, "zero")
        quadrature = solve_with_closure(config, "quadrature", degree=13)
        p12 = np.array(sgd["series"]["S1 S2"]) - np.array(sgd["series"]["S1"]) * np.array(sgd["series"]["S2"])
        panels[activation] = {
            "t": t.tolist(),
            "exact_p12": exact_p12.tolist(),
            "zero_t": zero.t,
            "zero_p12": zero.derived["p12"],
            "zero_valid_until": zero.valid_until,
            "zero_status": zero.status,
            "quadrature_p12": quadrature.derived["p12"],
            "quadrature_estimate": quadrature.error_estimate,
            "quadrature_error": float(np.abs(np.array(quadrature.derived["p12"]) - exact_p12).max()),
            "sgd_t": sgd["t"],
            "sgd_p12": p12.tolist(),
            "sgd_minus_exact": float(np.abs(p12 - exact_p12).max()),
            "sgd": {"d": d, "lr": sgd["lr"], "batch": sgd["batch"], "seconds": sgd["seconds"]},
        }
        if activation == "h2":
            matrix = solve_with_closure(config, "matrix-model", size=200)
            panels[activation].update(matrix_p12=matrix.derived["p12"], matrix_error_estimate=matrix.error_estimate)
    return panels


def direct_escape(config, d, seed, T=3.0):
    """Escape time of |Ω12 − t1 t2| past THRESHOLD, closed system from the d × d matrices that
    the SGD run with this seed starts from."""
    model = config.model
    program = build(model, 2, "all")
    y0 = empirical_moments(model, initial_factors(model, config.inits(), d, seed), program.word_codes)
    truncation = Truncation(program, Potential(config.loss(), "direct"))
    result = solve(truncation, y0, T, 601, "DOP853", rtol=1e-10, atol=1e-12)
    overlap = result.series("S1 S2^T") - result.series("S1") * result.series("S2")
    above = np.flatnonzero(np.abs(overlap) > THRESHOLD)
    return (float(result.t[above[0]]) if above.size else float("inf")), result.t.tolist(), overlap.tolist()


def direct_panel(d, sgd, dims=(100, 200, 400, 800), seeds=(0, 1, 2)):
    config = direct_config()
    escapes = {dim: [direct_escape(config, dim, seed)[0] for seed in seeds] for dim in dims}
    mean = [float(np.mean(escapes[dim])) for dim in dims]
    slope, intercept = np.polyfit(np.log(dims), mean, 1)
    _, t_theory, overlap = direct_escape(config, d, 0)
    s = {w: np.array(v) for w, v in sgd["series"].items()}
    sgd_overlap = s["S1 S2^T"] - s["S1"] * s["S2"]
    return {
        "escape_times": {str(k): v for k, v in escapes.items()},
        "escape_mean": mean,
        "dims": list(dims),
        "slope_per_log_d": float(slope),
        "intercept": float(intercept),
        "theory_t": t_theory,
        "theory_overlap": overlap,
        "sgd_t": sgd["t"],
        "sgd_overlap": sgd_overlap.tolist(),
        "sgd": {"d": d, "lr": sgd["lr"], "batch": sgd["batch"], "seconds": sgd["seconds"]},
    }


def figure(data):
    """The three panels (tests/core/test_figures.py redraws docs/figures/fig2_parameterisation.json)."""
    tied, direct = data["tied"], data["direct"]
    fig, (a, b, c) = figures.new_figure(3, width=4.9, height=4.0)
    for i, (activation, p) in enumerate(tied.items()):
        color = f"C{i}"
        figures.exact(a, p["t"], p["exact_p12"], f"{activation}: exact (d = ∞)" if i == 0 else None, color=color)
        figures.theory(a, p["t"], p["quadrature_p12"], f"{activation}: quadrature closure, n = 6", color=color)
        if "matrix_p12" in p:
            figures.theory(a, p["t"], p["matrix_p12"], f"{activation}: matrix-model closure, n = 200", color=color,
                           ls="--", lw=1)  # fmt: skip
        figures.measured(a, p["sgd_t"], p["sgd_p12"], None, f"{activation}: online SGD, d = {p['sgd']['d']}",
                         color=color, marker="osD"[i])  # fmt: skip
    a.plot([], [], color="0.55", lw=4.5, alpha=0.45, label="(the wide light curves: exact, d = ∞)")
    title = "tied S = WWᵀ: p12 leaves 0 on the O(1) scale"
    figures.finish(a, "t = 4nη/d", "centred overlap p12 = q12 − t1 t2", title, fontsize=7)
    d = direct["sgd"]["d"]
    figures.theory(b, direct["theory_t"], direct["theory_overlap"], f"closed system (Theorem 4), from d = {d}")
    figures.measured(b, direct["sgd_t"], direct["sgd_overlap"], None, f"online SGD, d = {d}", color="C3")
    b.set_xlim(0, 3)
    title = "direct S, h2: a saddle left via the O(1/d) overlap"
    figures.finish(b, "τ = nη/d", "centred overlap μ(S1 S2ᵀ) − t1 t2", title, fontsize=7)
    dims = np.array(direct["dims"])
    figures.measured(c, np.log(dims), direct["escape_mean"], None, "escape time (mean of 3 draws)", color="k")
    slope = direct["slope_per_log_d"]
    figures.theory(c, np.log(dims), direct["intercept"] + slope * np.log(dims), f"fit: slope {slope:.3f} per ln d",
                   color="C0", ls="--")  # fmt: skip
    c.set_xticks(np.log(dims), [f"ln {d}" for d in dims])
    title = f"direct: escape time of |overlap| > {THRESHOLD}"
    figures.finish(c, "ln d", "escape time τ", title, fontsize=7)
    return fig


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out/examples")
    parser.add_argument("--d", type=int, default=400, help="dimension of the SGD runs")
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = sgd_runs(args.d, ("h1", "h2", "h3"))
    direct = direct_panel(args.d, runs.pop("direct"))
    tied = tied_panel(args.d, runs)
    data = {"tied": tied, "direct": direct, "args": vars(args)}
    path = out / "fig2_parameterisation.png"
    figures.save(
        figure(data),
        path,
        data,
        load_config(CONFIGS / "fig2_tied_h2.toml"),
        formats=PAPER_FORMATS,
        drawn_by="examples/fig2_parameterisation.py:figure",
    )
    for activation, p in tied.items():
        print(
            f"tied {activation}: zero closure valid until t = {p['zero_valid_until']:.3f} ({p['zero_status']}); "
            f"p12(2.5): exact {p['exact_p12'][-1]:.4f}, quadrature n=6 {p['quadrature_p12'][-1]:.4f} "
            f"(max error {p['quadrature_error']:.1e}, estimate {p['quadrature_estimate']:.1e}), SGD "
            f"{p['sgd_p12'][-1]:.4f} (max |SGD − exact| {p['sgd_minus_exact']:.3f})"
        )
    print(
        "direct escape times (mean of 3 draws): "
        + ", ".join(f"d={d}: {t:.3f}" for d, t in zip(direct["dims"], direct["escape_mean"]))
        + f"; slope per ln d = {direct['slope_per_log_d']:.3f}"
    )
    print(f"wrote {out / 'fig2_parameterisation.png'} and .json")


if __name__ == "__main__":
    main()
