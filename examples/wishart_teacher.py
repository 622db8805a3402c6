"""A Wishart teacher: the exact riccati closure against the other closures, finite-d flows, SGD and the spectrum.

One trainable tied letter against one fixed letter is a matrix Riccati equation (MATH.md §15), solved exactly at
d = ∞ by ``closure = "riccati"``. Two cases with a square Gaussian student (a hard spectral edge at 0) and a Gaussian
teacher of width 1.5 d (two non-commuting letters):

1. mse(h1), student scale 0.8, t ≤ 3 — the issue's case: the risk of the riccati, quadrature (degree 13) and
   matrix-model (n = 400) closures against an independent reference, the finite-d Riccati flow (closed form for
   this loss: Y = S⁻¹ is ``e^{At}Y₀e^{At} + 4∫e^{2A(t−s)}``, A = −2S*) at d = 750 and 1 500, two draws each,
   extrapolated linearly in 1/d; and the spectrum of S(t = 1) against the eigenvalues at d = 1 500;
2. `configs/wishart_teacher.toml` — fig. 1's softmax attention (L = 2): the three closures to t = 20 (the risk's
   tail), and online SGD at d = 200 (2 seeds) on t ≤ 1.

Writes ``OUT/wishart_teacher.png`` (and ``.svg``, ``.pdf``), ``OUT/wishart_teacher.csv`` (every risk curve) and
``OUT/wishart_teacher.json`` (all numbers, run times, provenance). Run:
``python examples/wishart_teacher.py --out out/examples`` (about 3 minutes on 2 cores).
"""

import argparse
import pathlib
import time

import numpy as np

from momentgen.core import figures
from momentgen.core.files import PAPER_FORMATS, write_csv
from momentgen.dynamics.closures import solve_with_closure
from momentgen.interface.api import simulate
from momentgen.setting.config import load_config

CONFIG = pathlib.Path(__file__).with_name("configs") / "wishart_teacher.toml"
CLOSURES = {"riccati": {}, "quadrature": {"degree": 13}, "matrix-model": {"size": 400}}
FINITE_DIMS, FINITE_DRAWS = (750, 1500), 2


def hard_edge_config():
    """The issue's case: mse(h1), L = 1, student scale 0.8, teacher of width 1.5 d, t ≤ 3."""
    return load_config(CONFIG).replace(
        model={"L": 1},
        loss={"builtin": "mse", "activation": "h1"},
        init={"1": {"scale": 0.8}},
        integrate={"T": 3.0, "points": 31},
    )


def finite_flow(d, seed, times, scale=0.8, width=1.5):
    """(risks over ``times``, eigenvalues of S(1)) of the finite-d mse(h1) flow of one draw (module docstring)."""
    rng = np.random.default_rng(seed)
    W = rng.normal(0, scale / np.sqrt(d), (d, d))
    V = rng.normal(0, 1 / np.sqrt(d), (d, int(width * d)))
    lam, Q = np.linalg.eigh(V @ V.T)
    s0, P = np.linalg.eigh(Q.T @ (W @ W.T) @ Q)
    Y0 = (P / s0) @ P.T
    risks, eigenvalues = [], None
    for t in times:
        E = np.exp(-2 * lam * t)
        y, R = np.linalg.eigh(E[:, None] * Y0 * E[None, :] + np.diag(-np.expm1(-4 * lam * t) / lam))
        S = (R / y) @ R.T
        risks.append(2 * np.sum((S - np.diag(lam)) ** 2) / d)
        if abs(t - 1.0) < 1e-12:
            eigenvalues = np.sort(1 / y)
    return np.array(risks), eigenvalues


def closure_runs(config):
    """{closure: (Result, seconds)} for the three closures on ``config``."""
    out = {}
    for name, resolution in CLOSURES.items():
        start = time.perf_counter()
        result = solve_with_closure(config, name, **resolution)
        out[name] = (result, time.perf_counter() - start)
        print(f"  {name}: {out[name][1]:.1f} s, status {result.status}")
    return out


def hard_edge():
    """Case 1: the closures' risks, the extrapolated finite-d reference and the spectrum at t = 1."""
    config = hard_edge_config()
    print("case 1: mse(h1), the closures")
    runs = closure_runs(config)
    t = np.asarray(runs["riccati"][0].t)
    start = time.perf_counter()
    flows = {d: [finite_flow(d, seed, t) for seed in range(FINITE_DRAWS)] for d in FINITE_DIMS}
    finite_seconds = time.perf_counter() - start
    means = {d: np.mean([risk for risk, _ in draws], axis=0) for d, draws in flows.items()}
    small, large = FINITE_DIMS
    reference = (large * means[large] - small * means[small]) / (large - small)  # linear in 1/d
    at_one = config.replace(integrate={"T": 1.0, "points": 2})
    curve = solve_with_closure(at_one, "riccati", spectra=True).spectrum("S1", 1.0, points=600)
    eigenvalues = flows[large][0][1]
    empirical = np.searchsorted(eigenvalues, curve["x"], side="right") / len(eigenvalues)
    return {
        "t": t.tolist(),
        "reference": reference.tolist(),
        "finite": {str(d): m.tolist() for d, m in means.items()},
        "finite_seconds": finite_seconds,
        "closures": _closure_summary(runs, t, reference),
        "spectrum": {
            "x": curve["x"].tolist(),
            "density": curve["density"].tolist(),
            "cdf": curve["cdf"].tolist(),
            "eigenvalues": eigenvalues.tolist(),
            "kolmogorov": float(np.abs(empirical - curve["cdf"]).max()),
        },
    }


