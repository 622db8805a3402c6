"""The plan of `verification.verify`: the SGD dimensions, seeds and drift steps that fit a time budget
(measured step costs, `_plan`), and the finite-d start states of each leg (`_States`)."""

import time

import numpy as np

from ..core.errors import MomentgenError
from ..reference.from_config import check_sgd_plan, config_sampler
from ..setting.config import ConfigError
from ..setting.matrices import initial_factors
from ..setting.schedules import axis_lr_for_kappa, lr_for_kappa

#: the fewest SGD steps of the drift check (its standard error needs a sample)
MIN_STEPS = 100
#: The share of the budget left after the theory's legs that the SGD legs are planned to fill: measured, they ran
#: 13–17 % over their estimate from 20 timed steps (the probes at each output time, the workers' start-up; the
#: wishart_teacher configuration at budget 120 s took 139 s when the plan filled all of it).
PLANNED_SHARE = 0.85


#: the largest budget `verify` takes (a week, in seconds): beyond it a plan is not a plan
MAX_BUDGET = 7 * 86400.0


def check_budget(budget):
    """``budget`` is None or a finite number of seconds in (0, `MAX_BUDGET`], else a one-line `ConfigError`."""
    if budget is not None and (
        isinstance(budget, bool) or not isinstance(budget, (int, float)) or not 0 < budget <= MAX_BUDGET
    ):
        raise ConfigError(f"budget (--budget) must be a number of seconds in (0, {MAX_BUDGET:g}], got {budget!r}")


def elapsed(begin):
    """Seconds since ``begin`` (`time.perf_counter`): what verify's theory legs spent before the plan (a test sets it
    to 0 to plan against fixed costs)."""
    return time.perf_counter() - begin


