"""Ensembles of matrix models: several Haar draws, averaged with control variates (MATH.md §8).

A matrix model of size n (`momentgen.compiler.initial.law_factors`) starts from one random draw of
n × n matrices whose moments are the d = ∞ ones up to O(1/n) fluctuations; its trajectory
inherits them (measured on untied h1, τ ∈ [0, 0.8]: one draw at n = 100 is 0.015–0.04 off the
d → ∞ curve). Averaging draws removes the fluctuation but not the O(1/n) bias, and most of the
fluctuation of a trajectory is explained by its own initial moments, whose d = ∞ values are
known exactly (`momentgen.compiler.initial.exact_moments`). `control_variate_mean` regresses the draws'
trajectories on their initial deviations and reports the intercept — the ensemble mean at
initial moments equal to the d = ∞ ones — with its standard error from the residuals.

Against a data covariance Σ each draw samples Σ's law once in each of its n quantile bins (`draw_spectrum`)
instead of taking the midpoint quantiles: a late risk lives at Σ's lower edge, where the midpoint of the lowest
bin misrepresents the law (an untied Gaussian student and teacher against a power law with a = 0.5: 22 % low at
τ = 5 over 32 draws of n = 128, as low as finite-d flows at d = 128), while the strata average to the law itself
(64 draws: −1.0 ± 2.7 %). The control variate is then the draw's lowest eigenvalue less its expectation (`_controls`).
The draws of one leg share the strata as a Latin hypercube: in each bin they fall in distinct sub-bins, so together
they cover Σ's law evenly. Where Σ's sampling is all the noise (the exact commuting case of `tests/dynamics/
test_ensemble.py`) the legs' means scatter 18× less than with independent strata; on the untied case above, 32 sets
of 8 draws scatter by 6.7 % at τ = 5 instead of 8.6 %, and the tied scaling-law case is unchanged (its noise is the
rotations'). The standard error is still that of independent draws: an over-estimate under the hypercube.

With the finite-learning-rate term (κ > 0) each draw is a stochastic matrix model with its own noise seed, so the
standard error covers the noise too (the Haar draw's and the SGD-like noise's fluctuations together).

`run_ensembles` runs the draws of every size in one batch in parallel (`ENSEMBLE_JOBS` processes unless the problem
asks for another number, ``Problem.n_jobs``; one BLAS thread each; the draws, and so the result, are the same on any
number) and returns for each size a `momentgen.setting.flow.FlowRun` whose series are those intercepts and
whose ``info["standard_error"]`` holds their standard errors. Time is on the kind's axis.
"""

import json

import numpy as np

from ..compiler.initial import flat_size, law_factors
from ..core.parallel import run_tasks
from ..setting.config import parse_config
from ..setting.flow import CHEBYSHEV_DRAWS, FlowRun
from .problem import Problem
from .risk import theory_risk
from .stepper_check import checked_run, compared, tighter

__all__ = [
    "control_variate_mean",
    "draw_factors",
    "draw_spectrum",
    "main_branch",
    "run_ensembles",
    "usable_controls",
    "ENSEMBLE_JOBS",
    "MIN_DRAWS",
]

#: Fewest draws an ensemble takes (a standard error needs a few degrees of freedom).
MIN_DRAWS = 4
#: The processes an ensemble's draws run on by default (this one and a worker: a 2-core machine's; ``n_jobs`` of
#: `momentgen.solve` and ``--jobs`` of ``momentgen solve`` ask for more).
ENSEMBLE_JOBS = 2
#: How far (relative to max(1, |value|)) a draw must be from the draws' median to be on another branch.
BRANCH_GAP = 0.05
_SPARE = 4  # residual degrees of freedom kept: controls ≤ draws − 1 − _SPARE
_LATIN_STREAM = 2  # a leg's order of its draws within each bin of Σ (`_latin_positions`)
_SPECTRUM_STREAM = 1  # a draw's Σ spectrum: `np.random.default_rng([seed, this])`, apart from its rotations' stream


