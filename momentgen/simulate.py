"""The reference side: online SGD at finite d, and the deterministic finite-d matrix flow.

Online SGD (MATH.md §1): fresh tokens ``x_1..x_L`` with ``E[x_ia x_jb] = C_ij δ_ab``, a
minibatch of ``B`` samples, the batch-averaged gradient, learning rate ``η`` and weight
decay ``γ``: ``P ← P − η ∇_P ℓ − (ηγ/d) P`` for every trainable factor. Gradients are
analytic and BLAS-shaped — with ``P_b = X_b W`` (tied; untied ``X_b U`` and ``X_b V``) the
pre-activations are ``G = (P Pᵀ − C Tr S)/√d`` and ``∇_W = (2/√d) Xᵀ(g P) − (2/√d) ⟨g, C⟩ W``
— so memory is O(K d² + B L d) and no Python loop runs over samples.

Time axes: SGD step ``n`` maps to the theory's axis as tied ``t = 4nη/d``, untied slow
phase and direct ``τ = nη/d`` (`steps_for`). Moments are measured as ``(1/d) Tr`` of
canonical words on the current matrices (`momentgen.matrices.trace_moments`, prefixes
shared).

The matrix flow (`matrix_flow`) is the population gradient flow of the same matrices —
noise-free and untruncated, between SGD and the hierarchy (MATH.md §3–§5, §7).
"""

import sys
import time
from dataclasses import dataclass, field

import numpy as np
import sympy

from .codegen import compile_pointwise
from .flow import factor_velocities
from .initial import initial_factors
from .matrices import letter_matrices, trace_moments, untied_means
from .words import canonical, parse

__all__ = ["SimulationResult", "sgd", "matrix_flow", "simulate_config", "steps_for", "initial_factors"]


@dataclass
class SimulationResult:
    """Moments along a finite-d run, on the theory's time axis.

    ``t``: shape (n,); ``series``: canonical word → array (n,); ``steps``: SGD steps at each
    time (None for the matrix flow); ``means``: untied only, ``m_k = Tr(M_k)/√d`` (n, K).
    """

    t: np.ndarray
    series: dict
    d: int
    steps: np.ndarray = None
    means: np.ndarray = None
    info: dict = field(default_factory=dict)


def steps_for(kind, times, d, lr):
    """SGD steps that reach the theory times: tied ``n = t d/(4η)``, else ``n = τ d/η``."""
    scale = d / (4 * lr) if kind == "tied" else d / lr
    return np.rint(np.asarray(times, dtype=float) * scale).astype(np.int64)


class _LossGradient:
    """∂ℓ/∂G at a batch of pre-activations, compiled once per loss (cached on disk)."""

    def __init__(self, loss):
        self.kernel = compile_pointwise(lambda: [sympy.diff(loss.expr, v) for v in loss.variables], loss.variables,
                                        key="gradient|" + sympy.srepr(loss.expr))  # fmt: skip
        self.shape = (loss.L, loss.L, loss.K)

    def __call__(self, G):
        return self.kernel(np.ascontiguousarray(G.reshape(len(G), -1))).reshape(len(G), *self.shape)


def _measure(kind, factors, codes):
    return trace_moments(codes, letter_matrices(kind, factors))


def _word_codes(kind, K, words):
    texts = [canonical(w, kind) for w in words]
    return texts, [parse(w, kind, K) for w in texts]


