"""The notebook API: one call per job, each taking a configuration and returning an object with
``to_pandas()``, ``plot()`` and ``to_json()``.

>>> import momentgen as mg
>>> cfg = mg.load_config("fig4_linear", integrate={"T": 0.02, "points": 5})
>>> res = mg.solve(cfg, closure="quadrature", degree=9)
>>> res.status, res.to_pandas().shape
('ok', (5, 6))

Every function accepts what `load_config` accepts (a path, a dict, an example's name or a
`Config`) plus per-table overrides, e.g. ``mg.solve("fig4_linear", truncation={"degree": 6})``.
Times are on the kind's axis (tied t = 4nη/d; untied slow phase, direct, symmetric τ = nη/d).
SGD runs with one BLAS thread (on 2-core machines two threads made it up to 16× slower).
"""

import copy
import itertools
import tempfile

import numpy as np
from threadpoolctl import threadpool_limits

from . import comparison as _compare
from . import verification as _verify
from .closures import solve_with_closure
from .config import ConfigError, load_config
from .reference import simulate_config
from .results import Result

__all__ = ["load_config", "solve", "simulate", "compare", "verify", "sweep", "Comparison", "Sweep"]


def _config(config, overrides, finite_lr=None):
    config = load_config(config, **overrides)
    return config.replace(integrate={"finite_lr": True}) if finite_lr else config


def solve(config, closure=None, degree=None, size=None, finite_lr=None, **overrides):
    """The d = ∞ curve with the chosen closure (default ``[truncation] closure``): a `Result`.
    ``finite_lr=True`` adds the finite-learning-rate term at κ = lr·d/batch of ``[sgd]``."""
    return solve_with_closure(_config(config, overrides, finite_lr), closure, degree, size)


def simulate(config, d=None, seeds=None, progress=None, **overrides):
    """Online SGD at ``d`` (default ``[sgd] d``), mean over ``seeds``: a `Result` (closure ``"sgd"``,
    ``extra["spread"]`` the standard deviation over seeds, ``extra["d"]``, ``extra["lr"]``…)."""
    config = _config(config, overrides)
    with threadpool_limits(1, "blas"):
        data = simulate_config(config, d=d, seeds=None if seeds is None else list(seeds), progress=progress)
    t = np.asarray(data["t"])
    return Result(
        model=data["model"],
        closure="sgd",
        time_scale=data["time_scale"],
        t=t,
        series={w: np.asarray(v) for w, v in data["series"].items()},
        derived={},
        status=data["status"],
        message=data["message"],
        valid_until=float(t[-1]) if len(t) else 0.0,
        extra={k: data[k] for k in ("spread", "d", "lr", "batch", "seeds", "steps", "seconds")},
        config_hash=data["config_hash"],
        kappa=data["lr"] * data["d"] / data["batch"],
    )


class Comparison(dict):
    """`momentgen.comparison.compare`'s output (a dict: ``theory``, ``sgd``, ``flow``, ``table``…) with
    ``to_pandas()`` (the sup-error table), ``to_json()`` and ``figure`` (the written figure's path)."""

    def to_pandas(self):
        import pandas  # noqa: PLC0415 - optional at import time

        return pandas.DataFrame(self["table"])

    def to_json(self):
        return dict(self)


def compare(
    config, degrees=None, dims=None, seeds=None, out=None, closures=None, theory_init="finite", finite_lr=None, **kw
):
    """Theory (per degree and closure) vs SGD and the matrix flow (per d): a `Comparison`. Defaults: the
    config's degree, d, seeds and closure; the theory starts from each d's SGD matrices
    (``theory_init="finite"``: the d = ∞ start makes a right theory look wrong at small d). ``out``:
    where ``compare.png``/``.svg``/``.json`` go (a temporary folder when None)."""
    overrides = {k: v for k, v in kw.items() if k not in ("scheduler", "n_jobs")}
    config = _config(config, overrides, finite_lr)
    out = out or tempfile.mkdtemp(prefix="momentgen-compare-")
    data = _compare.compare(
        config,
        degrees or [config.section("truncation")["degree"]],
        dims or [config.section("sgd")["d"]],
        list(seeds) if seeds is not None else config.section("sgd")["seeds"],
        out,
        scheduler=kw.get("scheduler"),
        n_jobs=kw.get("n_jobs"),
        closures=closures or (config.section("truncation")["closure"],),
        theory_init=theory_init,
    )
    result = Comparison(data)
    result.figure = f"{out}/compare.png"
    return result


def verify(
    config, dims=(100, 200), seeds=tuple(range(8)), steps=2000, kappa=None, out=None, progress=True, **overrides
):
    """`momentgen.verification.verify` on a configuration: a `momentgen.verification.Verification`."""
    config = _config(config, overrides)
    with threadpool_limits(1, "blas"):
        return _verify.verify(config, dims, seeds, steps=steps, kappa=kappa, out=out, progress=progress)


class Sweep(list):
    """The runs of `sweep`: a list of ``(parameters, result)``; ``to_pandas()`` stacks every run's
    frame with the parameters as extra index levels."""

    def to_pandas(self):
        import pandas  # noqa: PLC0415 - optional at import time

        frames = []
        for parameters, result in self:
            frame = result.to_pandas().reset_index()
            for name, value in parameters.items():
                frame.insert(0, name, value)
            frames.append(frame)
        return pandas.concat(frames, ignore_index=True).set_index([*self[0][0], "t"])


JOBS = {"solve": solve, "simulate": simulate}


def sweep(config, grid, job="solve", n_jobs=None, scheduler=None, **options):
    """Run ``job`` ("solve" or "simulate") over the product of ``grid`` — ``{"table.key": [values]}``,
    e.g. ``{"model.gamma": [0.0, 0.1], "init.1.scale": [0.5, 1.0]}`` — in parallel with joblib (local
    processes) or, with ``scheduler`` (``tcp://host:port``), on a Dask cluster. ``options`` go to
    the job (e.g. ``closure="quadrature"``). Returns a `Sweep`."""
    if job not in JOBS:
        raise ConfigError(f"sweep runs one of {', '.join(JOBS)}, got {job!r}")
    config = load_config(config)
    names = list(grid)
    points = [dict(zip(names, values)) for values in itertools.product(*(grid[n] for n in names))]
    raws = [_changed(config.raw, point) for point in points]
    for raw in raws:  # every point validated before anything runs
        load_config(raw)
    tasks = [(_sweep_task, (raw, job, options)) for raw in raws]
    results = _compare.run_tasks(tasks, n_jobs=n_jobs, scheduler=scheduler)
    return Sweep(zip(points, results))


def _changed(raw, point):
    raw = copy.deepcopy(raw)
    for name, value in point.items():
        *path, key = name.split(".")
        table = raw
        for part in path:
            if part not in table:
                raise ConfigError(f"sweep parameter {name!r}: no table {part!r} (write table.key, e.g. model.gamma)")
            table = table[part]
        if key not in table:
            raise ConfigError(f"sweep parameter {name!r}: no key {key!r} in [{'.'.join(path)}]")
        table[key] = value
    return raw


def _sweep_task(raw, job, options):
    with threadpool_limits(1, "blas"):
        return JOBS[job](raw, **options)