def control_variate_mean(values, controls):
    """(intercept, standard error) of the least-squares fit ``values ≈ c + controls · β``.

    ``values``: (draws, …) trajectories; ``controls``: (draws, p) deviations of each draw's
    initial moments from their exact d = ∞ values (expectation ≈ 0). Constant controls are
    dropped, and so are controls whose mean deviation exceeds their spread: the intercept there
    would be a linear extrapolation outside the draws' cloud (finite-d factors of an untied kind
    with a mean, `shift_to_mean`: μ(M) = m/√d is a systematic offset, 0.21 at d = 50, m = 1.5, that
    carries the mean's effect — extrapolating it away gave 2.5 ± 2.6 for an overlap of 0.5; the
    matrix-model closure's own factors are centred). At most ``draws − 1 − 4`` of the others are
    used (those of largest variance), so that the standard error has at least four degrees of
    freedom. With no usable control it is the plain mean and its standard error.
    """
    values = np.asarray(values, dtype=float)
    draws = len(values)
    controls = np.asarray(controls, dtype=float).reshape(draws, -1)
    design = np.column_stack([np.ones(draws), controls[:, usable_controls(controls, draws - 1 - _SPARE)]])
    flat = values.reshape(draws, -1)
    coefficients, *_ = np.linalg.lstsq(design, flat, rcond=None)
    dof = draws - design.shape[1]
    residual = flat - design @ coefficients
    variance = (residual**2).sum(axis=0) / max(dof, 1) * np.linalg.pinv(design.T @ design)[0, 0]
    shape = values.shape[1:]
    return coefficients[0].reshape(shape), np.sqrt(variance).reshape(shape)


def usable_controls(controls, limit):
    """Indices of the columns of ``controls`` (draws, p) worth regressing on, at most ``limit`` of
    them, largest variance first: not constant, and not systematically off (mean deviation above
    the spread: the intercept would be extrapolated outside the draws' cloud)."""
    spread = controls.std(axis=0)
    varying = np.flatnonzero(
        (spread > 1e-12 * (1.0 + np.abs(controls).max(axis=0))) & (np.abs(controls.mean(axis=0)) <= spread)
    )
    return varying[np.argsort(spread[varying])[::-1][: max(0, limit)]]


_PROBLEMS = {}  # this process's `Problem` of the ensemble it is drawing (`_problem`)


def _problem(config_raw, source, kappa, times):
    """The `Problem` of a draw task, built once per process and ensemble, not once per draw (its parsing and its
    coefficients' program cost about as much as a small draw's flow); only the latest is kept. A draw changes nothing
    in it: each run starts its own `CoefficientSource` on its branch."""
    key = (json.dumps(config_raw, sort_keys=True, default=repr), source, float(kappa), tuple(np.asarray(times, float)))
    if key not in _PROBLEMS:
        _PROBLEMS.clear()
        _PROBLEMS[key] = Problem.from_config(parse_config(config_raw, source), kappa=kappa, times=times)
    return _PROBLEMS[key]


def _latin_positions(size, seed, leg, rng):
    """Where in each of Σ's ``size`` quantile bins the draw ``seed`` of a leg (``leg``: its first seed and number of
    draws N) samples, in [0, 1): a Latin hypercube over the leg — in every bin the leg's N draws fall one in each of
    N equal sub-bins, in an order drawn per bin from the leg's own stream, uniformly within it from ``rng``."""
    first, count = leg
    order = np.random.default_rng([first, count, size, _LATIN_STREAM]).random((size, count)).argsort(axis=1)
    return (order[:, seed - first] + rng.random(size)) / count


def draw_spectrum(problem, size, seed, leg=None):
    """(Σ's eigenvalues in the draw ``seed`` of ``size``, the smallest one's deviation from its expectation): the law
    sampled once in each quantile bin (`momentgen.setting.data.DataCovariance.stratified_eigenvalues`, from its own
    stream, apart from the rotations'), so that the ensemble's mean is not the midpoint quantiles' biased one; the
    deviation is the ensemble's control variate (`_controls`: a late risk lives at Σ's lower edge). A draw of a
    ``leg`` (its first seed and number of draws) takes its place in the leg's Latin hypercube (`_latin_positions`):
    the leg's draws cover every bin evenly, not by chance. (None, 0.0) without Σ."""
    if not problem.model.sigma:
        return None, 0.0
    rng = np.random.default_rng([seed, _SPECTRUM_STREAM])
    within = None if leg is None else _latin_positions(size, seed, leg, rng)
    spectrum = problem.data.stratified_eigenvalues(size, rng, within=within)
    return spectrum, spectrum[0] - problem.data.bin_means(size)[0]


