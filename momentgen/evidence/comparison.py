"""Theory vs finite-d references: the table and figure users put in their papers.

`compare` runs, for one configuration, the truncated hierarchy at each degree (with its
``valid_until``), online SGD at each d (mean and spread over seeds) and the deterministic
matrix flow at each d (from the matrices of the first seed), all on the model's time axis,
and reports sup-errors per observable: theory(M) vs SGD, theory(M) vs flow, flow vs SGD
(over the whole horizon and inside each degree's validity window).

Every run is an independent task. `run_tasks` executes them with joblib — processes on
this machine, or, unchanged, a Dask distributed cluster when a scheduler address is given.
"""

import pathlib
import time

import numpy as np

from ..core import figures
from ..core.files import write_csv
from ..core.parallel import check_n_jobs, check_scheduler, run_tasks
from ..dynamics.closures import CLOSURES, solve_with_closure
from ..dynamics.problem import Problem
from ..dynamics.results import REACHED
from ..models.words import parse
from ..reference.finite_flow import matrix_flow
from ..reference.from_config import check_sgd_plan, excess_over_seeds, risk_over_seeds, simulate_config
from ..setting.config import parse_config
from ..setting.matrices import initial_factors

__all__ = ["compare", "run_tasks", "theory_task", "sgd_task", "flow_task"]


def theory_task(config_raw, source, closure, degree, d=None, seed=None, kappa=None):
    """One theory run (a task): the closure at ``degree``, from the d = ∞ law or — with ``d`` — from the
    matrices the SGD run of ``seed`` starts from; ``kappa``: κ of the finite-learning-rate term (default
    `Config.kappa`). Returns the `Result`'s JSON."""
    config = parse_config(config_raw, source)
    factors = None if d is None else initial_factors(config.model, config.inits(), d, seed, config.data())
    return solve_with_closure(config, closure, degree, factors=factors, kappa=kappa).to_json()


def sgd_task(config_raw, source, d, seed):
    """One SGD run (a task): `momentgen.reference.simulate_config` at ``d`` with one ``seed``."""
    return simulate_config(parse_config(config_raw, source), d=d, seeds=[seed], progress=False)


def flow_task(config_raw, source, d, seed):
    """The finite-d matrix flow (a task) of the matrices the SGD run of ``seed`` starts from, with the
    theory's coefficients from their own order parameters."""
    config = parse_config(config_raw, source)
    factors = initial_factors(config.model, config.inits(), d, seed, config.data())
    problem = Problem.from_config(config, factors)
    start = time.perf_counter()
    result = matrix_flow(
        config.model,
        factors,
        problem.source(config.initial_means()),
        times=problem.times,
        words=problem.words,
        data=config.data(),
    )
    return {
        "t": problem.nominal_times[: len(result.t)].tolist(),  # integrated on the schedule's s, reported on t
        "series": {w: v.tolist() for w, v in result.series.items()},
        "d": d,
        "seconds": time.perf_counter() - start,
        "status": result.status,
    }


