"""The notebook API: one call per job, each taking a configuration and returning an object with
``to_pandas()``, ``plot()`` and ``to_json()``.

>>> import momentgen as mg
>>> cfg = mg.load_config("fig4_linear", integrate={"T": 0.02, "points": 5})
>>> res = mg.solve(cfg, closure="quadrature", degree=9)
>>> res.status, res.to_pandas().shape
('ok', (5, 9))

Every function accepts what `load_config` accepts (a path, a dict, an example's name or a
`Config`) plus per-table overrides, e.g. ``mg.solve("fig4_linear", truncation={"degree": 6})``.
Times are on the kind's axis (tied t = 4nη/d; untied slow phase, direct, symmetric τ = nη/d).
SGD runs with one BLAS thread (on 2-core machines two threads made it up to 16× slower).
"""

import copy
import difflib
import itertools
import math
import os
import tempfile
import warnings
from functools import partial

import numpy as np
from threadpoolctl import threadpool_limits

from ..core.errors import shown
from ..core.parallel import check_n_jobs, check_scheduler
from ..core.store import open_store
from ..dynamics.closures import solve_with_closure, vouching_closure
from ..dynamics.results import Result
from ..evidence import comparison as _compare
from ..evidence import verification as _verify
from ..reference.from_config import simulate_config
from ..setting.arguments import int_list, names, seed_list
from ..setting.config import ConfigError, load_config, parse_config

__all__ = ["load_config", "solve", "simulate", "compare", "verify", "sweep", "stored", "Comparison", "Sweep"]


def _config(config, overrides, finite_lr=None):
    config = load_config(config, **overrides)
    return config.replace(integrate={"finite_lr": True}) if _flag(finite_lr, "finite_lr") else config


def _flag(value, name):
    if value is not None and not isinstance(value, bool):
        raise ConfigError(f"{name} must be True, False or None, got {shown(value)}")
    return value


def solve(
    config,
    closure=None,
    degree=None,
    size=None,
    finite_lr=None,
    times=(),
    spectra=False,
    cache=None,
    estimate=True,
    n_jobs=None,
    **overrides,
):
    """The d = ∞ training curve of a configuration, with how far it can be trusted.

    Parameters
    ----------
    config : str, path, dict or Config
        A TOML file's path, a dict of tables, a shipped example's name (`momentgen.examples.names`) or a `Config`.
    closure : {"zero", "riccati", "quadrature", "matrix-model"}, optional
        The closure; default ``[truncation] closure``. Where none is named (``closure`` and ``degree`` None) and
        the configured one's window ends before the horizon — a zero closure, or any but the matrix model on a
        Gaussian factor against a data covariance Σ — the closure that vouches for the horizon is run instead
        (`momentgen.dynamics.closures.vouching_closure`, as `verify` does) and the message says so.
    degree, size : int, optional
        ``[truncation] degree`` (the quadrature closure's order is ⌊(degree − 1)/2⌋) and the matrix model's n.
    finite_lr : bool, optional
        Add the finite-learning-rate term at κ = lr·d/batch of ``[sgd]``.
    times : list of float, optional
        Extra output times in [0, T] (at most `MAX_OUTPUT_TIMES`).
    spectra : bool, default False
        Record the trainable letters' spectra for `Result.spectrum` (quadrature and matrix-model closures).
    cache : bool or path, optional
        A folder of the result store (`momentgen.core.store`; True: the default one): a stored run is read back.
    estimate : bool, default True
        False: the quadrature and matrix-model closures run only the leg they report, not those that check it — the
        same curve without the checking legs' cost (most of it for the quadrature closure's Gauss–Radau and lower
        orders and for the stochastic model's second noise seed, little for one matrix model's n/2 leg), with no
        estimate, status ``unverified``, and no switch to a closure that vouches: a sweep's quick look.
    n_jobs : int, optional
        The processes a matrix-model ensemble's draws run on (default 2: this one and a worker). The draws are the
        same on any number, so is the result (and its key in the store); on a machine with more cores, more of them
        divide the draws' time (an ensemble of 8 + 4 draws takes at most 12).
    **overrides
        Tables of keys to change, validated like the file's, e.g. ``integrate={"T": 0.5}``.

    Returns
    -------
    Result
        The curve on the kind's time axis (t, or τ), its status, window and error estimate.

    Raises
    ------
    ConfigError
        A bad configuration or argument (one line naming the key and what to change).

    Examples
    --------
    >>> res = mg.solve("fig4_linear", closure="quadrature", degree=5, integrate={"T": 0.01, "points": 3})
    >>> res.closure, round(float(res.series["S1 S1"][-1]), 2)
    ('quadrature', 1.79)
    >>> res.to_pandas().shape
    (3, 9)
    """
    times, spectra = _times(times), _flag(spectra, "spectra")
    estimate = _flag(estimate, "estimate") is not False
    check_n_jobs(n_jobs)
    config = _config(config, overrides, finite_lr)
    arguments = {"closure": closure, "degree": degree, "size": size, "times": list(times), "spectra": spectra}
    arguments |= {} if estimate else {"estimate": False}  # the store's keys of runs with estimates stay as they were
    compute = partial(_solve, config, closure, degree, size, times, spectra, estimate, n_jobs)
    return stored(cache, "solve", config, arguments, compute, Result.to_store, Result.from_store)


