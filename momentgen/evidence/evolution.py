"""The spectrum of an attention matrix over time: the closure's reconstruction against SGD's eigenvalues
(the ``momentgen spectrum`` command and `spectrum_evolution`).

The theory side is the configured closure's state (`Result.spectrum`: a smooth CDF and density from the
state's spectral rule); the reference side is one online-SGD run at ``[sgd] d`` whose matrices' eigenvalues
are recorded at the same times (`momentgen.reference.online_sgd`, its own matrices only). Times are on the
kind's axis (nominal under a schedule).
"""

import pathlib

import numpy as np

from ..core import figures
from ..core.errors import MomentgenError
from ..dynamics.closures import solve_with_closure
from ..reference.from_config import check_sgd_plan, config_sgd
from ..setting.spectra import spectral_product

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
    table = config.settings.sgd
    d, seed = table.d, table.seeds[0]
    check_sgd_plan(config, d)
    grid = np.asarray(times, dtype=float)
    run = config_sgd(config, d=d, seed=seed, times=grid, words=list(products), progress=False, spectra=products)
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
    """Two rows, one column per time. Top: the theory's density over SGD's eigenvalue histogram, the y axis set by
    the histogram and the bulk of the theory (an integrable spike at a hard edge or an atom runs out of the frame,
    marked by an arrow at its place). Bottom: the CDFs — the theory's with the band its spectral rule certifies
    (``cdf_low`` … ``cdf_high``), and SGD's empirical one — where a spike or an atom reads as a step."""
    times, time_scale = data["t"], data["time_scale"]
    fig, axes = figures.new_figure(len(times), 2, width=3.2, height=2.9)
    x = np.asarray(data["x"])
    for i, (top_ax, cdf_ax) in enumerate(zip(*axes)):
        eigenvalues = np.asarray(data["sgd"]["eigenvalues"][i]) if "sgd" in data else None
        low, high = _panel_range(x, np.asarray(data["cdf"][i]), eigenvalues)
        title = f"{time_scale.split('=')[0].strip()} = {times[i]:g}"
        _density_panel(top_ax, data, i, x, eigenvalues, (low, high), title)
        _cdf_panel(cdf_ax, data, i, x, eigenvalues, (low, high))
    return fig


def _density_panel(ax, data, i, x, eigenvalues, limits, title):
    low, high = limits
    if eigenvalues is not None:
        ax.hist(eigenvalues, bins=40, range=(low, high), density=True, color="0.85", edgecolor="0.6", lw=0.4,
                zorder=figures.MEASURED_Z, label=f"online SGD's eigenvalues, d = {data['sgd']['d']}")  # fmt: skip
    density = np.asarray(data["density"][i])
    figures.theory(ax, x, density, f"theory ({data['closure']} closure)")
    ax.set_xlim(low, high)
    inside = (x >= low) & (x <= high)
    top = np.percentile(density[inside], 90) if inside.any() else 1.0
    if eigenvalues is not None:  # an integrable spike at a hard edge must not flatten the rest
        top = max(top, np.histogram(eigenvalues, bins=40, range=(low, high), density=True)[0].max())
    top = max(top * 1.4, 1e-9)
    ax.set_ylim(0, top)
    if inside.any() and density[inside].max() > top:  # the spike's place, since its height is off the frame
        peak = x[inside][np.argmax(density[inside])]
        ax.annotate("", (peak, top), (peak, 0.8 * top), arrowprops={"arrowstyle": "->", "color": "C0", "lw": 0.8})
    figures.finish(ax, f"eigenvalue of {data['of']}", "density", title, legend=i == 0, fontsize=6)


def _cdf_panel(ax, data, i, x, eigenvalues, limits):
    ax.fill_between(x, data["cdf_low"][i], data["cdf_high"][i], color="C0", alpha=0.25, lw=0, zorder=figures.EXACT_Z,
                    label="band the rule certifies")  # fmt: skip
    figures.theory(ax, x, data["cdf"][i], "theory")
    if eigenvalues is not None:
        values = np.sort(eigenvalues)
        (line,) = ax.step(values, np.arange(1, len(values) + 1) / len(values), where="post", color="0.35", lw=0.9,
                          zorder=figures.MEASURED_Z, label="SGD (empirical)")  # fmt: skip
        line.set_gid("measured")
    ax.set_xlim(*limits)
    ax.set_ylim(-0.02, 1.02)
    figures.finish(ax, f"eigenvalue of {data['of']}", "CDF", None, legend=i == 0, fontsize=6)
