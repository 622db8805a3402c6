"""`verify`: independent evidence that a configuration's curve is right, with a verdict.

Four checks, in order; the verdict is ``agree`` when each passes, else ``disagree`` naming the
first that fails:

1. **drift** (t = 0, the sharpest test of every coefficient): the theory's right-hand side at the
   moments of finite-d matrices against the mean one-step change of each observable measured on
   online SGD from those same matrices (`momentgen.reference.mean_increments`: only the loss and
   the sampler — independent of the theory's coefficient code), at two dimensions d₁ < d₂ and
   the same κ = ηd/B. The theory carries the finite-learning-rate term at that κ (SGD has it);
   the gap is extrapolated linearly in 1/d to d = ∞ and must be within 4 standard errors plus
   1 % of the drift (the O(1/d²) rest).
2. **closure**: the configured closure must reach the horizon and vouch for it — the zero closure
   inside its validity window (degrees M, M − 2), a flow closure with its estimate.
3. **cross-check**: a second closure (quadrature for the zero closure, the zero closure for a flow
   closure) must agree with the first within their own error bounds on the window both vouch for.
4. **finite-d**: online SGD at d₁ and d₂ (seeds averaged, the same κ, so lr ∝ 1/d) on the whole
   horizon, each run paired with the closure started from the run's own initial matrices (the
   draw's O(1/√d) fluctuations cancel in the pair); the mean gap SGD − theory is extrapolated
   linearly in x = 1/d (x = 1/√d for a kind with a mean) and must vanish within
   max(4, t₀.₉₉₉₅(seeds − 1)) standard errors (a Student-t quantile: the SE of a few seeds is
   itself uncertain) plus the next-order allowance |ext − gap(d₂)|·x₂/x₁, the closures' own
   estimates and, for a theory without the finite-learning-rate term, the O(κ) bias bound
   2·t·|Δdrift| (Δdrift: the term's share of the drift at t = 0).

Independent legs: drift (SGD side) and finite-d (SGD). The theory legs (closure, cross-check) are
consistency checks of the theory with itself. A from-file init fixes the state: the SGD runs start
from it at its d and, lifted by F ⊗ I₂ (every moment unchanged), at 2d. Kinds with a mean (untied)
skip the drift check: at
t = 0 their mean is not yet slaved (the fast phase), so a slow drift is not defined there.
Times are on the kind's axis (tied t = 4nη/d; others τ = nη/d).
"""

import pathlib
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import scipy.stats
from matplotlib.figure import Figure

from .closures import solve_with_closure
from .config import ConfigError
from .errors import ModelError, MomentgenError
from .files import PAPER_FORMATS, provenance, save_figure, write_json
from .hierarchy import build
from .initial import empirical_moments
from .matrices import initial_factors
from .potential import Potential
from .reference import check_sgd_plan, mean_increments, sgd
from .truncation import Truncation
from .words import parse

__all__ = ["verify", "Verification"]

#: agreement in standard errors of the drift check (thousands of steps: a Gaussian SE)
SIGMAS = 4.0
#: the drift check's allowance for the O(1/d²) rest, relative to the drift
DRIFT_REST = 0.01


@dataclass
class Verification:
    """The verdict (``agree`` / ``disagree``), the first failing check's message, and every check's
    numbers (``checks``: name → dict with ``passed``, ``message`` and its measurements)."""

    verdict: str
    message: str
    checks: dict = field(default_factory=dict)
    config_hash: str = None

    def to_json(self):
        return {
            "verdict": self.verdict,
            "message": self.message,
            "config_hash": self.config_hash,
            "checks": self.checks,
        }


