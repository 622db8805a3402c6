"""Online SGD at finite d: the independent reference (MATH.md §1, §7).

Fresh tokens ``x_1..x_L`` with ``E[x_ia x_jb] = C_ij δ_ab`` (``C_ij Σ_ab`` with a data covariance, MATH.md §10:
x = Σ^{1/2} z, O(B d) for a diagonal Σ), a minibatch of ``B`` samples, the batch-averaged gradient, learning rate
``η`` and weight decay ``γ``: ``P ← P − η ∇_P ℓ − (ηγ/d) P`` for every trainable factor. The step of each kind is the
kind's own (`KindMatrices.sgd_step`: analytic, BLAS-shaped, no Python loop over samples); the loss gradient ∂ℓ/∂G
is compiled once per loss. Memory is O(K d² + B L d).

Time axes: SGD step ``n`` maps to the theory's axis by the kind's `steps_per_time` (tied ``t = 4nη/d``; untied slow
phase, direct, symmetric ``τ = nη/d``). Moments are measured as ``(1/d) Tr`` of canonical words on the current
matrices (`momentgen.setting.matrices.trace_moments`). Only the loss, the model protocol and the finite-matrix tools
are read: nothing of the theory.
"""

import time
from dataclasses import dataclass, field

import numpy as np
import sympy

from .. import models
from ..core.codegen import compile_pointwise
from ..core.errors import MomentgenError
from ..core.progress import Progress
from ..core.trajectory import Moments
from ..models import Batch, Model
from ..models.base import shifted
from ..models.words import canonical, parse
from ..setting.data import ISOTROPIC
from ..setting.matrices import initial_factors, letter_matrices, trace_moments
from ..setting.schedules import effective_lr, kappa_of
from ..setting.spectra import product_matrix, trace_spectrum

__all__ = [
    "SimulationResult",
    "SGDRun",
    "sgd",
    "mean_increments",
    "steps_for",
    "loss_gradient",
    "loss_value",
    "RiskProbe",
    "RISK_SAMPLES",
    "word_codes",
    "initial_factors",
]


@dataclass(kw_only=True)
class SimulationResult(Moments):
    """Moments along a finite-d run (`Moments`: ``series``, canonical word → array (n,)), on the theory's time axis.

    ``steps``: SGD steps at each time (None for the matrix flow); ``means``: kinds with a mean,
    ``m_k = Tr(Σ M_k)/√d`` (n, K; Σ = I for isotropic tokens); ``status``: "ok" or why the run stopped early (then
    ``t`` ends there).
    """

    d: int
    steps: np.ndarray = None
    means: np.ndarray = None
    info: dict = field(default_factory=dict)


#: Fresh samples per measurement of the SGD side's population risk (its standard error is reported).
RISK_SAMPLES = 2048


def steps_for(model, times, d, lr):
    """SGD steps that reach the theory times (the kind's `steps_per_time`, e.g. tied ``n = t d/(4η)``);
    ``model`` is a `Model` or a kind's name. A count that is not a finite number below 2⁶² (``T = 1e300``,
    ``lr = 1e-300``) is a `MomentgenError`, never a wrapped-around integer."""
    definition = model.definition if isinstance(model, Model) else models.get(model)
    with np.errstate(all="ignore"):
        steps = np.rint(np.asarray(times, dtype=float) * definition.steps_per_time(d, lr))
    if not np.all(np.isfinite(steps)) or np.max(steps, initial=0) > 2.0**62:
        raise MomentgenError(
            f"SGD would need {np.max(steps, initial=0):.3g} steps to reach {definition.time_symbol} = "
            f"{np.max(times, initial=0):.3g} at d = {d}, lr = {lr:g}: lower [integrate] T or raise lr"
        )
    return steps.astype(np.int64)