def _plan(config, start, dims, seeds, steps, kappa, budget, n_jobs, pair_seconds, spent, say):
    """{"dims", "drift_dims", "seeds", "steps", "budget", "estimated_s"}: what the legs will run. Without a
    budget, what was asked for. With one, the theory's own legs have already run (``spent`` seconds: the closure,
    its cross-check, one own-start pair) and the rest of the budget is planned: SGD's cost per step is measured at
    each d (20 steps) and the plan is cut to fit `PLANNED_SHARE` of what is left: a quarter for the drift steps, the
    rest for the seeds — each an SGD run at both d and the closure from both starts (``pair_seconds``, measured) —
    which run on ``n_jobs`` processes (default 2); where even 3 seeds (or `MIN_STEPS` drift steps) do not fit, the
    finite-d leg's (or the drift's) dimensions are halved (down to d₁ ≥ 25; not for a from-file state, whose d is
    fixed). The drift's cost does not grow with the horizon T, so a long horizon shrinks only the finite-d leg's d
    (the drift's 1/d extrapolation from d = 50, 100 is off by O(1/d²): measured 6 SE on fig2_tied_h2).
    A budget below the smallest plan is a `ConfigError` that says what it would need."""
    plan = {"dims": list(dims), "drift_dims": list(dims), "seeds": list(seeds), "steps": steps, "budget": budget}
    plan["estimated_s"] = None
    if budget is None:
        return plan
    check_budget(budget)
    left = PLANNED_SHARE * (budget - spent)
    if left <= 0:
        raise ConfigError(
            f"budget {budget:g} s was spent by the theory's own legs before any SGD ran ({spent:.0f} s: the closure, "
            "its cross-check and one own-start pair): raise the budget"
        )
    workers, candidates = n_jobs or 2, [dims]
    while not start.dims and candidates[-1][0] // 2 >= 25:
        candidates.append((candidates[-1][0] // 2, candidates[-1][1] // 2))
    drift = None  # (dims, steps, seconds): the largest d whose drift steps fit — the drift does not depend on T
    for trial in candidates:
        try:  # a smaller d has longer steps: its SGD must still resolve a grid of at least 2 points
            _check_sgd_runs(config, trial, kappa)
        except MomentgenError:
            break
        drift_cost, per_seed = _costs(config, start, trial, kappa, pair_seconds)
        drift_steps = int(min(steps, 0.25 * left / drift_cost))
        if drift is None and drift_steps >= MIN_STEPS:
            drift = (trial, drift_steps, drift_steps * drift_cost)
        n_seeds = int(min(len(seeds), 0.75 * left * workers / per_seed))
        if drift is not None and n_seeds >= 3:
            plan.update(dims=list(trial), drift_dims=list(drift[0]), seeds=list(seeds)[:n_seeds], steps=drift[1])
            plan["estimated_s"] = spent + drift[2] + n_seeds * per_seed / workers
            say(f"plan for {budget:g} s ({spent:.0f} s spent by the theory's legs): drift at d = {drift[0][0]}, "
                f"{drift[0][1]} ({drift[1]} steps); finite-d leg at d = {trial[0]}, {trial[1]}, {n_seeds} seeds "
                f"(≈ {plan['estimated_s']:.0f} s in all)")  # fmt: skip
            return plan
    smallest = spent + MIN_STEPS * drift_cost + 2 * per_seed
    raise ConfigError(
        f"budget {budget:g} s is below the smallest plan (the theory's legs, 3 seeds, {MIN_STEPS} drift steps at "
        f"d = {trial[0]}, {trial[1]}: about {smallest:.0f} s): raise the budget"
    )


def _sgd_points(config, d, kappa):
    """Output points an SGD run at ``d`` (κ_eff = κ) resolves on [0, T]: ``[integrate] points``, or fewer so that
    every spacing of the grid (`Config.output_times`) is at least one SGD step (the finite-d leg reads SGD only at
    times it reached); 2 points ([0, T]) when none does."""
    step = 1.0 / config.model.definition.steps_per_time(d, axis_lr_for_kappa(kappa, d, config.settings.sgd.batch))

    def resolved(points):  # the smallest spacing shrinks as points grow: a bisection finds the most that resolve
        return np.diff(config.output_times(points)).min() >= step * (1 - 1e-9)

    low, high = 2, config.settings.integrate.points
    if resolved(high):
        return high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if resolved(middle) else (low, middle)
    return low


def _check_sgd_runs(config, dims, kappa):
    """`check_sgd_plan` for verify's SGD runs at both ``dims`` (κ_eff = κ), on the grid d₁ resolves."""
    points = _sgd_points(config, dims[0], kappa)
    table = config.settings.sgd
    for d in dims:
        lr = lr_for_kappa(kappa, d, table.batch, table.momentum)
        grid = {"points": points} if points > 2 else {"points": 2, "grid": "linear"}
        check_sgd_plan(config.replace(sgd={"d": d, "lr": lr}, integrate=grid), d)


def _costs(config, start, dims, kappa, pair_seconds):
    """(seconds per drift step at both d, seconds per seed of the finite-d leg: SGD at both d and ``pair_seconds`` of
    theory) at ``dims``."""
    batch, T = config.settings.sgd.batch, config.settings.integrate.T
    drift, per_seed = 0.0, pair_seconds
    for d in dims:
        lr = axis_lr_for_kappa(kappa, d, batch)
        cost = _step_seconds(config, start.factors(d, 0), lr)
        drift += cost
        per_seed += T * config.model.definition.steps_per_time(d, lr) * cost
    return drift, per_seed


def _step_seconds(config, factors, lr, steps=20):
    """Seconds per SGD step at these factors (the best of two timings of ``steps`` steps)."""
    run = config_sampler(config, factors, lr=lr, seed=0)
    best = np.inf
    for _ in range(2):
        begin = time.perf_counter()
        for _ in range(steps):
            run.step()
        best = min(best, (time.perf_counter() - begin) / steps)
    return best


class _States:
    """The finite-d initial states of the SGD runs. From the d = ∞ law: a fresh draw per d and seed.
    With a from-file init the state is the file's (the other indices drawn once, as the theory
    starts from them), the same for every seed, at d₁ = the file's d, and at d₂ = 2d₁ the same
    matrices lifted by ``F ⊗ I₂`` — every normalised trace moment unchanged, so the two SGD runs
    differ only by their dimension and the extrapolation in 1/d is at a fixed initial state. A from-file Σ fixes
    the dimensions the same way: d₁ its d, d₂ = 2d₁ with Σ ⊗ I₂ (`data.DataCovariance.eigenvalues`)."""

    def __init__(self, config):
        self.config, self.model = config, config.model
        self.base = config.start_factors()
        self.fixed = self.base is not None
        if self.fixed and self.model.definition.matrices.means(self.base) is not None:  # a kind with a mean
            raise ConfigError(
                "verify lifts a from-file state to 2d by F ⊗ I₂, which changes an untied mean Tr(M)/√d: "
                "verify this configuration with a gaussian init of the same law"
            )
        d = self.model.definition.matrices.dimension(self.base[0]) if self.fixed else config.data().file_dimension
        self.dims = (d, 2 * d) if d is not None else None

    def factors(self, d, seed):
        if not self.fixed:
            return initial_factors(self.model, self.config.inits(), d, seed, self.config.data())
        lift = 2 if d == self.dims[1] else 1
        return [_lifted(f, lift) for f in self.base]


def _lifted(factor, times):
    if times == 1:
        return factor
    if isinstance(factor, tuple):
        return tuple(_lifted(f, times) for f in factor)
    return np.kron(factor, np.eye(times))