def verify(config, dims=(100, 200), seeds=tuple(range(8)), steps=2000, kappa=None, out=None, progress=True):
    """Run the four checks (module docstring) for a `momentgen.config.Config`.

    ``dims``: two dimensions d₁ < d₂ of the SGD references; ``seeds``: SGD seeds of the finite-d
    leg; ``steps``: SGD steps of the drift check per d; ``kappa``: κ = ηd/B of every SGD run
    (default: the config's ``lr·d/batch``; the learning rate is then κB/d at each d). ``out``: a
    folder for ``verify.json`` and ``verify.png``. Returns a `Verification`.
    """
    _check_arguments(config, dims, seeds, steps)
    start = _States(config)
    d1, d2 = start.dims if start.fixed else sorted(dims)
    if d1 == d2 or d1 < 2:
        raise ConfigError(f"verify needs two different dimensions ≥ 2, got {list(dims)}")
    if len(seeds) < 3:
        raise ConfigError("verify needs at least three seeds (a standard error of the finite-d leg)")
    sgd = config.section("sgd")
    kappa = sgd["lr"] * sgd["d"] / sgd["batch"] if kappa is None else float(kappa)
    if not 0 < kappa < 1:
        raise ConfigError(f"verify runs SGD at kappa = lr*d/batch in (0, 1), got {kappa:g}: set --kappa")
    for d in (d1, d2):  # before anything runs: each SGD reference fits its step and memory budgets
        check_sgd_plan(config.replace(sgd={"d": d, "lr": kappa * sgd["batch"] / d}), d)
    say = _reporter(progress)
    checks, figures = {}, {}
    checks["drift"], figures["drift"] = _guarded(_drift, config, start, (d1, d2), kappa, steps, say)
    checks["closure"], theory = _guarded(_closure, config, kappa, say)
    if theory is not None:
        checks["cross-check"], _ = _guarded(lambda: (_cross_check(config, theory, say), None))
        checks["finite-d"], figures["finite-d"] = _guarded(
            _finite_d, config, start, theory, (d1, d2), seeds, kappa, checks["drift"], say
        )
    failing = [name for name, check in checks.items() if check["passed"] is False]
    verdict = "disagree" if failing else "agree"
    message = checks[failing[0]]["message"] if failing else "every check passed"
    result = Verification(verdict, f"{failing[0]}: {message}" if failing else message, checks, config.digest)
    if out is not None:
        _write(out, result, figures, theory)
    say(f"verdict: {result.verdict} — {result.message}")
    return result


def _check_arguments(config, dims, seeds, steps):
    """The arguments as the CLI and the API both pass them: ``dims`` two integers and ``seeds`` integers,
    each valid as ``[sgd] d`` / ``[sgd] seeds``; ``steps`` an integer ≥ `MIN_STEPS`."""
    if isinstance(dims, (str, bytes)) or not isinstance(dims, (list, tuple)) or len(dims) != 2:
        raise ConfigError(f"verify takes dims as two integers d1, d2, e.g. (100, 200), got {str(dims)[:60]!r}")
    for d in dims:
        config.replace(sgd={"d": d})
    config.replace(sgd={"seeds": list(seeds)})
    if isinstance(steps, bool) or not isinstance(steps, int) or not MIN_STEPS <= steps <= 10**8:
        raise ConfigError(
            f"verify steps (SGD steps of the drift check) must be an integer from {MIN_STEPS} to 1e8, got "
            f"{str(steps)[:40]!r}: a standard error needs many steps"
        )


#: the fewest SGD steps of the drift check (its standard error needs a sample)
MIN_STEPS = 100


def _guarded(leg, *args):
    """(check, extra) of one leg; a leg that cannot run (a state the potential cannot pass, a diverging
    SGD run…) is a failed check whose message says why, not a traceback."""
    try:
        return leg(*args)
    except (MomentgenError, FloatingPointError) as error:
        return {"passed": False, "message": f"could not run: {error}"}, None


def _reporter(progress):
    start = time.perf_counter()

    def say(line):
        if progress:
            print(f"[verify {time.perf_counter() - start:6.1f} s] {line}", file=sys.stderr, flush=True)

    return say


class _States:
    """The finite-d initial states of the SGD runs. From the d = ∞ law: a fresh draw per d and seed.
    With a from-file init the state is the file's (the other indices drawn once, as the theory
    starts from them), the same for every seed, at d₁ = the file's d, and at d₂ = 2d₁ the same
    matrices lifted by ``F ⊗ I₂`` — every normalised trace moment unchanged, so the two SGD runs
    differ only by their dimension and the extrapolation in 1/d is at a fixed initial state."""

    def __init__(self, config):
        self.config, self.model = config, config.model
        self.base = config.start_factors()
        self.fixed = self.base is not None
        if self.fixed and not self.model.family.centred:
            raise ConfigError(
                "verify lifts a from-file state to 2d by F ⊗ I₂, which changes an untied mean Tr(M)/√d: "
                "verify this configuration with a gaussian init of the same law"
            )
        d = self.model.family.dimension(self.base[0]) if self.fixed else None
        self.dims = (d, 2 * d) if self.fixed else None

    def factors(self, d, seed):
        if not self.fixed:
            return initial_factors(self.model, self.config.inits(), d, seed)
        lift = 2 if d == self.dims[1] else 1
        return [_lifted(f, lift) for f in self.base]