def loss_gradient(loss, rng=None):
    """∂ℓ/∂G at a batch of pre-activations, compiled once per loss (cached on disk): G of shape
    (B, L, L, K) → an array of the same shape. A loss with label noise draws its standard Gaussian ξ (one per
    sample and output, `Loss.noise_variables`) from ``rng`` at each call: the teacher's labels are noisy."""
    inputs = loss.variables + loss.noise_variables
    kernel = compile_pointwise(
        lambda: [sympy.diff(loss.expr, v) for v in loss.variables],
        inputs,
        key="gradient|" + sympy.srepr(loss.expr),
    )
    shape = (loss.L, loss.L, loss.K)

    def gradient(G):
        return kernel(_with_noise_draws(G, len(loss.noise_variables), rng)).reshape(len(G), *shape)

    return gradient


def _with_noise_draws(G, count, rng):
    """The kernel's input rows: G flattened, then ``count`` standard Gaussian label-noise draws per sample."""
    flat = G.reshape(len(G), -1)
    if count:
        flat = np.concatenate([flat, rng.standard_normal((len(G), count))], axis=1)
    return np.ascontiguousarray(flat)


def loss_value(loss):
    """ℓ at a batch of pre-activations, compiled once per loss (cached on disk): G of shape
    (B, L, L, K) → an array of shape (B,). ``loss`` is noiseless (for a noisy one pass `Loss.expected`, the
    label noise integrated out exactly, or `Loss.clean`)."""
    kernel = compile_pointwise(lambda: [loss.expr], loss.variables, key="value|" + sympy.srepr(loss.expr))

    def value(G):
        return kernel(np.ascontiguousarray(G.reshape(len(G), -1))).reshape(len(G))

    return value


def word_codes(model, words):
    texts = [canonical(w, model) for w in words]
    return texts, [parse(w, model) for w in texts]


class SGDRun:
    """One online-SGD run: the factors (the kind's layout), the token stream and the update rule.

    ``step()`` draws a minibatch, applies the kind's step and returns False (leaving the factors
    as they were) when the step met a non-finite number.
    """

    def __init__(
        self,
        model,
        loss,
        C,
        factors,
        lr,
        batch,
        gamma,
        rng,
        gradient=None,
        data=ISOTROPIC,
        momentum=0.0,
        nesterov=False,
    ):
        self.model, self.definition, self.L, self.data = model, model.definition, loss.L, data
        self.factors = [_copy(x) for x in factors]
        self.d = self.definition.matrices.dimension(self.factors[0]) if self.factors else 0
        self.lr, self.batch, self.gamma, self.rng = lr, batch, gamma, rng
        self.momentum, self.nesterov = momentum, nesterov
        self.velocity = [_scaled(x, 0.0) for x in self.factors] if momentum else None
        self.C = np.eye(self.L) if C is None else np.asarray(C, float)
        w, V = np.linalg.eigh(self.C)
        self.C_root = (V * np.sqrt(np.clip(w, 0, None))) @ V.T
        self.gradient = loss_gradient(loss, rng) if gradient is None else gradient
        self._covariance = None  # (d, Σ for the Batch, Σ^{1/2}): built at the first step of a dimension

    def covariance(self):
        """(Σ as the `Batch` reads it, Σ^{1/2}) at the run's d — the diagonals (d,) of a diagonal Σ, else d × d
        matrices; (None, None) for isotropic tokens."""
        if self.data.isotropic:
            return None, None
        if self._covariance is None or self._covariance[0] != self.d:
            values, basis = self.data.eigenvalues(self.d), self.data.basis(self.d)
            if basis is None:
                self._covariance = (self.d, values, np.sqrt(values))
            else:
                self._covariance = (self.d, (basis * values) @ basis.T, (basis * np.sqrt(values)) @ basis.T)
        return self._covariance[1:]

    def tokens(self):
        Z = self.rng.standard_normal((self.batch, self.L, self.d))
        root = self.covariance()[1]
        if root is not None:  # x = Σ^{1/2} z (Σ^{1/2} symmetric)
            Z = Z * root if root.ndim == 1 else Z @ root
        return Z if self.L == 1 and self.C[0, 0] == 1.0 else np.einsum("ij,bjd->bid", self.C_root, Z)

    def step(self):
        """One step; with momentum β the heavy ball ``v ← βv − η(∇ℓ + γP/d)``, ``P ← P + v`` (Nesterov: the
        gradient at ``P + βv``), the kind's own SGD step giving ``−η(∇ℓ + γP/d)``."""
        start = self.factors
        if self.momentum and self.nesterov:
            start = [shifted(x, v, self.momentum) for x, v in zip(self.factors, self.velocity)]
        batch = Batch(self.tokens(), self.gradient, self.C, self.covariance()[0])
        moved = self.definition.matrices.sgd_step(self.model, start, batch, self.lr, self.gamma)
        if moved is None:
            return False
        if not self.momentum:
            self.factors = moved
            return True
        velocity = [shifted(shifted(m, s, -1.0), v, self.momentum) for m, s, v in zip(moved, start, self.velocity)]
        factors = [shifted(x, v, 1.0) for x, v in zip(self.factors, velocity)]
        if not all(np.all(np.isfinite(a)) for x in factors for a in _arrays(x)):
            return False
        self.factors, self.velocity = factors, velocity
        return True

    def means(self):
        return self.definition.matrices.means(self.factors, self.data.letter(self.model, self.d))