def compare(config, degrees, dims, seeds, out, scheduler=None, n_jobs=None, closures=("zero",), theory_init="infinite"):
    """Run theory, SGD and matrix flow; write ``out/compare.json`` and ``out/compare.png``.

    ``closures``: "zero" gives one theory curve per degree, "quadrature" one more (order
    from ``[truncation] degree``), "matrix-model" one more (size from ``[truncation] size``);
    the last two are drawn with their error-estimate bands. ``theory_init``: "infinite" starts the theory from the d = ∞
    initial moments; "finite" starts each zero-closure degree and the quadrature closure from
    the moments of the matrices the first seed's SGD run uses at each d (MATH.md §7), one
    curve per (M, d); the matrix-model closure always starts from the d = ∞ law. With ``[integrate]
    finite_lr`` every theory curve is drawn twice: the ηd/B → 0 hierarchy (κ = 0) and the one with the
    finite-learning-rate term at the SGD runs' own κ = lr·d/batch for each d (one curve per d).
    Returns the JSON-ready dict: ``theory`` {label: solve output}, ``sgd`` {d: mean,
    spread}, ``flow`` {d: series}, ``table``: rows (observable, comparison, theory label,
    degree, d, sup error over [0, T], sup error on [0, valid_until]).
    """
    raw, source = config.raw, config.source
    check_n_jobs(n_jobs)
    check_scheduler(scheduler)
    unknown = sorted(set(closures) - set(CLOSURES))
    if unknown or theory_init not in ("infinite", "finite"):
        raise ValueError(
            f"closures must be among {', '.join(CLOSURES)} (got {unknown}); "
            f"theory_init must be 'infinite' or 'finite' (got {theory_init!r})"
        )
    for d in dims:  # before anything runs: every SGD reference fits its step budget and the grid
        check_sgd_plan(config, d)
    starts = dims if theory_init == "finite" else (None,)
    specs = []
    for name in dict.fromkeys(closures):  # a closure of degrees: one curve per degree; from each start it can take
        closure = CLOSURES[name]
        resolutions = degrees if closure.window_from_degrees else [None]
        specs += [(name, M, d) for M in resolutions for d in (starts if closure.from_finite_start else (None,))]
    specs = _with_kappa(config, specs, dims)
    labels = [_theory_label(config, closure, M, d, kappa) for closure, M, d, kappa in specs]
    tasks = [(theory_task, (raw, source, closure, M, d, seeds[0], kappa)) for closure, M, d, kappa in specs]
    tasks += [(sgd_task, (raw, source, d, s)) for d in dims for s in seeds]
    tasks += [(flow_task, (raw, source, d, seeds[0])) for d in dims]
    start = time.perf_counter()
    results = run_tasks(tasks, n_jobs=n_jobs, scheduler=scheduler)
    theory = dict(zip(labels, results[: len(specs)]))
    for label, (_, _, d, kappa) in zip(labels, specs):
        theory[label]["start_d"] = d  # None: started from the d = ∞ moments
        theory[label]["kappa_d"] = _kappa_dimension(config, d, kappa)  # the d whose κ it carries
    sgd_runs = results[len(specs) : len(specs) + len(dims) * len(seeds)]
    flows = dict(zip(dims, results[len(specs) + len(dims) * len(seeds) :]))
    sgd = {}
    for i, d in enumerate(dims):
        runs = sgd_runs[i * len(seeds) : (i + 1) * len(seeds)]
        reached = min(len(r["t"]) for r in runs)  # a diverged seed stops early (its status says where)
        stack = {w: np.array([r["series"][w][:reached] for r in runs]) for w in runs[0]["series"]}
        sgd[d] = {
            "t": runs[0]["t"][:reached],
            "mean": {w: v.mean(0).tolist() for w, v in stack.items()},
            "spread": {w: v.std(0).tolist() for w, v in stack.items()},
            "steps": runs[0]["steps"][:reached],
            **risk_over_seeds([r["risk"][:reached] for r in runs], [r["risk_se"][:reached] for r in runs]),
            **excess_over_seeds(runs, reached),
            "seconds": sum(r["seconds"] for r in runs),
            "status": next((r["status"] for r in runs if r["status"] != "ok"), "ok"),
            "message": next((r["message"] for r in runs if r["status"] != "ok"), "reached the horizon"),
        }
        if "fast" in runs[0]:
            sgd[d]["fast"] = {"t": runs[0]["fast"]["t"], "m": np.mean([r["fast"]["m"] for r in runs], 0).tolist()}
    words = [
        w
        for w in theory[labels[0]]["series"]  # observables that can move: they hold a trainable letter
        if all(w in s["mean"] for s in sgd.values()) and _moves(config.model, w)
    ]
    table = _table(theory, sgd, flows, words)
    data = {
        "model": config.model.kind,
        "time_scale": config.model.time_scale,
        "theory_labels": labels,
        "theory_init": theory_init,
        "d": list(dims),
        "seeds": list(seeds),
        "observables": words,
        "theory": theory,
        "sgd": sgd,
        "flow": flows,
        "table": table,
        "seconds": time.perf_counter() - start,
        "config_hash": config.digest,
        "lr": config.settings.sgd.lr,
        "batch": config.settings.sgd.batch,
    }
    return write_outputs(data, out, config)