def _lifted(factor, times):
    if times == 1:
        return factor
    if isinstance(factor, tuple):
        return tuple(_lifted(f, times) for f in factor)
    return np.kron(factor, np.eye(times))


def _observables(config):
    """The words the checks compare: the reported ones that can move (hold a trainable letter)."""
    model = config.model
    words = [
        w
        for w in config.reported_words()
        if any(model.alphabet.index(c) in model.trainable for c in parse(w, model.kind, model.K))
    ]
    return words[:6]


# ---- 1. drift ---------------------------------------------------------------------------------------


def _exact_program(model, words, noise):
    """A program whose rows for ``words`` are exact (no term dropped by the zero closure)."""
    degree = max(len(parse(w, model.kind, model.K)) for w in words) + 2
    for _ in range(6):
        program = build(model, degree, words, noise=noise)
        rows = [program.index(w) for w in words]
        if not np.any(np.diff(program.dropped_indptr)[rows]):
            return program, rows
        degree += 2
    raise ModelError(f"the drift of {words} needs words beyond degree {degree}: list fewer observables")


def _drift(config, start, dims, kappa, steps, say):
    model = config.model
    if not model.family.centred:
        return {"passed": None, "message": "not run: at t = 0 the mean of this kind is not slaved yet"}, None
    words = _observables(config)
    program, rows = _exact_program(model, words, noise=True)
    potential = Potential.from_config(config)
    gamma, C = config.section("model")["gamma"], config.section("model")["C"]
    batch = config.section("sgd")["batch"]
    per_d = {}
    for d in dims:
        say(f"drift check: d = {d}, {steps} SGD steps from one state")
        factors = start.factors(d, 0)
        y0 = empirical_moments(model, factors, program.word_codes)
        theory = Truncation(program, potential, gamma, kappa=kappa).rhs(0.0, y0)[rows]
        plain = Truncation(program, potential, gamma, kappa=0.0).rhs(0.0, y0)[rows]
        mean, se = mean_increments(
            model, config.loss(), factors, lr=kappa * batch / d, batch=batch, words=words, steps=steps,
            gamma=gamma, C=C, seed=1,
        )  # fmt: skip
        per_d[d] = {"theory": theory, "term": theory - plain, "sgd": mean, "se": se}
    (d1, a), (d2, b) = per_d.items()
    gap = (d2 * (b["sgd"] - b["theory"]) - d1 * (a["sgd"] - a["theory"])) / (d2 - d1)
    se = np.hypot(d2 * b["se"], d1 * a["se"]) / (d2 - d1)
    tolerance = SIGMAS * se + DRIFT_REST * np.abs(b["theory"])
    worst = int(np.argmax(np.abs(gap) / tolerance))
    passed = bool(np.all(np.abs(gap) <= tolerance))
    message = (
        f"at t = 0 the theory's drift of μ({words[worst]}) is off the d → ∞ extrapolation of SGD's by "
        f"{gap[worst]:.3g} ({abs(gap[worst]) / se[worst]:.1f} SE; tolerance {tolerance[worst]:.2g})"
    )
    check = {
        "passed": passed,
        "message": message if not passed else f"worst μ({words[worst]}): {abs(gap[worst]) / se[worst]:.1f} SE",
        "words": words,
        "kappa": kappa,
        "steps": steps,
        "d": list(dims),
        "per_d": {d: {k: v.tolist() for k, v in r.items()} for d, r in per_d.items()},
        "gap_extrapolated": gap.tolist(),
        "se_extrapolated": se.tolist(),
        "tolerance": tolerance.tolist(),
        "term_share": np.abs(b["term"]).tolist(),
    }
    return check, {"words": words, "gap": gap, "se": se, "tolerance": tolerance}