def _solve(config, closure, degree, size, times, spectra, estimate, n_jobs):
    result = solve_with_closure(
        config, closure, degree, size, times=times, spectra=spectra, estimate=estimate, n_jobs=n_jobs
    )
    if closure is not None or degree is not None or not estimate:
        return result
    chosen, note = vouching_closure(config, result)
    if note is None:
        return result
    result = solve_with_closure(chosen, size=size, times=times, spectra=spectra, n_jobs=n_jobs)
    result.message = f"{note}; {result.message}"
    return result


def stored(cache, job, config, arguments, compute, encode, decode):
    """``compute()`` through the result store of ``cache`` (`momentgen.core.store`): a stored payload is decoded, else
    the result is computed, encoded and filed under the key of ``job``, ``config`` and ``arguments``."""
    store = open_store(cache)
    if store is None:
        return compute()
    key = store.key(job, config, **arguments)
    payload = store.get(key)
    if payload is not None:
        return decode(payload)
    result = compute()
    store.put(key, job, encode(result))
    return result


#: the most extra output times `solve` takes (each costs the risk and the spectra at one more state; the grid of
#: ``[integrate] points`` is the way to a fine uniform grid)
MAX_OUTPUT_TIMES = 1000


def _times(times):
    """Extra output times as a tuple of floats (a list, tuple or array of at most `MAX_OUTPUT_TIMES` numbers)."""
    if isinstance(times, (str, bytes, dict)) or not isinstance(times, (list, tuple, range, np.ndarray)):
        raise ConfigError(f"times must be a list of numbers, got {shown(times)}")
    if len(times) > MAX_OUTPUT_TIMES:
        raise ConfigError(
            f"times has {len(times)} extra output times; the limit is {MAX_OUTPUT_TIMES}: for a fine uniform grid "
            "set [integrate] points instead"
        )
    return tuple(times.tolist() if isinstance(times, np.ndarray) else times)


def simulate(config, d=None, seeds=None, progress=None, cache=None, **overrides):
    """Online SGD on a configuration: the reference the theory predicts, as a `Result`.

    Parameters
    ----------
    config : str, path, dict or Config
        As in `solve`.
    d : int, optional
        The dimension (default ``[sgd] d``).
    seeds : int or list of int, optional
        A count or the seeds (default ``[sgd] seeds``); the result is their mean.
    progress : bool, optional
        A progress bar (None: in a terminal or notebook only).
    cache : bool or path, optional
        The result store, as `solve`'s (the seeds are part of the configuration, so of the key).
    **overrides
        Tables of keys to change.

    Returns
    -------
    Result
        Closure ``"sgd"``; ``derived["risk"]`` the risk on fresh samples and ``extra["risk_se"]`` its standard
        error, ``extra["spread"]`` the standard deviation over seeds, ``extra["d"]``, ``extra["lr"]``…

    Examples
    --------
    >>> sgd = mg.simulate("fig4_linear", d=40, seeds=[0], progress=False, integrate={"T": 0.01, "points": 3})
    >>> sgd.closure, sgd.extra["d"], sgd.status
    ('sgd', 40, 'ok')
    """
    config = _config(config, overrides)
    sgd_overrides = {"d": d, "seeds": None if seeds is None else seed_list(seeds)}
    sgd_overrides = {k: v for k, v in sgd_overrides.items() if v is not None}
    config = config.replace(sgd=sgd_overrides) if sgd_overrides else config
    compute = partial(_simulate, config, _flag(progress, "progress"))
    return stored(cache, "simulate", config, {}, compute, Result.to_store, Result.from_store)