def write_outputs(data, out, config):
    """``out/compare.csv`` (the sup-error table) and the figure with its JSON (`figures.save`); returns ``data`` with
    the provenance of this writing."""
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    table = data["table"]
    write_csv(out / "compare.csv", list(table[0]) if table else [], ([row[k] for k in row] for row in table))
    data = {key: value for key, value in data.items() if key not in ("provenance", "drawn_by", "figure_checks")}
    saved = figures.save(figure(data), out / "compare.png", data, config, formats=("png", "svg", "pdf"), dpi=110,
                         drawn_by="momentgen.comparison:figure")  # fmt: skip
    return {**data, "provenance": saved["provenance"]}


def _with_kappa(config, specs, dims):
    """(closure, M, d, κ) for every spec: κ = 0 only, or — with ``finite_lr`` — also each SGD run's own
    κ = lr·d/batch (for a theory started from d's matrices, that d's) for the closures that carry the term
    (`Closure.carries_finite_lr`)."""
    if not config.kappa:
        return [(*spec, 0.0) for spec in specs]
    out = []
    for closure, M, d in specs:
        out.append((closure, M, d, 0.0))
        if not CLOSURES[closure].carries_finite_lr(config.model):
            continue
        for dim in dims if d is None else (d,):
            out.append((closure, M, d, config.sgd_kappa(dim)))
    return out


def _kappa_dimension(config, d, kappa):
    """The d whose SGD run's κ a theory curve carries (None for κ = 0)."""
    if not kappa:
        return None
    return d if d is not None else int(round(kappa / config.sgd_kappa(1)))


def _theory_label(config, closure, degree, d, kappa=0.0):
    start = f" from d={d}" if d else ""
    return CLOSURES[closure].label(config, degree) + start + (f", κ={kappa:.3g}" if kappa else "")


def _moves(model, word):
    return any(model.alphabet.index(c) in model.trainable for c in parse(word, model))


def _sup(a, b, t, until=None, relative=False):
    """sup |a − b| over the common times (up to ``until``); ``relative``: sup |a − b|/|b| (b the reference)."""
    a, b, t = (np.asarray(x, dtype=float) for x in (a, b, t))
    n = min(len(a), len(b))
    keep = np.ones(n, bool) if until is None else t[:n] <= until + 1e-12
    gap = np.abs(a[:n] - b[:n]) / (np.abs(b[:n]) if relative else 1.0)
    return float(np.nanmax(gap[keep])) if keep.any() and np.isfinite(gap[keep]).any() else float("nan")


def _table(theory, sgd, flows, words):
    rows = []
    for w in words:
        for name, th in theory.items():
            for d in sgd:
                if th["start_d"] not in (None, d):  # a theory started from d's matrices is compared at that d
                    continue
                if th.get("kappa_d") not in (None, d):  # a theory with d's κ is compared with d's SGD run
                    continue
                for label, ref in (("theory-sgd", sgd[d]["mean"][w]), ("theory-flow", flows[d]["series"][w])):
                    rows.append(
                        {
                            "observable": w,
                            "comparison": label,
                            "theory": name,
                            "kappa": th.get("kappa", 0.0),
                            "degree": th["degree"],
                            "d": d,
                            "sup_error": _sup(th["series"][w], ref, th["t"]),
                            "sup_error_valid": _sup(th["series"][w], ref, th["t"], th["valid_until"]),
                            "valid_until": th["valid_until"],
                        }
                    )
        for d in sgd:
            rows.append(
                {
                    "observable": w,
                    "comparison": "flow-sgd",
                    "theory": None,
                    "kappa": None,
                    "degree": None,
                    "d": d,
                    "sup_error": _sup(flows[d]["series"][w], sgd[d]["mean"][w], flows[d]["t"]),
                    "sup_error_valid": None,
                    "valid_until": None,
                }
            )
    return rows + _risk_rows(theory, sgd)


