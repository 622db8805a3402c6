"""Fig. 2: the parameterisation decides weak recovery — tied W-flow vs direct S-flow.

Left: tied, h1 / h2 / h3, small student (N(0, 0.05/d)) and teacher N(0, 0.5/d)
(`examples/configs/fig2_tied_h2.toml` with the activation set): the centred overlap
p12 = q12 − t1 t2 leaves 0 on the O(1) time scale t = 4nη/d — the exact d = ∞ curve
(Riccati equation + free subordination, `momentgen.oracles.riccati_tied_moments`), the
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
import json
import pathlib

import numpy as np
from matplotlib.figure import Figure

from momentgen.closures import solve_with_closure
from momentgen.comparison import run_tasks, sgd_task
from momentgen.config import load_config
from momentgen.files import PAPER_FORMATS, save_figure
from momentgen.hierarchy import build
from momentgen.initial import empirical_moments
from momentgen.integrate import solve
from momentgen.oracles import riccati_tied_moments
from momentgen.potential import Potential
from momentgen.reference import initial_factors
from momentgen.truncation import Truncation

CONFIGS = pathlib.Path(__file__).with_name("configs")
THRESHOLD = 0.1


def tied_config(activation, T=2.5):
    config = load_config(CONFIGS / "fig2_tied_h2.toml")
    config.raw["loss"]["activation"] = activation
    config.raw["integrate"].update(T=T, points=51)
    return config


def direct_config(T=1.0):
    config = load_config(CONFIGS / "fig2_direct_h2.toml")
    config.raw["integrate"].update(T=T, points=41)
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
        t = np.linspace(0, config.section("integrate")["T"], 51)
        inits = config.inits()
        exact = riccati_tied_moments(Potential(config.loss(), "tied"), inits[1], inits[2], t)
        exact_p12 = exact["S1 S2"] - exact["S1"] * inits[2].width_ratio * inits[2].scale ** 2
        zero = solve_with_closure(config, "zero")
        quadrature = solve_with_closure(config, "quadrature", degree=13)
        p12 = np.array(sgd["series"]["S1 S2"]) - np.array(sgd["series"]["S1"]) * np.array(sgd["series"]["S2"])
        panels[activation] = {
            "t": t.tolist(),
            "exact_p12": exact_p12.tolist(),
            "zero_t": zero["t"],
            "zero_p12": zero["derived"]["p12"],
            "zero_valid_until": zero["valid_until"],
            "zero_status": zero["status"],
            "quadrature_p12": quadrature["derived"]["p12"],
            "quadrature_estimate": quadrature["error_estimate"],
            "quadrature_error": float(np.abs(np.array(quadrature["derived"]["p12"]) - exact_p12).max()),
            "sgd_t": sgd["t"],
            "sgd_p12": p12.tolist(),
            "sgd_minus_exact": float(np.abs(p12 - exact_p12).max()),
            "sgd": {"d": d, "lr": sgd["lr"], "batch": sgd["batch"], "seconds": sgd["seconds"]},
        }
        if activation == "h2":
            matrix = solve_with_closure(config, "matrix-model", size=200)
            panels[activation].update(
                matrix_p12=matrix["derived"]["p12"], matrix_error_estimate=matrix["error_estimate"]
            )
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


def plot(tied, direct, path):
    fig = Figure(figsize=(14, 5))
    a, b, c = fig.subplots(1, 3)
    for i, (activation, p) in enumerate(tied.items()):
        color = f"C{i}"
        a.plot(p["t"], p["exact_p12"], color=color, lw=2, label=f"{activation}: exact d=∞")
        a.plot(p["t"], p["quadrature_p12"], "w--", lw=0.8)
        t, zero = np.array(p["zero_t"]), np.array(p["zero_p12"])
        inside = t <= p["zero_valid_until"] + 1e-12
        a.plot(t[inside], zero[inside], ":", color="k", lw=1)
        a.plot(p["sgd_t"], p["sgd_p12"], "o", color=color, ms=3, label=f"{activation}: SGD d={p['sgd']['d']}")
        if "matrix_p12" in p:
            a.plot(p["t"], p["matrix_p12"], "k--", lw=0.8, label="h2: matrix-model closure n=200")
    a.plot([], [], "w--", label="quadrature closure n=6 (on the exact curves)")
    a.plot([], [], "k:", label="zero closure M=10, valid part")
    a.set(title="tied S = WWᵀ: p12 escapes on the O(1) scale", xlabel="t = 4nη/d", ylabel="p12 = q12 − t1 t2")
    a.set_facecolor("0.93")
    # below the axes: inside, it covered the h2 escape
    a.legend(fontsize=6, loc="upper left", bbox_to_anchor=(0.0, -0.18), ncol=2, frameon=False)
    b.plot(direct["theory_t"], direct["theory_overlap"], "k-", label=f"closed system, d={direct['sgd']['d']} start")
    b.plot(direct["sgd_t"], direct["sgd_overlap"], "C3o", ms=3, label=f"SGD d={direct['sgd']['d']}")
    b.set(
        title="direct S, h2: a saddle left via the O(1/d) overlap", xlabel="τ = nη/d", ylabel="Ω12 − t1 t2", xlim=(0, 3)
    )
    b.legend(fontsize=7)
    dims = np.array(direct["dims"])
    c.plot(np.log(dims), direct["escape_mean"], "o-", label="escape time (3 draws)")
    c.plot(
        np.log(dims),
        direct["intercept"] + direct["slope_per_log_d"] * np.log(dims),
        "k--",
        label=f"fit: slope {direct['slope_per_log_d']:.3f} = 1/{1 / direct['slope_per_log_d']:.1f}",
    )
    c.set(title=f"direct escape time (|overlap| > {THRESHOLD})", xlabel="ln d", ylabel="τ_escape")
    c.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, formats=PAPER_FORMATS, dpi=120)


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
    (out / "fig2_parameterisation.json").write_text(json.dumps({"tied": tied, "direct": direct}))
    plot(tied, direct, out / "fig2_parameterisation.png")
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