def _simulate(config, progress):
    with threadpool_limits(1, "blas"):
        data = simulate_config(config, progress=progress)
    t = np.asarray(data["t"])
    return Result(
        model=data["model"],
        closure="sgd",
        time_scale=data["time_scale"],
        t=t,
        series={w: np.asarray(v) for w, v in data["series"].items()},
        derived={k: np.asarray(data[k]) for k in ("risk", "excess_risk") if k in data},
        status=data["status"],
        message=data["message"],
        valid_until=float(t[-1]) if len(t) else 0.0,
        extra={
            k: data[k]
            for k in (
                "spread",
                "risk_se",
                "excess_risk_se",
                "d",
                "lr",
                "momentum",
                "batch",
                "seeds",
                "steps",
                "t_reached",
                "seconds",
            )
            if k in data
        },
        config_hash=data["config_hash"],
        kappa=data["lr"] * data["d"] / data["batch"],
    )


class Comparison(dict):
    """`comparison.compare`'s output (a dict: ``theory``, ``sgd``, ``flow``, ``table``…, and ``note``: why
    another closure than the configured one was run, or None) with ``to_pandas()`` (the sup-error table, the note in
    its ``attrs``), ``to_json()`` and ``figure`` (the written figure's path)."""

    def to_pandas(self):
        """The sup-error table: one row per observable, comparison (theory–SGD, theory–flow, flow–SGD), theory and
        d; the note in ``attrs``."""
        import pandas  # noqa: PLC0415 - optional at import time

        frame = pandas.DataFrame(self["table"])
        frame.attrs["note"] = self.get("note")
        return frame

    def to_json(self):
        """The comparison as a JSON-ready dict (what ``compare.json`` holds)."""
        return dict(self)

    def _repr_html_(self):
        """What a notebook shows: the note, where the figure is, and the sup errors (theory vs SGD first)."""
        from ..core.display import summary_html  # noqa: PLC0415

        table = sorted(self["table"], key=lambda row: row["comparison"] != "theory-sgd")
        rows = [(r["observable"], r["comparison"], r["theory"], r["d"], r["sup_error"]) for r in table]
        lines = [("figure", getattr(self, "figure", None)), ("note", self.get("note"))]
        header = ("observable", "comparison", "theory", "d", "sup error")
        return summary_html(f"compare: {self['model']}", lines, header, rows)


