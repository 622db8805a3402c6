"""An SGD reference built from a configuration: the one place a run reads its ``[model]``, ``[loss]``, ``[data]``,
``[init.k]`` and ``[sgd]`` keys (`config_sgd` for a whole run, `config_sampler` for steps from given factors,
`config_increments` for the drift check's one-step means), the plan's checks before anything runs
(`check_sgd_plan`) and the seeds of ``momentgen simulate`` (`simulate_config`). Times on the kind's axis, nominal
under a schedule.
"""

import time

import numpy as np

from ..core.errors import MomentgenError
from ..core.parallel import run_tasks
from ..setting.matrices import matrix_bytes
from ..setting.schedules import raw_lr
from .online_sgd import RISK_SAMPLES, SGDRun, mean_increments, sgd, steps_for

__all__ = [
    "check_sgd_plan",
    "config_sgd",
    "config_sampler",
    "config_increments",
    "simulate_config",
    "risk_over_seeds",
    "excess_over_seeds",
]


def check_sgd_plan(config, d=None):
    """Refuse, before anything runs, an SGD reference of ``config`` at ``d`` (default ``[sgd] d``) that
    needs more than ``[sgd] max_steps`` steps per seed, more memory than ``[truncation] max_memory_gb``, or
    whose output grid is finer than one SGD step (two grid times would be labelled with one step's
    values). Returns the steps per seed."""
    sgd_table, integrate = config.settings.sgd, config.settings.integrate
    d = sgd_table.d if d is None else d
    definition, lr = config.model.definition, config.axis_lr
    steps = int(steps_for(config.model, [integrate.T], d, lr)[0])
    if steps > sgd_table.max_steps:
        raise MomentgenError(
            f"the SGD reference at d = {d} needs {steps:.3g} steps per seed to reach {definition.time_symbol} = "
            f"{integrate.T:g} (limit [sgd] max_steps = {sgd_table.max_steps:.3g}): lower [integrate] T, "
            "raise lr, or raise max_steps"
        )
    batch = int(np.ceil(sgd_table.batch * config.schedules()[1].peak))  # the largest batch of a schedule
    memory = matrix_bytes(config.model, d, config.inits(), batch, config.settings.model.L)
    if memory > config.max_bytes:
        raise MomentgenError(
            f"the SGD reference at d = {d} (batch {batch}) needs about {memory / 2**30:.3g} GiB; the "
            f"limit is [truncation] max_memory_gb = {config.max_bytes / 2**30:g}: lower d or batch, or raise the limit"
        )
    spacing = float(np.diff(config.output_times()).min())
    step = 1.0 / definition.steps_per_time(d, lr)
    if step > spacing * (1 + 1e-9):
        fix = (
            f"raise [integrate] log_first to at least {step:.3g} or lower lr"
            if integrate.grid == "log"
            else f"lower [integrate] points to at most {int(integrate.T / step) + 1} or lower lr"
        )
        raise MomentgenError(
            f"one SGD step at d = {d} is {step:.3g} on {definition.time_symbol}, longer than the output spacing "
            f"{spacing:.3g}: SGD cannot be reported at those times; {fix}"
        )
    return steps


def config_sgd(config, *, d, seed, times, words, axis_lr=None, **options):
    """Online SGD of a configuration at ``d`` from the draw of ``seed`` (`sgd` with its [model], [loss], [data],
    [init.k] and [sgd] keys: the one place a run is built from a configuration). ``axis_lr``: run at the step whose
    time axis reads this rate (η/(1 − β) with momentum: a κ chosen by the caller); default ``[sgd] lr``.
    ``options``: the rest of `sgd`'s keywords (``factors``, ``progress``, ``risk_samples``, …)."""
    model_table, table = config.settings.model, config.settings.sgd
    lr = table.lr if axis_lr is None else raw_lr(axis_lr, table.momentum)
    return sgd(config.model, config.loss(), config.inits(), d=d, lr=lr, batch=table.batch, times=times, words=words,
               gamma=model_table.gamma, C=model_table.C, seed=seed, schedules=config.schedules(),
               horizon=config.settings.integrate.T, data=config.data(), momentum=table.momentum,
               nesterov=table.nesterov, **options)  # fmt: skip


def _seed_run(config, d, seed, times, words, fast_times, progress, risk_samples=RISK_SAMPLES):
    """One seed of `simulate_config` (a task for `momentgen.core.parallel.run_tasks`)."""
    return config_sgd(config, d=d, seed=seed, times=times, words=words, progress=progress, fast_times=fast_times,
                      risk_samples=risk_samples)  # fmt: skip


def _integrated_time(config, times):
    """Under a schedule, the integrated time s(t) of the nominal grid (``integrated_t``); else nothing."""
    change = config.time_change()
    return {} if change is None else {"integrated_t": change.integrated(times).tolist()}


def risk_over_seeds(risks, standard_errors):
    """The SGD risk over seeds, from each seed's estimates ``risks`` (seed × time) and their sampling
    ``standard_errors``: ``risk`` (the mean) and ``risk_se`` (the standard error of that mean: over seeds
    when there are several — seed-to-seed and sampling spread together — else the one run's sampling error)."""
    risks = np.asarray(risks, dtype=float)
    se = risks.std(axis=0, ddof=1) / np.sqrt(len(risks)) if len(risks) > 1 else np.asarray(standard_errors[0])
    return {"risk": risks.mean(axis=0).tolist(), "risk_se": np.asarray(se, dtype=float).tolist()}