def _arrays(x):
    """The arrays of one index's factor (a matrix, or a tuple such as the untied (U, V))."""
    return x if isinstance(x, tuple) else (x,)


def _copy(x):
    return tuple(np.array(a) for a in x) if isinstance(x, tuple) else np.array(x)


def _scaled(x, c):
    return tuple(c * a for a in x) if isinstance(x, tuple) else c * x


class _StepRates:
    """Learning rate and batch size of each step under a schedule (constant without one); the run's N steps are
    counted on the time axis of ``axis_lr`` (η, or η/(1 − β) with momentum)."""

    def __init__(self, model, d, lr, batch, schedules, horizon, axis_lr):
        self.lr, self.batch, self.schedules = lr, batch, schedules
        self.total = max(1, int(steps_for(model, [horizon], d, axis_lr)[0])) if schedules else 1

    def at(self, step):
        if not self.schedules:
            return self.lr, self.batch
        u = step / self.total
        lr_f, batch_f = self.schedules
        return self.lr * float(lr_f(u)), max(1, int(round(self.batch * float(batch_f(u)))))


class RiskProbe:
    """The population risk ``E[ℓ]`` of finite-d factors, estimated on fresh samples of its own stream.

    The pre-activations are the kind's own (they are read off `KindMatrices.sgd_step` at lr = 0 through a
    recording gradient), ℓ is compiled from the loss: independent of the theory's Φ. ``measure``
    returns (mean, standard error) over ``samples`` samples, drawn in batches of at most 512.
    """

    def __init__(self, model, loss, C, rng, samples, chunk=512, data=ISOTROPIC):
        self.model, self.samples, self.chunk = model, int(samples), chunk
        self.value = loss_value(loss.expected)  # label noise integrated out exactly (a polynomial in ξ)
        self.clean = loss_value(loss.clean) if loss.noisy else None
        self.sampler = SGDRun(model, loss, C, [], 0.0, 1, 0.0, rng, gradient=self._record, data=data)
        self._G = None

    def _record(self, G):
        self._G = G
        return np.zeros_like(G)

    def measure(self, factors):
        """(risk, its standard error), and with label noise (excess risk, its standard error) on the same samples."""
        losses, clean, left = [], [], self.samples
        self.sampler.factors, self.sampler.d = factors, self.model.definition.matrices.dimension(factors[0])
        while left > 0:
            self.sampler.batch = min(left, self.chunk)
            self.sampler.step()
            losses.append(self.value(self._G))
            if self.clean is not None:
                clean.append(self.clean(self._G))
            left -= self.sampler.batch
        return sum((_mean_and_error(np.concatenate(v)) for v in (losses, clean) if v), ())


def _mean_and_error(values):
    return float(values.mean()), float(values.std(ddof=1) / np.sqrt(len(values)))