class _SGD:
    """One online-SGD run: the factors and the update rule of one model."""

    def __init__(self, model, loss, C, factors, lr, batch, gamma, rng):
        self.model, self.kind, self.K, self.L = model, model.kind, model.K, loss.L
        self.factors = [tuple(np.array(f) for f in x) if isinstance(x, tuple) else np.array(x) for x in factors]
        self.d = (self.factors[0][0] if self.kind == "untied" else self.factors[0]).shape[0]
        self.lr, self.batch, self.gamma, self.rng = lr, batch, gamma, rng
        self.C = np.eye(self.L) if C is None else np.asarray(C, float)
        w, V = np.linalg.eigh(self.C)
        self.C_root = (V * np.sqrt(np.clip(w, 0, None))) @ V.T
        self.gradient = _LossGradient(loss)
        self.trainable = [k - 1 for k in model.trainable]

    def tokens(self):
        Z = self.rng.standard_normal((self.batch, self.L, self.d))
        return Z if self.L == 1 and self.C[0, 0] == 1.0 else np.einsum("ij,bjd->bid", self.C_root, Z)

    def step(self):
        X, root_d, B = self.tokens(), np.sqrt(self.d), self.batch
        flat = X.reshape(-1, self.d)  # (B·L, d): every product below is one GEMM or a small einsum
        decay = 1 - self.lr * self.gamma / self.d

        def rows(A):  # (B·L, w) → (B, L, w)
            return A.reshape(B, self.L, -1)

        def pairs(A, Bm):  # G-shaped (B, L, L) inner products of token rows
            return np.einsum("bik,bjk->bij", A, Bm)

        def mix(g, A):  # Σ_j g_ij A_j for each sample: (B, L, L) × (B, L, w) → (B·L, w)
            return np.einsum("bij,bjk->bik", g, A).reshape(B * self.L, -1)

        if self.kind == "tied":
            P = [rows(flat @ W) for W in self.factors]  # P_bi = Wᵀ x_bi
            traces = [np.sum(W * W) for W in self.factors]
            G = np.stack([(pairs(p, p) - self.C * t) / root_d for p, t in zip(P, traces)], axis=-1)
            g = self.gradient(G)
            if not np.all(np.isfinite(g)):
                return False
            for k in self.trainable:
                gk = g[..., k]
                grad = flat.T @ mix(gk + gk.transpose(0, 2, 1), P[k]) / (root_d * B)
                grad -= 2 * np.einsum("bij,ij->", gk, self.C) / (root_d * B) * self.factors[k]
                self.factors[k] = decay * self.factors[k] - self.lr * grad
        elif self.kind == "untied":
            P = [rows(flat @ U) for U, _ in self.factors]
            R = [rows(flat @ V) for _, V in self.factors]
            G = np.stack([pairs(p, r) / root_d for p, r in zip(P, R)], axis=-1)  # x_iᵀ U Vᵀ x_j / √d
            g = self.gradient(G)
            if not np.all(np.isfinite(g)):
                return False
            for k in self.trainable:
                gk = g[..., k]
                U, V = self.factors[k]
                grad_U = flat.T @ mix(gk, R[k]) / (root_d * B)
                grad_V = flat.T @ mix(gk.transpose(0, 2, 1), P[k]) / (root_d * B)
                self.factors[k] = (decay * U - self.lr * grad_U, decay * V - self.lr * grad_V)
        else:
            SX = [rows(flat @ S.T) for S in self.factors]  # row b, i: (S x_bi)ᵀ
            traces = [np.trace(S) for S in self.factors]
            G = np.stack([(pairs(X, sx) - self.C * t) / root_d for sx, t in zip(SX, traces)], axis=-1)
            g = self.gradient(G)  # G_ij = x_iᵀ S x_j: ∂/∂S = x_i x_jᵀ
            if not np.all(np.isfinite(g)):
                return False
            for k in self.trainable:
                gk = g[..., k]
                grad = flat.T @ mix(gk, X) / (root_d * B)
                grad -= np.einsum("bij,ij->", gk, self.C) / (root_d * B) * np.eye(self.d)
                self.factors[k] = decay * self.factors[k] - self.lr * grad
        return True

    def means(self):
        return untied_means(self.factors) if self.kind == "untied" else None