def draw_factors(problem, size, seed, leg=None):
    """(factors, Σ as a matrix or None, Σ's edge deviation) of an ensemble's draw ``seed`` of ``size`` (flat rotations
    at a power-of-two size: `momentgen.compiler.initial.flat_size`; Σ's spectrum by `draw_spectrum`, in ``leg``'s
    Latin hypercube)."""
    spectrum, edge = draw_spectrum(problem, size, seed, leg)
    factors = law_factors(
        problem.model, problem.specs, size, seed=seed, data=problem.data, flat=flat_size(size), spectrum=spectrum
    )
    return factors, None if spectrum is None else np.diag(spectrum), edge


def _draw(config_raw, source, size, seed, means, kappa, times, leg=None):
    """One draw of an ensemble (a task): (t, the words' trajectories, status, message, risk, Σ's edge deviation) of
    the matrix model `draw_factors` gives, moved by the Chebyshev stepper, and with κ > 0 its own noise
    (`Problem.law_run`)."""
    problem = _problem(config_raw, source, kappa, times)
    factors, sigma, edge = draw_factors(problem, size, seed, leg)
    run = problem.law_run(factors, means, seed, stepper=CHEBYSHEV_DRAWS, sigma=sigma)
    values = np.array([run.series[w] for w in problem.words])
    return run.t, values, run.status, run.message, theory_risk(problem, run.series, means), edge


def run_ensembles(problem, legs, means, check=False):
    """{leg: its ensemble} for ``legs`` ({leg: (size, seeds: a range)}): the control-variate mean of the matrix models
    of each size drawn with its seeds (a Latin hypercube over Σ's strata per leg: `draw_spectrum`), as a `FlowRun`
    (series: the intercepts on the times every draw of the leg reached; ``info["standard_error"]``: theirs,
    ``info["risk_standard_error"]``: the risk's, ``info["flat"]``: whether the draws were mixed by flat rotations).
    Each draw of every leg is one task of a batch over ``problem.n_jobs`` processes (default `ENSEMBLE_JOBS`) — this
    one among them (`run_tasks` with ``share``: the workers take the tasks from the front, this process from the
    back, so a worker still starting takes fewer; with one, this process alone) — largest sizes first, so that no
    process idles while a leg finishes. A draw that stops ends its ensemble at the time it reached, with its status.
    With ``check`` (κ = 0) the two sides of the draws' stepper check (`momentgen.dynamics.stepper_check`) run first
    in the same batch, and every leg's ``info["stepper_error"]`` is what it measured."""
    draws = [(size, seed, (seeds[0], len(seeds))) for size, seeds in legs.values() for seed in seeds]
    draws.sort(key=lambda draw: -draw[0])
    config = problem.config
    means = None if means is None else np.asarray(means, dtype=float)
    common = (config.raw, config.source)
    sides = [CHEBYSHEV_DRAWS, tighter(CHEBYSHEV_DRAWS)] if check else []
    tasks = [(_checked, (*common, means, problem.output_times, stepper)) for stepper in reversed(sides)]
    tasks += [
        (_draw, (*common, size, seed, means, problem.kappa, problem.output_times, leg)) for size, seed, leg in draws
    ]
    n_jobs = problem.n_jobs or ENSEMBLE_JOBS
    results = run_tasks(tasks, n_jobs=min(n_jobs, len(tasks)), progress=False, share=True)
    done = {(size, seed): result for (size, seed, _), result in zip(draws, results[len(sides) :])}
    runs = {name: _ensemble(problem, size, [done[size, s] for s in seeds]) for name, (size, seeds) in legs.items()}
    if check:
        measured = compared(problem, results[1], results[0])
        for run in runs.values():
            run.info["stepper_error"] = measured
    return runs


