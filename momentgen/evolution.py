"""The spectrum of an attention matrix over time: the closure's reconstruction against SGD's eigenvalues
(the ``momentgen spectrum`` command and `spectrum_evolution`).

The theory side is the configured closure's state (`Result.spectrum`: a smooth CDF and density from the
state's spectral rule); the reference side is one online-SGD run at ``[sgd] d`` whose matrices' eigenvalues
are recorded at the same times (`momentgen.reference.sgd`, its own matrices only). Times are on the
kind's axis (nominal under a schedule).
"""

import pathlib

import numpy as np

from . import figures
from .closures import solve_with_closure
from .errors import MomentgenError
from .reference import check_sgd_plan, sgd
from .spectra import spectral_product

__all__ = ["spectrum_evolution", "write_spectrum"]


def spectrum_evolution(config, letter, times, points=400, with_sgd=True):
    """The spectral distribution of ``letter`` at ``times`` from the configured closure, on one grid ``x``:
    ``{"letter", "of", "t", "x", "cdf": [[…] per time], "density", "cdf_low", "cdf_high", "closure", "status",
    "sgd": {"d", "eigenvalues": [[…] per time]} (with ``with_sgd``)}``."""
    times = [float(t) for t in times]
    of, codes = spectral_product(config.model, letter)
    result = solve_with_closure(config, times=times, spectra=True)
    if "spectra" not in result.extra:
        asked = config.settings.truncation.closure
        if asked != "zero":  # a closed hierarchy is solved exactly as moments: no state holds a spectrum
            raise MomentgenError(
                f"the {config.model.kind} model's hierarchy is closed, so closure = {asked!r} solved its moments "
                'exactly and holds no spectrum: use closure = "matrix-model" for one'
            )
        raise MomentgenError('the zero closure carries no spectrum: use closure = "quadrature" or "matrix-model"')
    reached = [t for t in times if t <= result.t[-1] + 1e-12]
    if len(reached) < len(times):
        raise MomentgenError(
            f"the {result.closure} closure stopped at t = {result.t[-1]:.4g} ({result.status}: {result.message}); "
            f"no spectrum at t = {times[len(reached)]:g}"
        )
    x = _common_grid([result.spectrum(letter, t, points) for t in times], points)
    rebuilt = [result.spectrum(letter, t, x=x) for t in times]  # every time on the one grid
    out = {"letter": letter, "of": of, "t": times, "x": x.tolist(), "closure": result.closure, "status": result.status}
    for key in ("cdf", "density", "cdf_low", "cdf_high"):
        out[key] = [curve[key].tolist() for curve in rebuilt]
    if with_sgd:
        out["sgd"] = _sgd_eigenvalues(config, times, {letter: codes})[letter]
    return out


def _common_grid(curves, points):
    """One x grid covering every time's reconstruction."""
    low = min(curve["x"][0] for curve in curves)
    high = max(curve["x"][-1] for curve in curves)
    return np.linspace(low, high, points)


def _sgd_eigenvalues(config, times, products):
    """One SGD run (``[sgd] d``, the first seed) measured at ``times``: {name: {"d", "seed", "eigenvalues"}}."""
    table, model_table = config.settings.sgd, config.settings.model
    d, seed = table.d, table.seeds[0]
    check_sgd_plan(config, d)
    grid = np.asarray(times, dtype=float)
    run = sgd(config.model, config.loss(), config.inits(), d=d, lr=table.lr, batch=table.batch, times=grid,
              words=list(products), gamma=model_table.gamma, C=model_table.C, seed=seed, progress=False,
              schedules=config.schedules(), horizon=config.settings.integrate.T, spectra=products,
              data=config.data())  # fmt: skip
    return {
        name: {"d": d, "seed": seed, "eigenvalues": [e.tolist() for e in values]}
        for name, values in run.info["spectra"].items()
    }


def _panel_range(x, cdf, eigenvalues=None):
    """The x range a panel shows: where the theory's CDF moves (1e-4 … 1 − 1e-4) and every SGD eigenvalue,
    with a 5 % margin."""
    moving = x[(cdf > 1e-4) & (cdf < 1 - 1e-4)]
    points = [moving.min(), moving.max()] if moving.size else [x[0], x[-1]]
    if eigenvalues is not None and len(eigenvalues):
        points += [float(np.min(eigenvalues)), float(np.max(eigenvalues))]
    low, high = min(points), max(points)
    margin = 0.05 * (high - low) if high > low else 0.05 * max(abs(high), 1.0)
    return low - margin, high + margin


def write_spectrum(data, path, config):
    """``path`` (.json, with provenance) and the figure beside it (.png, `spectrum_figure`)."""
    path = pathlib.Path(path)
    if path.suffix != ".json":
        raise MomentgenError(f"{str(path)!r}: a spectrum is written to a .json path (its figure beside it as .png)")
    data = {**data, "time_scale": config.model.time_scale}
    figures.save(spectrum_figure(data), path.with_suffix(".png"), data, config,
                 drawn_by="momentgen.evolution:spectrum_figure")  # fmt: skip


def spectrum_figure(data):
    """One panel per time: the theory's density over SGD's eigenvalue histogram."""
    times, time_scale = data["t"], data["time_scale"]
    fig, axes = figures.new_figure(len(times), width=3.2, height=3.2)
    x = np.asarray(data["x"])
    for i, (ax, t) in enumerate(zip(axes, times)):
        low, high = _panel_range(
            x, np.asarray(data["cdf"][i]), data.get("sgd", {}).get("eigenvalues", [None] * (i + 1))[i]
        )
        if "sgd" in data:
            values = np.asarray(data["sgd"]["eigenvalues"][i])
            ax.hist(values, bins=40, range=(low, high), density=True, color="0.85", edgecolor="0.6", lw=0.4,
                    zorder=figures.MEASURED_Z, label=f"online SGD's eigenvalues, d = {data['sgd']['d']}")  # fmt: skip
        figures.theory(ax, x, data["density"][i], f"theory ({data['closure']} closure)")
        ax.set_xlim(low, high)
        inside = (x >= low) & (x <= high)
        top = np.percentile(np.asarray(data["density"][i])[inside], 90) if inside.any() else 1.0
        if "sgd" in data:  # an integrable spike at a hard edge must not flatten the rest
            counts, _ = np.histogram(data["sgd"]["eigenvalues"][i], bins=40, range=(low, high), density=True)
            top = max(top, counts.max())
        ax.set_ylim(0, max(top * 1.4, 1e-9))
        title = f"{time_scale.split('=')[0].strip()} = {t:g}"
        figures.finish(ax, f"eigenvalue of {data['of']}", "density", title, legend=i == 0, fontsize=7)
    return fig