def excess_over_seeds(infos, reached):
    """``excess_risk`` and ``excess_risk_se`` over seeds (`risk_over_seeds`) from each seed's measurements
    ``infos`` (dicts with ``excess_risk``, ``excess_risk_se``: a loss with label noise), else nothing."""
    if not infos or "excess_risk" not in infos[0]:
        return {}
    risks = [info["excess_risk"][:reached] for info in infos]
    over = risk_over_seeds(risks, [info["excess_risk_se"][:reached] for info in infos])
    return {"excess_risk": over["risk"], "excess_risk_se": over["risk_se"]}


def simulate_config(config, d=None, seeds=None, progress=None, fast_points=41, n_jobs=None):
    """Run ``[sgd]`` for every seed up to ``[integrate] T``; JSON-ready dict (the ``simulate`` output).

    Series are the mean over seeds, ``spread`` their standard deviation; ``risk`` the population risk
    estimated on fresh samples (`RiskProbe`, `RISK_SAMPLES` a time) and ``risk_se`` its standard error.
    Times are on the model's axis, nominal under a ``[sgd] schedule`` (``t`` the grid, ``t_reached`` the
    times of the whole steps measured, within half a step of it; a grid finer than one step is refused
    by `check_sgd_plan`). Kinds with a mean also
    report the means m_k on the fast axis t = nη. ``status`` is "ok", or "diverged" (``message`` says
    at which step) — then the series hold the times every seed reached, and nothing non-finite.
    Several seeds run in parallel on ``n_jobs`` worker processes (default 2, one BLAS thread each; a
    bar of finished seeds), one seed in this process (a bar of its steps).
    """
    sgd_table, integrate = config.settings.sgd, config.settings.integrate
    d = sgd_table.d if d is None else d
    seeds = sgd_table.seeds if seeds is None else seeds
    check_sgd_plan(config, d)
    times = config.output_times()
    words = config.reported_words()
    with_means = config.initial_means() is not None  # a kind with a mean: its fast phase is recorded too
    fast_times = np.linspace(0.0, integrate.fast_T, fast_points) if with_means else None
    began = time.perf_counter()
    if len(seeds) == 1:
        runs = [_seed_run(config, d, seeds[0], times, words, fast_times, progress)]
    else:
        tasks = [(_seed_run, (config, d, seed, times, words, fast_times, False)) for seed in seeds]
        runs = run_tasks(tasks, n_jobs=n_jobs, progress=progress)
    reached = min(len(r.t) for r in runs)
    stack = {w: np.array([r.series[w][:reached] for r in runs]) for w in runs[0].series}
    failed = [r for r in runs if r.status != "ok"]
    out = {
        "model": config.model.kind,
        "time_scale": config.model.time_scale,
        "t": times[:reached].tolist(),
        "series": {w: v.mean(axis=0).tolist() for w, v in stack.items()},
        "spread": {w: v.std(axis=0).tolist() for w, v in stack.items()},
        "steps": runs[0].steps[:reached].tolist(),
        **_integrated_time(config, times[:reached]),
        # when each value was measured: a whole number of steps, within half a step of its grid time
        "t_reached": (runs[0].steps[:reached] / config.model.definition.steps_per_time(d, config.axis_lr)).tolist(),
        "d": d,
        "lr": sgd_table.lr,
        "momentum": sgd_table.momentum,
        "batch": sgd_table.batch,
        "seeds": list(seeds),
        "seconds": sum(r.info["seconds"] for r in runs),  # summed over the seeds (the compute spent)
        "wall_seconds": time.perf_counter() - began,  # what the caller waited (seeds run in parallel)
        "config_hash": config.digest,
        **risk_over_seeds([r.info["risk"][:reached] for r in runs], [r.info["risk_se"][:reached] for r in runs]),
        **excess_over_seeds([r.info for r in runs], reached),
        "status": "diverged" if failed else "ok",
        "message": f"seed {failed[0].info['seed']}: {failed[0].message}" if failed else "reached the horizon",
    }
    if fast_times is not None:
        reached_fast = min(len(r.info["fast_m"]) for r in runs)
        out["fast"] = {
            "t": fast_times[:reached_fast].tolist(),
            "m": np.mean([r.info["fast_m"][:reached_fast] for r in runs], axis=0).tolist(),
            "time_scale": "t = n eta",
        }
    return out


def config_sampler(config, factors, *, lr, seed=0):
    """An `SGDRun` of ``config`` from ``factors`` at the raw step ``lr`` (no momentum): its loss, C, γ, batch and
    Σ, and a generator seeded with ``seed``."""
    table = config.settings.model
    return SGDRun(config.model, config.loss(), table.C, factors, lr, config.settings.sgd.batch, table.gamma,
                  np.random.default_rng(seed), data=config.data())  # fmt: skip


def config_increments(config, factors, *, lr, words, steps, seed=1):
    """`mean_increments` of ``config`` from ``factors`` at the raw step ``lr``: (mean, standard error) over
    ``words`` of ``steps`` independent steps, per unit of the kind's time axis."""
    table = config.settings.model
    return mean_increments(config.model, config.loss(), factors, lr=lr, batch=config.settings.sgd.batch, words=words,
                           steps=steps, gamma=table.gamma, C=table.C, seed=seed, data=config.data())  # fmt: skip