def _closure_summary(runs, t, reference=None):
    out = {}
    for name, (result, seconds) in runs.items():
        risk = np.asarray(result.derived["risk"], float)
        row = {"risk": risk.tolist(), "seconds": seconds, "status": result.status,
               "risk_valid_until": result.extra.get("risk_valid_until")}  # fmt: skip
        if reference is not None:
            row["relative_error"] = (np.abs(risk / reference[: len(risk)] - 1)).tolist()
        out[name] = row
    return out


def softmax(seeds):
    """Case 2: the shipped configuration to t = 20 (closures) and t ≤ 1 (SGD at d = 200)."""
    config = load_config(CONFIG)
    print("case 2: softmax, L = 2, the closures to t = 20")
    long = config.replace(integrate={"T": 20.0, "points": 201, "validity_tol": 1e-2})
    runs = closure_runs(long)
    t = np.asarray(runs["riccati"][0].t)
    print(f"case 2: online SGD, d = 200, {seeds} seeds, t ≤ 1")
    start = time.perf_counter()
    sgd = simulate(config, d=200, seeds=seeds, progress=False)
    return {
        "t": t.tolist(),
        "closures": _closure_summary(runs, t),
        "sgd": {
            "t": np.asarray(sgd.t).tolist(),
            "risk": np.asarray(sgd.derived["risk"]).tolist(),
            "risk_se": np.asarray(sgd.extra["risk_se"]).tolist(),
            "seconds": time.perf_counter() - start,
        },
    }


def figure(data):
    """The risk of case 1 on log axes (closures, finite-d reference), its relative errors, case 2's long tail with
    SGD, and the spectrum at t = 1 (tests/core/test_figures.py redraws docs/figures/wishart_teacher.json)."""
    fig, axes = figures.new_figure(2, 2, width=4.8, height=3.6)
    one, two = data["hard_edge"], data["softmax"]
    colors = {"riccati": "C0", "quadrature": "C1", "matrix-model": "C2"}
    ax = axes[0][0]
    figures.exact(ax, one["t"], one["reference"], "finite-d flow, d → ∞ (1/d extrapolation)", color="k")
    for name, row in one["closures"].items():
        figures.theory(ax, one["t"][: len(row["risk"])], row["risk"], f"{name} ({row['seconds']:.1f} s)",
                       color=colors[name])  # fmt: skip
    figures.finish(ax, "t = 4nη/d", "risk", "mse(h1): square student, Wishart teacher", log=True, fontsize=6)
    ax = axes[0][1]
    for name, row in one["closures"].items():
        ax.plot(one["t"][1 : len(row["risk"])], row["relative_error"][1:], color=colors[name], label=name)
    ax.set_yscale("log")
    figures.finish(ax, "t = 4nη/d", "|risk / reference − 1|", "relative error (reference: d → ∞)", fontsize=6)
    ax = axes[1][0]
    for name, row in two["closures"].items():
        figures.theory(ax, two["t"][: len(row["risk"])], row["risk"], f"{name} ({row['seconds']:.1f} s)",
                       color=colors[name])  # fmt: skip
    sgd = two["sgd"]
    figures.measured(ax, sgd["t"], sgd["risk"], sgd["risk_se"], "online SGD, d = 200 (±1 SE)", color="k")
    ax.set_xscale("log")
    figures.finish(ax, "t = 4nη/d", "risk", "softmax, L = 2: the tail to t = 20", log=True, fontsize=6)
    ax = axes[1][1]
    spectrum = one["spectrum"]
    ax.hist(spectrum["eigenvalues"], bins=80, density=True, color="0.8", label="eigenvalues, d = 1 500")
    ax.plot(spectrum["x"], spectrum["density"], color="C0", label=f"riccati (KS {spectrum['kolmogorov']:.1e})")
    ax.set_xlim(0, max(spectrum["eigenvalues"]) * 1.05)
    ax.set_ylim(0, 1.2)
    figures.finish(ax, "eigenvalue", "density", "spectrum of S(t = 1), case 1", fontsize=6)
    return fig


def write(out, data, args):
    """The figure, the CSV of every risk curve and the JSON sidecar (`figures.save`)."""
    rows = []
    for case in ("hard_edge", "softmax"):
        part = data[case]
        for name, row in part["closures"].items():
            rows += [[case, name, t, r] for t, r in zip(part["t"], row["risk"])]
    one = data["hard_edge"]
    rows += [["hard_edge", "finite-d extrapolated", t, r] for t, r in zip(one["t"], one["reference"])]
    sgd = data["softmax"]["sgd"]
    rows += [["softmax", "sgd d=200", t, r] for t, r in zip(sgd["t"], sgd["risk"])]
    write_csv(out / "wishart_teacher.csv", ["case", "curve", "t", "risk"], rows)
    data = {**data, "args": vars(args)}
    figures.save(figure(data), out / "wishart_teacher.png", data, load_config(CONFIG), formats=PAPER_FORMATS,
                 dpi=130, drawn_by="examples/wishart_teacher.py:figure")  # fmt: skip


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out/examples")
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = {"hard_edge": hard_edge(), "softmax": softmax(args.seeds)}
    write(out, data, args)
    one = data["hard_edge"]
    t = np.asarray(one["t"])
    at = [int(np.argmin(np.abs(t - s))) for s in (1.0, 2.0, 3.0)]
    print(f"{'closure':14s} {'seconds':>8s}  relative risk error at t = 1 / 2 / 3")
    for name, row in one["closures"].items():
        errors = " / ".join(f"{row['relative_error'][i]:.2g}" for i in at)
        print(f"{name:14s} {row['seconds']:8.1f}  {errors}")
    print(f"spectrum at t = 1: Kolmogorov distance to d = 1 500 eigenvalues {one['spectrum']['kolmogorov']:.2g}")
    print(f"wrote {out / 'wishart_teacher.png'}, .svg, .pdf, .csv and .json")


if __name__ == "__main__":
    main()