def compare(
    config,
    degrees=None,
    dims=None,
    seeds=None,
    out=None,
    closures=None,
    theory_init="finite",
    finite_lr=None,
    cache=None,
    **kw,
):
    """Theory (per degree and closure) against online SGD and the finite-d matrix flow (per d).

    Parameters
    ----------
    config : str, path, dict or Config
        As in `solve`.
    degrees, dims, seeds : list of int, optional
        Default: the configuration's degree, d and seeds.
    out : path, optional
        Where ``compare.png``/``.svg``/``.pdf``/``.json`` and ``compare.csv`` go (a temporary folder when None).
    closures : list of str, optional
        Default: the configured closure, or the one that vouches for the horizon (as `solve`).
    theory_init : {"finite", "infinite"}, default "finite"
        Start the theory from each d's SGD matrices (the d = ∞ start makes a right theory look wrong at small d).
    finite_lr : bool, optional
        As in `solve`.
    cache : bool or path, optional
        The result store, as `solve`'s (a stored comparison's figure and table are written to ``out`` again).
    **kw
        ``scheduler`` (a Dask address), ``n_jobs``, or tables of keys to change.

    Returns
    -------
    Comparison
        The curves, the sup-error table (``to_pandas()``), ``note`` and ``figure``.
    """
    check_n_jobs(kw.get("n_jobs"))  # arguments first: a bad one is an error before anything runs
    check_scheduler(kw.get("scheduler"))
    overrides = {k: v for k, v in kw.items() if k not in ("scheduler", "n_jobs")}
    config = _config(config, overrides, finite_lr)
    degrees = [config.settings.truncation.degree] if degrees is None else int_list(degrees, "degrees")
    dims = [config.settings.sgd.d] if dims is None else int_list(dims, "dims")
    named = None if closures is None else names(closures, "closures")
    for closure in named or ():  # every value passes the file's own validation
        config.replace(truncation={"closure": closure})
    for degree in degrees:
        config.replace(truncation={"degree": degree})
    for d in dims:
        config.replace(sgd={"d": d})
    seeds = (
        config.settings.sgd.seeds
        if seeds is None
        else config.replace(sgd={"seeds": seed_list(seeds)}).settings.sgd.seeds
    )
    if theory_init not in ("finite", "infinite"):
        raise ConfigError(f"theory_init must be 'finite' or 'infinite', got {shown(theory_init)}")
    if out is not None and not str(out).strip():
        raise ConfigError("out is empty: name a folder, or None for a temporary one")
    out = out or tempfile.mkdtemp(prefix="momentgen-compare-")
    arguments = {"degrees": degrees, "dims": dims, "seeds": list(seeds), "closures": named, "theory_init": theory_init}
    compute = partial(_compare_run, config, degrees, dims, seeds, out, named, theory_init, kw)
    result = stored(cache, "compare", config, arguments, compute, dict, partial(_stored_comparison, config, out))
    result.figure = f"{out}/compare.png"
    return result


def _compare_run(config, degrees, dims, seeds, out, named, theory_init, kw):
    """`momentgen.evidence.comparison.compare` with the named closures, or the one that vouches for the horizon."""
    note = None
    if named is None:  # the configured closure, or the one that vouches for the horizon (`solve`'s rule)
        config, note = vouching_closure(config, solve_with_closure(config, degree=degrees[0]))
    data = _compare.compare(
        config, degrees, dims, seeds, out, scheduler=kw.get("scheduler"), n_jobs=kw.get("n_jobs"),
        closures=named or [config.settings.truncation.closure], theory_init=theory_init,
    )  # fmt: skip
    return Comparison({**data, "note": note})


def _stored_comparison(config, out, payload):
    """A stored comparison, its table and figure written to ``out`` again from its numbers."""
    return Comparison(_compare.write_outputs(payload, out, config))


def verify(
    config,
    dims=(100, 200),
    seeds=tuple(range(8)),
    steps=2000,
    kappa=None,
    out=None,
    progress=True,
    closure=None,
    budget=None,
    n_jobs=None,
    cache=None,
    **overrides,
):
    """Independent evidence for a configuration: four checks against online SGD and a verdict.

    Parameters
    ----------
    config : str, path, dict or Config
        As in `solve`.
    dims : (int, int), default (100, 200)
        The two dimensions of the SGD references (a from-file state or Σ fixes them: d_file and 2·d_file).
    seeds : int or list of int, default 8 seeds
        SGD seeds of the finite-d leg.
    steps : int, default 2000
        SGD steps of the drift check per d.
    kappa : float, optional
        κ = ηd/B of every SGD run (default the configuration's).
    out : path, optional
        A folder for ``verify.json``, ``verify.csv`` and ``verify.png``.
    progress : bool, default True
        One line per leg on stderr.
    closure : str, optional
        The closure to verify (default the configuration's, replaced by a whole-curve one when a zero closure's
        window ends before the horizon).
    budget : float, optional
        Seconds: seeds, drift steps and, if need be, smaller dimensions are chosen to fit.
    n_jobs : int, optional
        Processes of the seeds and of a matrix-model ensemble's draws (default 2).
    cache : bool or path, optional
        The result store, as `solve`'s; a stored verdict's ``verify.json`` and ``verify.csv`` are written to
        ``out`` again (its figure is the first run's).
    **overrides
        Tables of keys to change.

    Returns
    -------
    Verification
        ``verdict`` ("agree", "disagree", "cannot verify"), ``message`` and every check's numbers.

    Raises
    ------
    ConfigError
        A bad argument, before anything runs.
    """
    config = _config(config, overrides)
    arguments = {"dims": _plain_list(dims), "seeds": _plain_list(seeds), "steps": steps, "kappa": kappa,
                 "closure": closure, "budget": budget}  # fmt: skip
    compute = partial(_verify_run, config, dims, seeds, steps, kappa, out, _flag(progress, "progress"), closure,
                      budget, n_jobs)  # fmt: skip
    return stored(cache, "verify", config, arguments, compute, _verify.Verification.to_json,
                  partial(_stored_verification, out))  # fmt: skip