# ---- 2. the closure, 3. a second closure ------------------------------------------------------------------


def _closure(config, kappa, say):
    """The configured closure — with the finite-learning-rate term at the references' κ when it can carry
    it (so the finite-d leg compares like with like), else at κ = 0 with the O(κ) allowance."""
    name = config.section("truncation")["closure"]
    say(f"closure check: the {name} closure")
    try:
        theory = solve_with_closure(config, kappa=kappa)
        with_term = True
    except ModelError:
        theory = solve_with_closure(config, kappa=0.0)
        with_term = False
    T = config.section("integrate")["T"]
    reached = theory.status in ("ok", "unverified")
    window = theory.valid_until if name == "zero" else (T if reached else float(theory.t[-1]))
    passed = reached and window >= T - 1e-12
    if not reached:
        message = f"the {name} closure stopped at t = {theory.t[-1]:.4g}: {theory.status} ({theory.message})"
    elif not passed:
        message = f"the {name} closure leaves its validity window at t = {window:.4g} of a horizon of {T:g}"
    else:
        message = f"the {name} closure vouches for the horizon ({theory.status})"
    check = {
        "passed": passed,
        "message": message,
        "closure": name,
        "status": theory.status,
        "valid_until": window,
        "error_estimate": theory.error_estimate,
        "estimate_is_bound": theory.estimate_is_bound,
        "with_finite_lr_term": with_term,
        "kappa": theory.kappa,
    }
    return check, theory


def _cross_check(config, theory, say):
    name = theory.closure
    words = [w for w in _observables(config) if w in theory.series]
    if name == "zero":
        # the quadrature order of the zero closure's own degree (at least n = 2): its representation
        # grows like (letters)^n, so a high order is minutes for several free letters
        other_name, degree = "quadrature", min(9, max(5, config.section("truncation")["degree"] | 1))
    else:
        other_name, degree = "zero", config.section("truncation")["degree"]
    say(f"cross-check: the {other_name} closure")
    try:
        try:
            other = solve_with_closure(config, other_name, degree=degree, kappa=theory.kappa)
        except ModelError as error:  # it cannot carry the finite-learning-rate term: compare both without it
            if "finite-learning-rate" not in str(error):
                raise
            other = solve_with_closure(config, other_name, degree=degree, kappa=0.0)
            theory = solve_with_closure(config, kappa=0.0)
    except MomentgenError as error:  # the second closure is a cross-check, not the verified curve
        return {"passed": None, "message": f"not run: the {other_name} closure could not start ({error})"}
    until = min(_window(theory), _window(other))
    inside = theory.t <= until + 1e-12
    if inside.sum() < 2:
        return {"passed": None, "message": f"not run: the {other_name} closure vouches for no common window"}
    tol_zero = config.section("integrate")["validity_tol"]
    bound = _bound(theory, tol_zero)[inside] + _bound(other, tol_zero)[inside]
    diff = {w: np.abs(theory.series[w][inside] - other.series[w][inside]) for w in words}
    tol = {w: bound * np.maximum(1.0, np.abs(theory.series[w][inside])) + 1e-8 for w in words}
    worst = max(words, key=lambda w: np.max(diff[w] / tol[w]))
    passed = all(np.all(diff[w] <= tol[w]) for w in words)
    return {
        "passed": passed,
        "message": (
            f"the {name} and {other_name} closures differ by {diff[worst].max():.3g} on μ({worst}) "
            f"where both vouch for their error (t ≤ {until:.4g}, bound {tol[worst].max():.2g})"
        ),
        "other": other_name,
        "window": until,
        "sup_difference": {w: float(v.max()) for w, v in diff.items()},
    }


def _window(result):
    if result.closure == "zero":
        return result.valid_until
    return float(result.t[-1]) if result.status in ("ok", "unverified") else result.valid_until


def _bound(result, validity_tol):
    """The closure's own error bound along t (relative): the zero closure's validity_tol inside its
    window, a flow closure's running estimate (the integration tolerance where it has none)."""
    if result.closure == "zero":
        return np.full(len(result.t), validity_tol)
    estimate = result.error_series.get("estimate")
    return np.full(len(result.t), 1e-6) if estimate is None else np.asarray(estimate, float)