def sgd(model, loss, inits, *, d, lr, batch, times, words, gamma=0.0, C=None, seed=0, factors=None, progress=None,
        fast_times=None):
    """Run online SGD and measure ``words`` at the theory ``times``.

    Parameters
    ----------
    model : momentgen.hierarchy.Model
    loss : momentgen.losses.Loss
    inits : {k: InitSpec}
        Student and teacher initialisation; the factors are drawn with ``seed``.
    d, lr, batch : int, float, int
        Dimension, learning rate η, minibatch size B.
    times : array_like
        Measurement times on the theory's axis (tied ``t = 4nη/d``, else ``τ = nη/d``).
    words : list of str
    seed : int
        Seeds both the initial matrices and the token stream: the same seed gives a
        bit-identical run (with one BLAS thread).
    factors : optional
        Start from these finite-d factors instead of drawing them.
    progress : bool, optional
        Progress line on stderr; default: only when stderr is a terminal.
    fast_times : array_like, optional
        Untied only: also record the means ``m_k`` at these times of the fast axis ``t = nη``
        (in ``info["fast_t"]``, ``info["fast_m"]``).
    """
    texts, codes = _word_codes(model.kind, model.K, words)
    if factors is None:
        factors = initial_factors(model, inits, d, seed)
    token_seed = np.random.SeedSequence(seed).spawn(2)[1]
    run = _SGD(model, loss, C, factors, lr, batch, gamma, np.random.default_rng(token_seed))
    schedule = steps_for(model.kind, times, d, lr)
    fast = [] if fast_times is None else list(np.rint(np.asarray(fast_times, float) / lr).astype(np.int64))
    show = sys.stderr.isatty() if progress is None else progress
    values, means, fast_m, step, start = [], [], [], 0, time.perf_counter()
    last = max([schedule[-1]] + fast)
    status, message = "ok", "reached the horizon"
    def diverged(at):
        return "diverged", (f"diverged at step {at}, {_axis(model.kind)} = {_time_of(model.kind, at, d, lr):.6g}: the "
                            f"SGD state became non-finite; lower the learning rate (η = {lr:g}, ηd/B = "
                            f"{lr * d / batch:.3g}) or the weight decay (γ = {gamma:g})")  # fmt: skip

    for target in sorted(set(schedule) | set(fast)):
        while step < target and status == "ok":
            if not run.step():
                status, message = diverged(step + 1)
            step += 1
            if show and step % 200 == 0:
                rate = step / (time.perf_counter() - start)
                print(f"\rSGD d={d} B={batch}: step {step}/{last} ({rate:.0f} steps/s)", end="", file=sys.stderr)
        if status != "ok":
            break
        with np.errstate(all="ignore"):
            measured = _measure(model.kind, run.factors, codes)
        if not np.all(np.isfinite(measured)):
            status, message = diverged(step)
            break
        if target in fast:
            fast_m.extend([run.means()] * fast.count(target))
        if target in schedule:
            count = int(np.sum(schedule == target))
            values.extend([measured] * count)
            means.extend([run.means()] * count)
    if show:
        print(file=sys.stderr)
    kept = len(values)
    series = {w: np.array(v) for w, v in zip(texts, np.array(values).reshape(kept, len(texts)).T)}
    info = {"seconds": time.perf_counter() - start, "lr": lr, "batch": batch, "seed": seed, "steps_total": step,
            "status": status, "message": message}  # fmt: skip
    if fast:
        info.update(fast_t=np.asarray(fast_times, float)[: len(fast_m)], fast_m=np.array(fast_m))
    return SimulationResult(np.asarray(times, float)[:kept], series, d, schedule[:kept],
                            np.array(means) if model.kind == "untied" else None, info)  # fmt: skip


def _axis(kind):
    return "t" if kind == "tied" else "tau"


def _time_of(kind, step, d, lr):
    """The theory time of SGD step ``step`` (inverse of `steps_for`)."""
    return step * (4 * lr / d if kind == "tied" else lr / d)


def matrix_flow(model, potential, factors, *, times, words, gamma=0.0, rtol=1e-9, atol=1e-11, means=None,
                vector_state=False, probes=()):
    """Integrate the population gradient flow of finite-d factors; measure ``words`` at ``times``.

    The coefficients come from Φ at the matrices' own order parameters (untied: with the
    slaved mean m*(q) and the trace-conserving β′ of MATH.md §4). Deterministic and free
    of truncation: the finite-d reference between SGD and the hierarchy.

    ``vector_state=True``: ``factors`` are the factors of a truncated GNS representation
    (`momentgen.representation.factor_parts`), moved by the same flow and read through its
    state vector (`momentgen.representation.vector_moments`) instead of ``(1/d) Tr`` — the
    quadrature closure (MATH.md §8).
    ``probes``: code tuples measured as they are (not canonicalised; for a state that is not
    tracial their rotations differ), returned as ``info["probes"]`` of shape (times, probes).
    """
    from .integrate import STATE_ERRORS
    from .stepper import integrate
    from .hierarchy import build
    from .representation import vector_moments
    from .truncation import Truncation

    kind, K = model.kind, model.K
    letters_of, velocities_of = letter_matrices, factor_velocities
    moments_of = vector_moments if vector_state else trace_moments
    program = build(model, 2, [])  # the order parameters and β's words
    truncation = Truncation(program, potential, gamma, means=means)
    texts, codes = _word_codes(kind, K, words)
    trainable = [k - 1 for k in model.trainable]
    grouped = kind == "untied"
    factors = [tuple(np.array(f) for f in x) if grouped else np.array(x) for x in factors]
    shapes = [[f.shape for f in (x if grouped else (x,))] for x in factors]

    def unpack(vector):
        out, offset = list(factors), 0
        for k in trainable:
            parts = []
            for shape in shapes[k]:
                size = shape[0] * shape[1]
                parts.append(vector[offset : offset + size].reshape(shape))
                offset += size
            out[k] = tuple(parts) if grouped else parts[0]
        return out

    def pack(items):
        return np.concatenate([np.ravel(p) for k in trainable for p in (items[k] if grouped else (items[k],))])

    def order_parameters(vector):
        return moments_of(program.word_codes, letters_of(kind, unpack(vector)))

    def velocity(t, vector):
        current = unpack(vector)
        mu = moments_of(program.word_codes, letters_of(kind, current))
        coefficients = dict(zip((s.name for s in program.symbols), truncation.coefficients(mu)))
        if kind == "untied":  # finite d: β′ keeps μ(M_k) constant also with weight decay
            for k in model.trainable:
                D = mu[program.index(f"A{k}")] + mu[program.index(f"B{k}")]
                coefficients[f"beta[{k}]"] -= 2 * gamma * mu[program.index(f"M{k}")] / D
        return pack(velocities_of(model, current, coefficients))

    times = np.asarray(times, dtype=float)
    track = (lambda t, vector: truncation.track(order_parameters(vector))) if kind == "untied" else None
    run = integrate(velocity, pack(factors), times, method="DOP853", rtol=rtol, atol=atol, on_step=track,
                    recoverable=STATE_ERRORS)  # fmt: skip
    values = np.array([moments_of(codes + list(probes), letters_of(kind, unpack(vector))) for vector in run.y])
    series = {w: values[:, i] for i, w in enumerate(texts)}
    d = (factors[0][0] if grouped else factors[0]).shape[0]
    return SimulationResult(run.t, series, d, info={"nfev": run.nfev, "probes": values[:, len(codes) :],
                                                    "status": run.status, "message": run.message})  # fmt: skip