def _plain_list(value):
    """A list or count argument as the key reads it (validation is the run's: a bad value never reaches a key)."""
    return list(value) if isinstance(value, (list, tuple, range, np.ndarray)) else value


def _verify_run(config, dims, seeds, steps, kappa, out, progress, closure, budget, n_jobs):
    with threadpool_limits(1, "blas"):
        return _verify.verify(
            config, dims, seeds, steps=steps, kappa=kappa, out=out,
            progress=progress, closure=closure, budget=budget, n_jobs=n_jobs,
        )  # fmt: skip


def _stored_verification(out, payload):
    result = _verify.Verification(**payload)
    if out is not None:
        _verify.write_summary(out, result)
    return result


class Sweep(list):
    """The runs of `sweep`: a list of ``(parameters, result)`` pairs.

    ``to_pandas()`` stacks every run's frame with the swept parameters as extra index levels; ``to_xarray()`` makes
    them dimensions beside ``t``.
    """

    def to_pandas(self):
        """Every run's `Result.to_pandas` frame stacked, the swept parameters as extra index levels before ``t``."""
        import pandas  # noqa: PLC0415 - optional at import time

        if not self:
            return pandas.DataFrame()
        frames = []
        for parameters, result in self:
            frame = result.to_pandas().reset_index()
            for name, value in parameters.items():
                frame.insert(0, name, value)
            frames.append(frame)
        return pandas.concat(frames, ignore_index=True).set_index([*self[0][0], "t"])

    def to_xarray(self):
        """An `xarray.Dataset` whose dimensions are the swept parameters and ``t`` (a run's missing times are NaN),
        one variable per column of `to_pandas` (``vouched`` as 1/0). Needs xarray."""
        from ..core.display import require_xarray  # noqa: PLC0415

        xarray = require_xarray()
        frame = self.to_pandas()
        if "vouched" in frame:
            frame = frame.assign(vouched=frame["vouched"].astype(float))
        return xarray.Dataset.from_dataframe(frame)


JOBS = {"solve": solve, "simulate": simulate}


def sweep(config, grid, job="solve", n_jobs=None, scheduler=None, **options):
    """Run `solve` or `simulate` over the product of a grid of parameters, in parallel.

    Parameters
    ----------
    config : str, path, dict or Config
        As in `solve`; relative file paths are read from its folder at every point.
    grid : dict
        ``{"table.key": [values]}``, e.g. ``{"model.gamma": [0.0, 0.1], "init.1.scale": [0.5, 1.0]}``.
    job : {"solve", "simulate"}, default "solve"
    n_jobs : int, optional
        Local worker processes (joblib).
    scheduler : str, optional
        A Dask scheduler ``tcp://host:port`` instead of local processes.
    **options
        Arguments of the job, e.g. ``closure="quadrature"``; ``cache=…`` stores each point as it ends, so an
        interrupted sweep resumes where it stopped.

    Returns
    -------
    Sweep
        ``(parameters, result)`` pairs, with ``to_pandas()`` and ``to_xarray()``.

    Examples
    --------
    >>> runs = mg.sweep("fig4_linear", {"model.gamma": [0.0, 0.1]}, closure="zero", degree=4, n_jobs=1,
    ...                 integrate={"T": 0.01, "points": 3})
    >>> len(runs), runs[1][0]
    (2, {'model.gamma': 0.1})
    >>> runs.to_pandas().index.names
    FrozenList(['model.gamma', 't'])
    """
    if job not in JOBS:
        raise ConfigError(f"sweep runs one of {', '.join(JOBS)}, got {shown(job)}")
    check_n_jobs(n_jobs)
    check_scheduler(scheduler)
    open_store(options.get("cache"))  # a bad cache argument fails here, not in every worker
    config = load_config(config)
    names = _grid_names(grid)
    count = math.prod(len(grid[n]) for n in names)
    if count > MAX_SWEEP_POINTS:
        raise ConfigError(
            f"the grid has {count:.3g} points (the product of its lists' lengths); the limit is "
            f"{MAX_SWEEP_POINTS}: sweep fewer values, or split the sweep"
        )
    points = [dict(zip(names, values)) for values in itertools.product(*(grid[n] for n in names))]
    configs = [_changed_config(config, point) for point in points]  # every point validated before anything runs
    _warn_carried_warmup(config, grid)
    tasks = [(_sweep_task, (changed, job, options)) for changed in configs]
    results = _compare.run_tasks(tasks, n_jobs=n_jobs, scheduler=scheduler)
    return Sweep(zip(points, results))