def _checked(config_raw, source, means, times, stepper):
    """One side of the draws' stepper check (a task): `momentgen.dynamics.stepper_check.checked_run` of the ensemble's
    problem (κ = 0) by ``stepper``."""
    return checked_run(_problem(config_raw, source, 0.0, times), means, stepper)


def _ensemble(problem, size, runs):
    """The `FlowRun` of one leg's draws ``runs`` of ``size`` (see `run_ensembles`)."""
    reached = min(len(t) for t, *_ in runs)
    stopped = [(status, message) for _, _, status, message, *_ in runs if status != "ok"]
    values = np.array([series[:, :reached] for _, series, *_ in runs])
    main = main_branch(values)
    values = values[main]
    controls = _controls(problem, values, np.array([edge for *_, edge in runs])[main])
    mean, error = control_variate_mean(values, controls)
    risks = np.array([risk[:reached] for *_, risk, _ in runs])[main]
    status, message = stopped[0] if stopped else ("ok", "")
    info = {
        "standard_error": {w: error[i] for i, w in enumerate(problem.words)},
        "risk_standard_error": control_variate_mean(risks, controls)[1],
        "draws": int(main.sum()),
        "flat": flat_size(size),
        "method": "RKC" if problem.kappa == 0 else "stochastic matrix model (Euler drift, split noise)",
    }
    if not main.all():
        info["other_branch"] = int((~main).sum())
    series = {w: mean[i] for i, w in enumerate(problem.words)}
    return FlowRun(runs[0][0][:reached], status, message, series=series, probes=np.zeros((reached, 0)), info=info)


def _controls(problem, values, edges):
    """The control variates of an ensemble's draws (their trajectories ``values``, (draws, words, times)): against Σ
    its lower edge, each draw's smallest eigenvalue less its expectation (``edges``: `draw_spectrum`); otherwise the
    words' initial deviations from their exact d = ∞ values. Against Σ the words' deviations of flat-mixed draws
    explain little of a late risk, and fitted on 8 draws they bias it (tied and untied scaling-law cases: the
    8-draw means' scatter and offset grow; README, Anisotropic data)."""
    if problem.model.sigma:
        return edges[:, None]
    return values[:, :, 0] - problem.initial_moments(problem.word_codes)  # exact d = ∞ values: no factors


def main_branch(values, spread=10.0):
    """Mask of the draws on the ensemble's main branch: a draw whose trajectory leaves the draws'
    median by more than ``spread`` robust deviations (1.4826 × the median absolute deviation, per
    word and time) somewhere is on another branch — at small n a fluctuation can send a draw to
    another attractor that the d = ∞ dynamics does not visit (untied h2 with teacher mean 1.5:
    μ(M₁M₂ᵀ) → −0.53 in 2 of 16 draws at n = 50 and 1 at n = 100, +0.52 ± 0.02 in the others; none
    of 6 flows at d = 200). A draw counts as elsewhere only when it is also `BRANCH_GAP` of max(1, |median|) away:
    a median absolute deviation of 8 draws is itself noisy, and a draw 15 of them off by 2e-3 is a fluctuation (a
    Gaussian student against a power-law Σ at n = 128). Averaging the branches means nothing, so those draws are left
    out, unless more than a quarter of them would be: then the ensemble is bimodal and kept whole (its
    standard error says so)."""
    values = np.asarray(values, dtype=float).reshape(len(values), -1)
    median = np.median(values, axis=0)
    deviation = 1.4826 * np.median(np.abs(values - median), axis=0)
    scale = np.maximum(deviation, 1e-9 * (1.0 + np.abs(median)))
    gap = np.abs(values - median)
    main = ~np.any((gap > spread * scale) & (gap > BRANCH_GAP * np.maximum(1.0, np.abs(median))), axis=1)
    return main if (~main).sum() <= len(main) // 4 and main.sum() >= MIN_DRAWS else np.ones(len(main), bool)
