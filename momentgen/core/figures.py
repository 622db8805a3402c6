"""One style for every figure: the theory is what the eye finds first.

Every figure momentgen or an example draws goes through these helpers, so the same thing looks the
same everywhere (docs/figures, `momentgen compare`, `Result.plot`):

* `theory` — a d = ∞ curve (a closure): a solid line on top (z-order 3), dotted past the time the
  closure vouches for (``valid_until``), one legend entry;
* `exact` — a closed form or an oracle: a thick, light line *under* the theory (z-order 1), so a
  closure that agrees with it is seen on it;
* `measured` — online SGD or the finite-d matrix flow: light, open markers with error bars under the
  lines (z-order 2);
* `finish` — axis labels in the words of the paper, and a legend inside the axes where it covers no
  data (`place_legend`: "best" first, then below the axes).

Artists carry their role as ``gid`` (``"theory"``, ``"exact"``, ``"measured"``), which is what
`layout_problems` checks: labels present, theory drawn above the measurements, no legend over data.
"""

import numpy as np

from .errors import MomentgenError

__all__ = [
    "THEORY_Z",
    "EXACT_Z",
    "MEASURED_Z",
    "new_figure",
    "theory",
    "exact",
    "measured",
    "finish",
    "place_legend",
    "time_label",
    "layout_problems",
    "save",
    "draw_again",
    "DRAWERS",
]

EXACT_Z, MEASURED_Z, THEORY_Z = 1, 2, 3
MARKERS = "osD^v<>"


def new_figure(columns=1, rows=1, width=4.6, height=3.6):
    """A `matplotlib.figure.Figure` (no pyplot state) with ``rows × columns`` axes, constrained layout."""
    from matplotlib.figure import Figure  # noqa: PLC0415 - plotting is optional

    figure = Figure(figsize=(width * columns, height * rows), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False)
    return figure, axes if rows > 1 else axes[0]


def theory(ax, t, y, label, valid_until=None, color=None, **style):
    """A d = ∞ curve: solid where its closure vouches for it (t ≤ ``valid_until``), dotted after. Returns the
    solid line (its colour is the curve's)."""
    t, y = np.asarray(t, float), np.asarray(y, float)
    cut = len(t) if valid_until is None else int(np.searchsorted(t, valid_until + 1e-12 * max(1.0, abs(t[-1]))))
    cut = max(cut, 1)
    options = {"lw": 1.8, "zorder": THEORY_Z, "color": color, **style}
    (line,) = ax.plot(t[:cut], y[:cut], label=label, **options)
    line.set_gid("theory")
    if cut < len(t):
        (rest,) = ax.plot(t[cut - 1 :], y[cut - 1 :], **{**options, "color": line.get_color(), "ls": ":"})
        rest.set_gid("theory")
    return line


def exact(ax, t, y, label="closed form (d = ∞)", **style):
    """A closed form or oracle: a thick light band under the theory's lines."""
    (line,) = ax.plot(t, y, label=label, **{"color": "0.55", "lw": 4.5, "alpha": 0.45, "zorder": EXACT_Z, **style})
    line.set_gid("exact")
    return line


def measured(ax, t, y, error=None, label=None, marker="o", color="0.35", **style):
    """Online SGD or the finite-d flow: open markers, with ``error`` bars (e.g. ±1 SE) when given."""
    options = {"fmt": marker, "ms": 3.5, "mfc": "none", "mew": 0.8, "color": color, "alpha": 0.8}
    options.update(elinewidth=0.7, capsize=0, zorder=MEASURED_Z, label=label, **style)
    container = ax.errorbar(t, y, yerr=error, **options)
    for artist in container.get_children():
        artist.set_gid("measured")
    return container


def time_label(time_scale):
    """The x label of a kind's time axis, e.g. ``"t = 4nη/d"`` from ``"t = 4 n eta / d"``."""
    return time_scale.replace(" n eta / d", "nη/d").replace("n eta / d", "nη/d").replace("eta", "η").replace("tau", "τ")