def simulate_config(config, d=None, seeds=None, progress=None, fast_points=41):
    """Run ``[sgd]`` for every seed up to ``[integrate] T``; JSON-ready dict (the ``simulate`` output).

    Series are the mean over seeds, ``spread`` their standard deviation; times are on the
    model's axis. Untied runs also report the means m_k on the fast axis t = nη. ``status`` is
    "ok", or "diverged" (``message`` says at which step) — then the series hold the times every
    seed reached, and nothing non-finite.
    """
    sgd_table, integrate = config.section("sgd"), config.section("integrate")
    d = sgd_table["d"] if d is None else d
    seeds = sgd_table["seeds"] if seeds is None else seeds
    times = np.linspace(0.0, integrate["T"], integrate["points"])
    words = _reported(config)
    fast_times = np.linspace(0.0, integrate["fast_T"], fast_points) if config.model.kind == "untied" else None
    runs = [sgd(config.model, config.loss(), config.inits(), d=d, lr=sgd_table["lr"], batch=sgd_table["batch"],
                times=times, words=words, gamma=config.section("model")["gamma"], C=config.section("model")["C"],
                seed=seed, progress=progress, fast_times=fast_times) for seed in seeds]  # fmt: skip
    reached = min(len(r.t) for r in runs)
    stack = {w: np.array([r.series[w][:reached] for r in runs]) for w in runs[0].series}
    failed = [r for r in runs if r.info["status"] != "ok"]
    out = {
        "model": config.model.kind, "time_scale": config.model.time_scale, "t": times[:reached].tolist(),
        "series": {w: v.mean(axis=0).tolist() for w, v in stack.items()},
        "spread": {w: v.std(axis=0).tolist() for w, v in stack.items()},
        "steps": runs[0].steps[:reached].tolist(), "d": d, "lr": sgd_table["lr"], "batch": sgd_table["batch"],
        "seeds": list(seeds), "seconds": sum(r.info["seconds"] for r in runs), "config_hash": config.digest,
        "status": "diverged" if failed else "ok",
        "message": f"seed {failed[0].info['seed']}: {failed[0].info['message']}" if failed else "reached the horizon",
    }  # fmt: skip
    if fast_times is not None:
        reached_fast = min(len(r.info["fast_m"]) for r in runs)
        out["fast"] = {"t": fast_times[:reached_fast].tolist(),
                       "m": np.mean([r.info["fast_m"][:reached_fast] for r in runs], axis=0).tolist(),
                       "time_scale": "t = n eta"}  # fmt: skip
    return out


def _reported(config):
    """The configuration's observables (canonical) plus every word of degree ≤ 2 it needs."""
    from .hierarchy import build

    obs = config.section("truncation")["observables"]
    program = build(config.model, 2, [])
    listed = [] if obs == "all" else [canonical(w, config.model.kind) for w in obs]
    return list(dict.fromkeys(listed + list(program.words)))