# ---- 4. finite-d references ---------------------------------------------------------------------------------


def _sgd_runs(config, start, d, seeds, lr, times, words):
    """Online SGD at ``d`` from each seed's state: {"t", "stack": {word: (seed, time)}, "status",
    "message"} (cut where a seed diverged)."""
    model, table = config.model, config.section("model")
    runs = [
        sgd(model, config.loss(), config.inits(), d=d, lr=lr, batch=config.section("sgd")["batch"], times=times,
            words=words, gamma=table["gamma"], C=table["C"], seed=seed, factors=start.factors(d, seed), progress=False)
        for seed in seeds
    ]  # fmt: skip
    failed = [r for r in runs if r.info["status"] != "ok"]
    reached = min(len(r.t) for r in runs)
    return {
        "t": runs[0].t[:reached],
        # when each measurement really was: a whole number of steps, not the grid time it was asked for
        "reached": runs[0].steps[:reached] / model.family.steps_per_time(d, lr),
        "stack": {w: np.array([r.series[w][:reached] for r in runs]) for w in words},
        "status": "diverged" if failed else "ok",
        "message": failed[0].info["message"] if failed else "",
    }


def _own_starts(config, start, theory, d, seeds, words, validity_tol, times):
    """The closure from each SGD run's own initial matrices (the theory being verified, started where
    the run starts), read at ``times`` (the SGD measurements' own times, interpolated):
    {"stack": {word: (seed, time)}, "bound": (time,) its largest own estimate}."""
    results = []
    for seed in seeds:
        result = solve_with_closure(config, factors=start.factors(d, seed), kappa=theory.kappa)
        if result.status not in ("ok", "unverified"):
            raise FloatingPointError(
                f"the {result.closure} closure from the d = {d} matrices of seed {seed} stopped at "
                f"t = {result.t[-1]:.4g}: {result.status} ({result.message})"
            )
        results.append(result)
    return {
        "stack": {w: np.array([np.interp(times, r.t, r.series[w]) for r in results]) for w in words},
        "bound": np.max([np.interp(times, r.t, _bound(r, validity_tol)) for r in results], axis=0),
    }


def _finite_d(config, start, theory, dims, seeds, kappa, drift, say):
    """SGD − the theory from each run's own start, per seed (the initial fluctuations of a finite-d draw
    cancel in the pair), extrapolated to d = ∞, where it must vanish within the tolerance."""
    batch = config.section("sgd")["batch"]
    words = [w for w in _observables(config) if w in theory.series]
    validity_tol = config.section("integrate")["validity_tol"]
    gaps = {}
    for d in dims:
        say(
            f"finite-d: SGD at d = {d}, {len(seeds)} seeds, η = {kappa * batch / d:.3g}, and the theory from each start"
        )
        run = _sgd_runs(config, start, d, seeds, kappa * batch / d, theory.t, words)
        if run["status"] != "ok":
            return {"passed": False, "message": f"SGD at d = {d} {run['message']}"}, None
        own = _own_starts(config, start, theory, d, seeds, words, validity_tol, run["reached"])
        n = len(run["t"])
        gaps[d] = {
            "mean": {w: (run["stack"][w] - own["stack"][w][:, :n]).mean(0) for w in words},
            "se": {w: (run["stack"][w] - own["stack"][w][:, :n]).std(0, ddof=1) / np.sqrt(len(seeds)) for w in words},
            "sgd": {w: run["stack"][w].mean(0) for w in words},
            "bound": own["bound"][:n],
        }
    (d1, a), (d2, b) = gaps.items()
    n = min(len(a["bound"]), len(b["bound"]), len(theory.t))
    t = np.asarray(theory.t[:n])
    rows, curves = {}, {}
    term = dict(zip(drift.get("words", []), drift.get("term_share", [])))  # the term's share of the drift
    sigmas = max(SIGMAS, float(scipy.stats.t.ppf(0.9995, len(seeds) - 1)))  # few seeds: a Student-t SE
    # the finite-d correction is O(1/d) for a centred kind, O(1/√d) with a mean (e.g. μ(M) = m/√d)
    x1, x2 = (d ** -(1.0 if config.model.family.centred else 0.5) for d in (d1, d2))
    for w in words:
        g1, g2 = a["mean"][w][:n], b["mean"][w][:n]
        ext = (x1 * g2 - x2 * g1) / (x1 - x2)
        se = np.hypot(x1 * b["se"][w][:n], x2 * a["se"][w][:n]) / (x1 - x2)
        scale = np.maximum(1.0, np.abs(theory.series[w][:n]))
        estimate = np.maximum(a["bound"][:n], b["bound"][:n]) * scale  # the closures' own error
        bias = 0.0 if theory.kappa else 2 * t * term.get(w, 0.0)  # O(κ) bias of a theory without the term
        tol = sigmas * se + np.abs(ext - g2) * x2 / x1 + estimate + bias + 1e-9
        rows[w] = {
            "sup_gap": float(np.abs(ext).max()),
            "at": float(t[np.argmax(np.abs(ext) / tol)]),
            "ratio": float(np.max(np.abs(ext) / tol)),
        }
        curves[w] = {"t": t, "ext": ext, "tol": tol, "d1": g1, "d2": g2}
    worst = max(rows, key=lambda w: rows[w]["ratio"])
    passed = rows[worst]["ratio"] <= 1.0
    message = (
        f"SGD − theory (each from the run's own start), extrapolated to d = ∞ from d = {d1}, {d2}, is "
        f"{rows[worst]['sup_gap']:.3g} on μ({worst}): {rows[worst]['ratio']:.1f}× the tolerance at "
        f"t = {rows[worst]['at']:.3g}"
    )
    check = {"passed": passed, "message": message, "d": [d1, d2], "kappa": kappa, "observables": rows}
    return check, {"curves": curves, "d": (d1, d2)}