class _Measurements:
    """What `sgd` records at each output time: the words' moments, the means, and optionally the risk on
    fresh samples (a `RiskProbe`) and the eigenvalues of symmetric letter products."""

    def __init__(self, probe, spectra):
        self.probe, self.spectra = probe, spectra or {}
        self.values, self.means, self.risks = [], [], []
        self.eigenvalues = {name: [] for name in self.spectra}

    def add(self, run, letters, measured, count):
        """The state of ``run`` (its letter matrices, their moments ``measured``) at ``count`` grid times that
        fall on this step."""
        self.values.extend([measured] * count)
        self.means.extend([run.means()] * count)
        if self.probe is not None:
            self.risks.extend([self.probe.measure(run.factors)] * count)
        for name, product in self.spectra.items():
            self.eigenvalues[name].extend([trace_spectrum(product_matrix(product, letters))[0]] * count)

    def extras(self):
        """``risk``, ``risk_se`` and ``spectra`` for the run's info, when measured."""
        out = {}
        if self.probe is not None:
            names = ("risk", "risk_se", "excess_risk", "excess_risk_se")
            out.update(
                {name: np.array([r[i] for r in self.risks]) for i, name in enumerate(names[: len(self.risks[0])])}
            )
        if self.spectra:
            out["spectra"] = self.eigenvalues
        return out


def sgd(
    model,
    loss,
    inits,
    *,
    d,
    lr,
    batch,
    times,
    words,
    gamma=0.0,
    C=None,
    seed=0,
    factors=None,
    progress=None,
    fast_times=None,
    schedules=None,
    horizon=None,
    risk_samples=0,
    spectra=None,
    data=ISOTROPIC,
    momentum=0.0,
    nesterov=False,
):
    """Run online SGD and measure ``words`` at the theory ``times``.

    Parameters
    ----------
    model : momentgen.models.Model
    loss : momentgen.losses.Loss
    inits : {k: InitSpec}
        Student and teacher initialisation; the factors are drawn with ``seed``.
    d, lr, batch : int, float, int
        Dimension, learning rate η (the raw step), minibatch size B.
    times : array_like
        Measurement times on the theory's axis (the kind's `time_scale`; with momentum β it is read with
        η/(1 − β): tied ``t = 4nη/((1 − β)d)``, MATH.md §14).
    words : list of str
    seed : int
        Seeds both the initial matrices and the token stream: the same seed gives a
        bit-identical run (with one BLAS thread).
    factors : optional
        Start from these finite-d factors instead of drawing them.
    progress : bool, optional
        Steps done on stderr (`momentgen.core.progress.Progress`): by default a bar in a terminal or notebook,
        a status line every 30 s in a log; False: silent.
    fast_times : array_like, optional
        Kinds with a mean: also record the means ``m_k`` at these times of the fast axis
        ``t = nη`` (in ``info["fast_t"]``, ``info["fast_m"]``).
    schedules : (lr, batch) `momentgen.setting.schedules.Schedule` pair, optional
        Step n uses ``lr·f(n/N)`` and batch ``max(1, round(batch·b(n/N)))``, N the steps a constant-lr
        run needs to reach ``horizon`` (default ``times[-1]``); times stay on the nominal axis (∝ steps).
    risk_samples : int
        Also estimate the population risk E[ℓ] at each time on this many fresh samples (an
        independent token stream): ``info["risk"]``, ``info["risk_se"]`` (0: not measured).
    spectra : {name: letter codes}, optional
        Also record the eigenvalues of each symmetric product of letters (`momentgen.setting.spectra`) at
        each time: ``info["spectra"][name]``, a list of arrays.
    data : momentgen.data.DataCovariance, optional
        The tokens' covariance Σ (MATH.md §10; default isotropic); aligned inits are c Σ^b of it.
    momentum, nesterov : float, bool
        Heavy-ball momentum β (0: plain SGD) and Nesterov's look-ahead (`SGDRun.step`).

    A loss with label noise draws its noise per sample from the token stream's generator; ``info["risk"]`` is
    then the risk with the noise and ``info["excess_risk"]`` the risk against the noiseless teacher.

    A step that meets a non-finite number stops the run: ``status = "diverged"`` and
    ``message`` says at which step and time; the result holds the times reached.
    """
    texts, codes = word_codes(model, words)
    if factors is None:
        factors = initial_factors(model, inits, d, seed, data)
    sigma = data.letter(model, d)
    token_seed, risk_seed = np.random.SeedSequence(seed).spawn(3)[1:]
    rng = np.random.default_rng(token_seed)
    run = SGDRun(model, loss, C, factors, lr, batch, gamma, rng, data=data, momentum=momentum, nesterov=nesterov)
    probe = (
        RiskProbe(model, loss, C, np.random.default_rng(risk_seed), risk_samples, data=data) if risk_samples else None
    )
    axis_lr = effective_lr(lr, momentum)
    rates = _StepRates(model, d, lr, batch, schedules, times[-1] if horizon is None else horizon, axis_lr)
    schedule = steps_for(model, times, d, axis_lr)
    fast = [] if fast_times is None else list(np.rint(np.asarray(fast_times, float) / axis_lr).astype(np.int64))
    record, fast_m, step, start = _Measurements(probe, spectra), [], 0, time.perf_counter()
    last = max([schedule[-1]] + fast)
    status, message = "ok", "reached the horizon"
    per_time, kappa = model.definition.steps_per_time(d, axis_lr), kappa_of(lr, d, batch, momentum)

    def diverged(at):
        return "diverged", (
            f"diverged at step {at}, {model.definition.time_symbol} = {at / per_time:.6g}: the SGD state "
            f"became non-finite; lower the learning rate (η = {lr:g}, η_eff d/B = {kappa:.3g}) "
            f"or the weight decay (γ = {gamma:g})"
        )

    with Progress(int(last), f"SGD d={d} B={batch} seed={seed}", "step", progress) as bar:
        for target in sorted(set(schedule) | set(fast)):
            while step < target and status == "ok":
                run.lr, run.batch = rates.at(step)
                with np.errstate(over="ignore", invalid="ignore"):  # a diverging step returns False: stopped here
                    stepped = run.step()
                if not stepped:
                    status, message = diverged(step + 1)
                step += 1
                bar.update()
            if status != "ok":
                break
            with np.errstate(all="ignore"):  # a diverging state is caught just below, with its step
                letters = letter_matrices(model.kind, run.factors, sigma)
                measured = trace_moments(codes, letters)
            if not np.all(np.isfinite(measured)):
                status, message = diverged(step)
                break
            if target in fast:
                fast_m.extend([run.means()] * fast.count(target))
            if target in schedule:
                record.add(run, letters, measured, int(np.sum(schedule == target)))
    kept = len(record.values)
    series = {w: np.array(v) for w, v in zip(texts, np.array(record.values).reshape(kept, len(texts)).T)}
    info = {
        "seconds": time.perf_counter() - start,
        "lr": lr,
        "batch": batch,
        "seed": seed,
        "steps_total": step,
    }
    if fast:
        info.update(fast_t=np.asarray(fast_times, float)[: len(fast_m)], fast_m=np.array(fast_m))
    info.update(record.extras())
    return SimulationResult(
        np.asarray(times, float)[:kept],
        status,
        message,
        series=series,
        d=d,
        steps=schedule[:kept],
        means=None if not record.means or record.means[0] is None else np.array(record.means),  # centred: None
        info=info,
    )