def _risk_rows(theory, sgd):
    """theory − SGD on the population risk, in relative terms (the risk is read on a log scale)."""
    rows = []
    for name, th in theory.items():
        for d, run in sgd.items():
            if "risk" not in run or th["start_d"] not in (None, d) or th.get("kappa_d") not in (None, d):
                continue
            risk = th["derived"]["risk"]
            rows.append(
                {
                    "observable": "risk (relative)",
                    "comparison": "theory-sgd",
                    "theory": name,
                    "kappa": th.get("kappa", 0.0),
                    "degree": th["degree"],
                    "d": d,
                    "sup_error": _sup(risk, run["risk"], th["t"], relative=True),
                    "sup_error_valid": _sup(risk, run["risk"], th["t"], th["valid_until"], relative=True),
                    "valid_until": th["valid_until"],
                }
            )
    return rows


def figure(data):
    """One panel per observable (at most 4): theory curves solid inside the window they vouch for
    (shaded beyond), dotted past it, with their estimate bands; SGD mean ± sd and the matrix flow
    in one marker style per d; the legend outside, on the right. Returns the Figure (`compare` saves it
    with its numbers; an example that runs `compare` exposes this as ``compare_figure``)."""
    words = data["observables"][:4]
    fast = any("fast" in s for s in data["sgd"].values())
    risk = all("risk" in run for run in data["sgd"].values())
    n = len(words) + (1 if fast else 0) + (1 if risk else 0)
    fig, row = figures.new_figure(n, width=4.2, height=3.9)
    axes = [row]
    markers = dict(zip(map(str, data["d"]), figures.MARKERS))  # keyed as in the JSON: by str(d)
    styles = _theory_styles(data)
    for ax, w in zip(axes[0], words):
        windows = [_theory_curve(ax, name, th, w, styles[name]) for name, th in data["theory"].items()]
        horizon = max(max(th["t"]) for th in data["theory"].values())
        if windows and max(windows) < horizon:  # no theory curve vouches for this part
            ax.axvspan(max(windows), horizon, color="0.92", zorder=0, lw=0, label="beyond every window")
        for d, run in data["sgd"].items():
            t, mean, spread = np.array(run["t"]), np.array(run["mean"][w]), np.array(run["spread"][w])
            color = _SGD_COLORS[list(data["sgd"]).index(d) % len(_SGD_COLORS)]
            figures.measured(ax, t, mean, spread, f"online SGD, d = {d} (±1 sd)", marker=markers[str(d)], color=color)
        for d, flow in data["flow"].items():
            figures.measured(ax, flow["t"], flow["series"][w], None, f"matrix flow, d = {d}", marker="x", color="C7")
        ax.set(ylim=_limits(data, w))
        figures.finish(ax, figures.time_label(data["time_scale"]), f"μ({w})", legend=False)
    if risk:
        _risk_panel(axes[0][len(words)], data, markers, styles)
    if fast:
        _fast_panel(axes[0][-1], data)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center", fontsize=7, frameon=False)
    start = "each d's SGD matrices" if data["theory_init"] == "finite" else "the d = ∞ law"
    dims = ", ".join(map(str, data["d"]))
    fig.suptitle(
        f"{data['model']}: η = {data['lr']:g}, B = {data['batch']}, d = {dims}, {len(data['seeds'])} seed(s); "
        f"theory from {start}",
        fontsize=9,
    )
    return fig


#: One hue family per closure (shades by degree or size) and a dash per start d: nine curves stay apart.
_FAMILIES = {"zero": "Blues", "quadrature": "Greens", "matrix-model": "Reds"}
#: SGD per d: dark, distinct colours (with distinct markers), under the theory's lines.
_SGD_COLORS = ("0.15", "tab:brown", "tab:purple", "0.5")