# ---- output ---------------------------------------------------------------------------------------------------


def _write(out, result, figures, theory):
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "verify.json", {**result.to_json(), "provenance": provenance()})
    curves = (figures.get("finite-d") or {}).get("curves", {})
    panels = 1 + min(3, len(curves))
    fig = Figure(figsize=(4.2 * panels, 3.6))
    axes = np.atleast_1d(fig.subplots(1, panels))
    drift = figures.get("drift")
    if drift is not None:
        x = np.arange(len(drift["words"]))
        axes[0].bar(x, drift["gap"] / drift["se"], color="C0")
        axes[0].plot(x, drift["tolerance"] / drift["se"], "k_", ms=14, label="tolerance")
        axes[0].plot(x, -drift["tolerance"] / drift["se"], "k_", ms=14)
        axes[0].set_xticks(x, [f"μ({w})" for w in drift["words"]], rotation=30, fontsize=7)
        axes[0].set(ylabel="(SGD − theory) drift at t = 0, d → ∞ [SE]", title="drift check")
        axes[0].legend(fontsize=7)
    else:
        axes[0].text(0.5, 0.5, result.checks["drift"]["message"], ha="center", va="center", wrap=True, fontsize=8)
        axes[0].set_axis_off()
    d1, d2 = (figures.get("finite-d") or {}).get("d", (None, None))
    for ax, (w, c) in zip(axes[1:], curves.items()):
        ax.fill_between(c["t"], -c["tol"], c["tol"], color="0.85", lw=0, label="tolerance")
        ax.axhline(0.0, color="k", lw=0.8)
        ax.plot(c["t"], c["d1"], "o", ms=3, color="C1", label=f"d = {d1}")
        ax.plot(c["t"], c["d2"], "s", ms=3, color="C2", label=f"d = {d2}")
        ax.plot(c["t"], c["ext"], "k-", lw=1.5, label="extrapolated to d = ∞")
        ax.set(
            xlabel=theory.time_scale,
            ylabel=f"SGD − {theory.closure} closure",
            title=f"μ({w}), each from the run's start",
        )
    if curves:
        axes[1].legend(fontsize=7)
    fig.suptitle(f"momentgen verify: {result.verdict} — {result.message}", fontsize=9)
    fig.tight_layout()
    save_figure(fig, out / "verify.png", formats=PAPER_FORMATS, dpi=110)