def finish(ax, xlabel, ylabel, title=None, legend=True, log=False, fontsize=8):
    """Labels (in the paper's words), optional log y axis, and a legend that covers no data."""
    if log:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    if legend and ax.get_legend_handles_labels()[0]:
        place_legend(ax, fontsize=fontsize)
    return ax


def place_legend(ax, fontsize=8):
    """The legend at matplotlib's "best" place inside the axes; if that covers data, the same after making
    head-room above the data (a linear y axis grows by a half, a log one by two decades); if that still
    covers data, below the axes, under the x label (`save` keeps it: tight bounding box)."""
    legend = ax.legend(fontsize=fontsize, loc="best", framealpha=0.85)
    _draw(ax.figure)
    if not _covered_points(ax, legend):
        return legend
    low, high = ax.get_ylim()
    ax.set_ylim(low, high * 100 if ax.get_yscale() == "log" else high + 0.5 * (high - low))
    legend.remove()
    legend = ax.legend(fontsize=fontsize, loc="best", framealpha=0.85)
    _draw(ax.figure)
    if _covered_points(ax, legend):
        ax.set_ylim(low, high)
        legend.remove()
        legend = ax.legend(fontsize=fontsize, loc="upper center", bbox_to_anchor=(0.5, -0.22), frameon=False)
    return legend


def _covered_points(ax, legend):
    """How many data marks of the axes lie inside the legend's box (display coordinates, of the figure as last
    drawn: `_draw` it first): the points of its lines and markers, points along its error bars and other line
    collections (five per segment: a bar is data even where it has no marker), and every bar that the box overlaps
    (not only its top)."""
    box = legend.get_window_extent()
    count = 0
    points = [np.asarray(line.get_xydata(), float) for line in ax.get_lines()]
    for collection in ax.collections:
        for segment in getattr(collection, "get_segments", lambda: [])():
            segment = np.asarray(segment, float)
            if len(segment) >= 2:
                steps = np.linspace(0.0, 1.0, 5)[:, None]
                points.append(np.concatenate([a + steps * (b - a) for a, b in zip(segment[:-1], segment[1:])]))
    for xy in points:
        if len(xy):
            x, y = ax.transData.transform(xy).T
            count += int(np.sum((x >= box.x0) & (x <= box.x1) & (y >= box.y0) & (y <= box.y1)))
    for bars in ax.containers:
        if type(bars).__name__ == "BarContainer":
            count += sum(_overlaps(bar.get_window_extent(), box) for bar in bars)
    return count


def _overlaps(a, b):
    """Whether two display boxes share an area (touching edges do not count)."""
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def _draw(figure):
    """Lay the figure out (legend and text extents exist only after a draw)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415 - plotting is optional

    canvas = figure.canvas if isinstance(figure.canvas, FigureCanvasAgg) else FigureCanvasAgg(figure)
    canvas.draw()


def layout_problems(figure):
    """What a reader would trip over, as sentences (empty when none): an axes with data but no x or y label,
    a legend covering data points, measurements drawn above the theory's lines."""
    _draw(figure)
    problems = []
    for number, ax in enumerate(figure.axes):
        if not ax.get_lines() and not ax.collections and not ax.patches:
            continue
        where = f"axes {number} ({ax.get_title() or 'untitled'})"
        if not ax.get_xlabel() or not ax.get_ylabel():
            problems.append(f"{where}: an axis label is missing")
        legend = ax.get_legend()
        covered = _covered_points(ax, legend) if legend is not None else 0
        if covered:
            problems.append(f"{where}: the legend covers {covered} data points")
        theory_z = [a.get_zorder() for a in ax.get_children() if a.get_gid() == "theory"]
        measured_z = [a.get_zorder() for a in ax.get_children() if a.get_gid() == "measured"]
        for container in ax.containers:
            measured_z += [a.get_zorder() for a in container.get_children() if a.get_gid() == "measured"]
        if theory_z and measured_z and min(theory_z) <= max(measured_z):
            problems.append(f"{where}: measurements are drawn above the theory")
    return problems


