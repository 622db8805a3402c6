"""Benchmark: the finite-learning-rate term over whole curves (issue 48 — target: ≤ 1/10 of the cost before, on a
Gaussian student against a power-law Σ and on tied softmax with L = 3).

The stochastic matrix model (`momentgen.setting.flow.run_stochastic`: Euler drift, each noise increment split over two
steps, two-point noise entries, steps that follow t and the drift's stiffness — equal between output times, each
increment carrying κ's mean over the window it acts in —, the words over fixed letters measured once) against, in the
same run, the baseline — the same model stepped as before: Heun's drift with the noise at the step's start, Gaussian
noise entries, a fixed step 2e-3 on the kind's axis (`fixed_step` below, kept here only as the baseline). Same
factors, same source, one noise draw each (the noises differ, so the curves agree only to the model's own draw-to-draw
spread, printed beside them).

1. Tied mse(h1), power-law Σ a = 2, a Gaussian student (n = 200, Haar), teacher 1.2 Σ^{1/2}, κ = 0.05, t ∈ [0, 50]
   (log grid from 0.1): the issue's case.
2. Tied softmax-mse, L = 3, label noise 0.3, the warm-up/stable/decay schedule of ``noise_floors`` at κ = 0.2, n = 100:
   both on t ∈ [0, 0.5] (the baseline's cost is linear in the horizon: its step is fixed), and the new one over the
   whole curve t ∈ [0, 10], against the baseline's cost extrapolated linearly from its measured 0.5.

Run: ``python benchmarks/bench_finite_lr.py`` (part of ``make bench``; about thirteen minutes).
"""

import time

import numpy as np
from common import pick

from momentgen.compiler.initial import law_factors
from momentgen.dynamics.problem import Problem
from momentgen.dynamics.risk import theory_risk
from momentgen.models.base import psd_root, sandwich
from momentgen.setting import flow
from momentgen.setting.config import load_config
from momentgen.setting.matrices import trace_moments

FIXED_STEP = 2e-3  # the baseline's step on the kind's axis


def fixed_step(model, factors, source, *, times, codes, texts, seed, sigma=None):
    """The stochastic matrix model as stepped before issue 48: fixed steps of at most `FIXED_STEP`, Heun's drift (two
    evaluations a step), Euler–Maruyama's noise read at the step's start. Returns the run's `FlowRun`."""
    definition, layout, words = model.definition, flow._Layout(model, factors, sigma), list(source.words)
    root = None if sigma is None else psd_root(np.asarray(sigma, float))
    rng, rho = np.random.default_rng(seed), definition.steps_per_time(1.0, 1.0)
    d, state, vector = definition.matrices.dimension(layout.factors[0]), source.state, layout.pack(layout.factors)

    def drift(vector, t, noise=True):
        current = layout.unpack(vector)
        letters = layout.letters(current)
        arrays = source.coefficients(trace_moments(words, letters), noise=noise, t=t, state=state)
        return layout.pack(definition.matrices.factor_velocities(model, current, arrays, letters)), arrays

    def noise(vector, arrays, h):
        H = flow._noise_matrices(arrays["N1"], arrays["N2"], d, np.sqrt(rho * h / d), rng, draw=gaussian)
        H = H if root is None else [sandwich(root, x) for x in H]
        return layout.pack(definition.matrices.noise_increments(model, layout.unpack(vector), H))

    states, evaluations = [layout.unpack(vector.copy())], 0
    for start, end in zip(times[:-1], times[1:]):
        steps = max(1, int(np.ceil((end - start) / FIXED_STEP - 1e-9)))
        h = (end - start) / steps
        for i in range(steps):
            velocity, arrays = drift(vector, start + i * h)
            corrected, _ = drift(vector + h * velocity, start + (i + 1) * h, noise=False)
            vector = vector + 0.5 * h * (velocity + corrected) + noise(vector, arrays, h)
            evaluations += 2
            state = source.advanced(trace_moments(words, layout.letters(layout.unpack(vector))), state)
        states.append(layout.unpack(vector.copy()))
    letters = [layout.letters(f) for f in states]
    return flow._measured(times, letters, codes, texts, trace_moments, (), "ok", "", evaluations)


def gaussian(rng, shape, dtype):
    """The baseline's noise entries, as before: Gaussian, in double precision (``dtype`` is that)."""
    return rng.standard_normal(shape, dtype=dtype)


def timed(problem, factors, runner, seed=0):
    """(seconds, risk, evaluations) of one run of ``runner`` from ``factors``."""
    start = time.perf_counter()
    run = runner(problem.model, factors, problem.source(), times=problem.times, codes=problem.word_codes,
                 texts=problem.words, seed=seed, sigma=problem.sigma_of(factors))  # fmt: skip
    return time.perf_counter() - start, np.asarray(theory_risk(problem, run.series)), run.info["nfev"]


def compare(label, problem, factors):
    """Print the baseline's and the new model's cost and their risks; returns the baseline's seconds."""
    base, base_risk, base_nfev = timed(problem, factors, fixed_step)
    new, risk, nfev = timed(problem, factors, flow.run_stochastic)
    other = timed(problem, factors, flow.run_stochastic, seed=1)[1]
    gap = np.abs(risk / base_risk - 1)[1:].max()
    spread = np.abs(other / risk - 1)[1:].max()
    print(f"  {label}")
    print(f"    baseline (fixed step {FIXED_STEP:g}, Heun): {base:7.1f} s, {base_nfev} evaluations")
    print(f"    split-noise steps:                   {new:7.1f} s, {nfev} evaluations   ratio {base / new:5.1f}")
    print(f"    risk: new vs baseline max relative gap {gap:.1%}; two noise seeds of the new one {spread:.1%} apart")
    return base


def scaling_law_case():
    integrate = {"T": pick(50.0, 0.2), "points": pick(31, 4), "grid": "log", "log_first": 0.1}
    config = load_config("scaling_law", data={"exponent": 2.0}, init={"1": {"kind": "gaussian"}}, integrate=integrate)
    problem = Problem.from_config(config, kappa=0.05)
    return problem, law_factors(problem.model, problem.specs, pick(200, 16), data=problem.data)


def softmax_case(T):
    config = load_config("noise_floors", model={"L": pick(3, 2)}, integrate={"T": T, "points": 11},
                         truncation={"size": pick(100, 8)})  # fmt: skip
    problem = Problem.from_config(config)
    return problem, law_factors(problem.model, problem.specs, pick(100, 8), data=problem.data)


def main():
    print("the finite-learning-rate term: the stochastic matrix model, baseline in the same run")
    compare("tied mse(h1), power-law Σ a = 2, Gaussian student n = 200, κ = 0.05, t ∈ [0, 50]", *scaling_law_case())
    short = pick(0.5, 0.02)
    base = compare(f"tied softmax L = 3, label noise 0.3, wsd schedule, κ = 0.2, n = 100, t ∈ [0, {short}]",
                   *softmax_case(short))  # fmt: skip
    whole = pick(10.0, 0.04)
    seconds, risk, nfev = timed(*softmax_case(whole), flow.run_stochastic)
    extrapolated = base * whole / short
    print(f"    whole curve t ∈ [0, {whole}]: {seconds:.1f} s ({nfev} evaluations); the baseline extrapolated "
          f"linearly {extrapolated:.0f} s: ratio {extrapolated / seconds:.1f}; final risk {risk[-1]:.4g}")  # fmt: skip


if __name__ == "__main__":
    main()