def _theory_styles(data):
    """{theory label: {"color", "ls"}}: a closure's curves share a hue, darker for a finer degree or size; curves
    started from different d differ in dash."""
    import matplotlib  # noqa: PLC0415 - plotting is optional

    starts = sorted({str(th.get("start_d")) for th in data["theory"].values()})
    dashes = dict(zip(starts, ("-", "--", "-.", (0, (5, 1, 1, 1)))))
    styles = {}
    for closure, family in _FAMILIES.items():
        names = [name for name, th in data["theory"].items() if th["closure"] == closure]
        shades = np.linspace(0.45, 0.95, len(names)) if len(names) > 1 else [0.75]
        for name, shade in zip(names, shades):
            start = str(data["theory"][name].get("start_d"))
            styles[name] = {"color": matplotlib.colormaps[family](shade), "ls": dashes.get(start, "-")}
    return styles


def _theory_curve(ax, name, th, w, style):
    t, y = np.array(th["t"]), np.array(th["series"][w])
    reached = th["status"] in REACHED
    until = th["valid_until"] if CLOSURES[th["closure"]].window_from_degrees or not reached else t[-1]
    inside = t <= until + 1e-12
    line = figures.theory(ax, t, y, f"{name} ({th['status']})", valid_until=until, **style)
    if (~inside).any():  # where this curve stops vouching
        ax.axvline(max(until, t[0]), color=line.get_color(), ls=":", lw=0.8)
    estimate = th.get("error_series", {}).get("estimate")
    if estimate is not None and len(estimate) == len(y):  # the closure's own estimate (None where there is none)
        band = np.array([np.nan if e is None else e for e in estimate], float) * np.maximum(1.0, np.abs(y))
        ax.fill_between(t, y - band, y + band, color=line.get_color(), alpha=0.2, lw=0, zorder=2)
    return until


def _risk_panel(ax, data, markers, styles):
    """The population risk on a log axis: each theory's Φ along its curve (dotted past its window), SGD's
    fresh-sample estimate ± 1 standard error per d."""
    for name, th in data["theory"].items():
        t, risk = np.array(th["t"]), np.array(th["derived"]["risk"], dtype=float)
        reached = th["status"] in REACHED
        until = th["valid_until"] if CLOSURES[th["closure"]].window_from_degrees or not reached else t[-1]
        figures.theory(ax, t, risk, None, valid_until=until, **styles[name])
    for k, (d, run) in enumerate(data["sgd"].items()):
        figures.measured(ax, run["t"], run["risk"], run["risk_se"], None, marker=markers[str(d)],
                         color=_SGD_COLORS[k % len(_SGD_COLORS)])  # fmt: skip
    figures.finish(ax, figures.time_label(data["time_scale"]), "population risk", "risk (log scale)", False, True)


def _fast_panel(ax, data):
    for d, run in data["sgd"].items():
        if "fast" in run:
            ax.plot(run["fast"]["t"], np.array(run["fast"]["m"])[:, 0], label=f"SGD m1, d={d}")
    for th in data["theory"].values():
        if "fast_t" in th:
            ax.plot(th["fast_t"], np.array(th["fast_m"])[:, 0], "k--", label="fast ODE")
            break
    figures.finish(ax, "nη (the fast phase's own time)", "mean m1", "untied fast phase")


def _limits(data, w):
    """Every reference and every theory curve inside the window it vouches for (a blow-up past it
    would squash the panel)."""
    values = [v for run in data["sgd"].values() for v in run["mean"][w]]
    values += [v for flow in data["flow"].values() for v in flow["series"][w]]
    for th in data["theory"].values():
        values += [v for t, v in zip(th["t"], th["series"][w]) if t <= max(th["valid_until"], 0.0) + 1e-12]
    low, high = min(values), max(values)
    pad = 0.25 * (high - low) + 1e-3 * max(1.0, abs(high))
    return low - pad, high + pad