def save(figure, path, data, config=None, formats=("png",), dpi=120, *, drawn_by):
    """Write ``figure`` (``path``, one file per format) and its numbers ``data`` as ``path.json``, atomically,
    with `momentgen.core.files.provenance`, ``figure_checks`` (the `layout_problems`, empty when the figure reads
    well) and ``drawn_by``: the function that draws it from ``data``, one of `DRAWERS` (tests/core/test_figures.py
    redraws it). Returns what the JSON holds (its ``provenance`` included)."""
    import pathlib  # noqa: PLC0415

    from .files import provenance, save_figure, write_json  # noqa: PLC0415 - files imports no figures

    if drawn_by not in DRAWERS:
        raise ValueError(f"drawn_by {drawn_by!r} is not in figures.DRAWERS: add the drawing function there")
    problems = layout_problems(figure)
    path = pathlib.Path(path)
    save_figure(figure, path, formats=formats, dpi=dpi, bbox_inches="tight")
    sidecar = {**data, "drawn_by": drawn_by, "figure_checks": problems, "provenance": provenance(config)}
    write_json(path.with_suffix(".json"), sidecar)
    return sidecar


#: The functions that may draw a saved figure again, by the name its sidecar gives in ``drawn_by``:
#: ``"module:function"`` of the library, or ``"script:function"`` of a script of the repository (a path relative
#: to its root). A fixed table: a sidecar is data, so it can only *name* one of these — never a module, a
#: function or a file of its own (a JSON-only change must never run code).
DRAWERS = frozenset(
    {
        "momentgen.comparison:figure",
        "momentgen.evolution:spectrum_figure",
        "examples/fig1_softmax.py:learning_curve_figure",
        "examples/fig2_parameterisation.py:figure",
        "examples/fig3_untied.py:figure",
        "examples/fig4_linear.py:figure",
        "examples/finite_lr.py:figure",
        "examples/multihead.py:figure",
        "examples/noise_floors.py:figure",
        "examples/scaling_law.py:figure",
        "examples/schedules.py:figure",
        "examples/weak_recovery.py:figure",
        "examples/wishart_teacher.py:figure",
        "benchmarks/bench_closure_accuracy.py:plot",
    }
)


def draw_again(data, root):
    """The figure of a saved ``data`` (a sidecar `save` wrote), drawn again by the function its ``drawn_by``
    names — one of `DRAWERS`, else a `MomentgenError` and nothing is imported or run. A script's function is
    found under the repository ``root``."""
    import importlib  # noqa: PLC0415
    import importlib.util  # noqa: PLC0415
    import pathlib  # noqa: PLC0415
    import sys  # noqa: PLC0415

    where, function = _registered_drawer(data)
    if not where.endswith(".py"):
        return getattr(importlib.import_module(where), function)(data)
    script = pathlib.Path(root) / where
    sys.path.insert(0, str(script.parent))  # a benchmark imports its `common` module
    try:
        spec = importlib.util.spec_from_file_location(script.stem, script)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(script.parent))
    return getattr(module, function)(data)


def _registered_drawer(data):
    """``(module or script, function)`` of a sidecar's ``drawn_by`` when it is one of `DRAWERS`."""
    name = data.get("drawn_by") if isinstance(data, dict) else None
    if not isinstance(name, str) or name not in DRAWERS:
        raise MomentgenError(
            f"a figure sidecar's drawn_by {name!r} is not one of momentgen's drawing functions "
            f"({', '.join(sorted(DRAWERS))}); a sidecar names one of them and never runs code of its own"
        )
    return tuple(name.split(":"))