def mean_increments(model, loss, factors, *, lr, batch, words, steps, gamma=0.0, C=None, seed=0, data=ISOTROPIC):
    """The mean one-step change of each word's normalised trace, per unit of the kind's time axis,
    over ``steps`` independent SGD steps from the same ``factors`` (fresh minibatches, ``seed``; tokens of
    covariance Σ of ``data``); returns (mean, standard error), arrays over ``words``. Uses only the loss and the
    sampler: the independent side of the drift check of `momentgen.evidence.verification`."""
    texts, codes = word_codes(model, words)
    run = SGDRun(model, loss, C, factors, lr, batch, gamma, np.random.default_rng(seed), data=data)
    sigma = data.letter(model, run.d)
    start, base = run.factors, trace_moments(codes, letter_matrices(model.kind, factors, sigma))
    per_time = model.definition.steps_per_time(run.d, lr)
    increments = np.empty((steps, len(codes)))
    for i in range(steps):
        run.factors = start
        if not run.step():
            raise FloatingPointError(f"an SGD step from the given state met a non-finite number (η = {lr:g})")
        increments[i] = (trace_moments(codes, letter_matrices(model.kind, run.factors, sigma)) - base) * per_time
    return increments.mean(0), increments.std(0, ddof=1) / np.sqrt(steps)