#: the most points a sweep grid may have (each point is a full run)
MAX_SWEEP_POINTS = 10_000


def _grid_names(grid):
    """The grid's parameter names, after checking its shape: a non-empty dict of "table.key" → non-empty list."""
    if not isinstance(grid, dict) or not grid:
        raise ConfigError('a sweep grid is a non-empty dict {"table.key": [values]}, e.g. {"model.gamma": [0.0, 0.1]}')
    for name, values in grid.items():
        if not isinstance(name, str):
            raise ConfigError(f'sweep parameter names are strings "table.key", got {shown(name)}')
        if isinstance(values, (str, bytes, dict)) or not isinstance(values, (list, tuple, range, np.ndarray)):
            raise ConfigError(
                f"sweep parameter {name!r} needs a list of values, e.g. [{shown(values)}], got {shown(values)}"
            )
        if not len(values):
            raise ConfigError(f"sweep parameter {name!r} has no values")
    return list(grid)


def _warn_carried_warmup(config, grid):
    """A sweep over ``sgd.schedule`` keeps the configuration's warm-up in every arm (a warm-up, then that schedule —
    the constant arm too): said once, as a `UserWarning`, unless the grid sets ``sgd.warmup`` itself."""
    warmup = config.settings.sgd.warmup
    if "sgd.schedule" in grid and "sgd.warmup" not in grid and warmup > 0:
        warnings.warn(
            f"sweep over sgd.schedule: every arm keeps the configuration's warmup = {warmup:g} (a linear warm-up, then "
            "the arm's schedule — the constant arm included); add 'sgd.warmup' to the grid to change it",
            UserWarning,
            stacklevel=3,
        )


def _changed_config(config, point):
    """``config`` with the grid ``point``'s keys set, validated, its source kept as an absolute path: a from-file
    path is read relative to the configuration's folder at every point, in whatever folder a worker runs."""
    source = os.path.abspath(config.source) if config.source else None
    given = config.given | {name for name in point if not name.startswith("init.")}
    return parse_config(_changed(config.raw, point), source, given=given)


def _changed(raw, point):
    raw = copy.deepcopy(raw)
    for name, value in point.items():
        *path, key = name.split(".")
        if not path:
            tables = [t for t, keys in raw.items() if t != "init" and key in keys]
            hint = f"; did you mean {tables[0]}.{key}?" if tables else ""
            raise ConfigError(f"sweep parameter {name!r}: write table.key, e.g. model.gamma{hint}")
        table = raw
        for part in path:
            if not isinstance(table, dict) or part not in table:
                near = difflib.get_close_matches(part, list(table) if isinstance(table, dict) else [], n=1)
                hint = f"; did you mean {near[0]!r}?" if near else ""
                raise ConfigError(f"sweep parameter {name!r}: no table {part!r}{hint}")
            table = table[part]
        if key not in table:
            near = difflib.get_close_matches(key, list(table), n=1)
            hint = f"; did you mean {'.'.join(path)}.{near[0]}?" if near else ""
            raise ConfigError(f"sweep parameter {name!r}: no key {key!r} in [{'.'.join(path)}]{hint}")
        table[key] = value.item() if isinstance(value, np.generic) else value
    return raw


def _sweep_task(config, job, options):
    with threadpool_limits(1, "blas"):
        return JOBS[job](config, **options)
