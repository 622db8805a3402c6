"""The pre-activation mean of a kind, as the theory side sees it (MATH.md §4): none, or slaved to the moments.

A centred kind (tied, direct, symmetric) has pre-activations of mean 0: Φ is read at (Q1, Q2), there is no
fast phase and nothing to track. A kind with a mean (untied) has ``m_k = μ(M_k)·√d`` of order one, which a
fast phase on ``t = nη`` drives to the slaved ``m*(q)`` (a minimiser of Φ in the trainable means); the slow
phase reads Φ at ``(Q1, Q2, m*(q))``, with m* found by Newton from the warm start of the branch the run is on
(`RunState`, advanced by `momentgen.compiler.truncation.Truncation.track` after each accepted step).

`mean_of` picks the role from the kind once; `momentgen.compiler.truncation.Truncation` and the solvers call the role,
never the kind's ``centred`` flag.
"""

import warnings
from dataclasses import dataclass, replace

import numpy as np

from ..core.errors import PotentialError
from ..core.stepper import integrate

__all__ = ["RunState", "NoMean", "SlavedMean", "mean_of"]


@dataclass(frozen=True)
class RunState:
    """What the right-hand side reads besides ``(t, y)``, as an explicit, immutable value.

    ``m``: the warm start of the slaved mean m*(q) — the branch the run is on (MATH.md §4: m* can bifurcate;
    zeros for a centred kind, which reads no mean). ``level``: the quadrature rule's level the potential is
    evaluated at (None: the potential's current level — the exact path has none; a rule not yet calibrated
    is calibrated at the first state it meets). ``Truncation.rhs(t, y, state)`` is a pure function of its three
    arguments; a run advances the state only by `momentgen.compiler.truncation.Truncation.track` after an accepted step,
    and the rule's level only in the explicit step `momentgen.compiler.truncation.Truncation.refine` (the audit of the
    far states a run met).
    """

    m: np.ndarray
    level: int = None


class NoMean:
    """A centred kind: no mean to slave, no fast phase, nothing to track."""

    has_mean = False

    def state_and_value(self, truncation, Q1, Q2, m0):
        """((Q1, Q2, None), Φ and its derivatives at (Q1, Q2)); ``m0`` is not read."""
        return (Q1, Q2, None), truncation.potential.at(Q1, Q2)

    def follow(self, truncation, y, state):
        """The warm start after a step to ``y``: nothing to follow (``state.m``, unread)."""
        return state.m

    def slaving_rates(self, truncation, y):
        return np.zeros(0)

    def through_mean(self, truncation, second, where, n_columns):
        """The part of d(∂Φ/∂Q)/dy that goes through the mean: none."""
        return 0.0

    def events(self, truncation, y0):
        """Stopping events of a run: none of its own."""
        return []

    def fast_phase(self, truncation, y0, T, **tolerances):
        """The fast phase of a centred kind: none (``{}``)."""
        return {}


class SlavedMean:
    """A kind with a mean: Φ at the slaved m*(q) of the tracked branch (MATH.md §4)."""

    has_mean = True

    def state_and_value(self, truncation, Q1, Q2, m0):
        """((Q1, Q2, m*), Φ and its derivatives there), m* by Newton from the warm start ``m0``."""
        m, value = truncation.potential.m_star_with_value(Q1, Q2, m0, truncation.trainable)
        return (Q1, Q2, m), value

    def follow(self, truncation, y, state):
        """The warm start after a step to ``y``: m*(q(y)) by Newton from ``state.m`` (the branch followed)."""
        return truncation.slaved_mean(y, state)

    def slaving_rates(self, truncation, y):
        """The fast phase's rates D_k of the trainable indices (untied ``t^A_k + t^B_k``; β ∝ 1/D_k)."""
        return truncation.definition.slaving_rates(truncation.moments(y), truncation.model)[
            np.array(truncation.trainable) - 1
        ]

    def through_mean(self, truncation, second, where, n_columns):
        """The part of d(∂Φ/∂Q)/dy that goes through m*(q): Qm · dm*/dy, dm*/dQ = −Φ_mm⁻¹ ∂b/∂Q."""
        K = truncation.model.K
        idx = np.array(truncation.trainable) - 1
        dm = np.zeros((K, n_columns))  # dm*_n / dy_j
        inverse = np.linalg.inv(second.mm[np.ix_(idx, idx)])
        for s_ in (0, 1):
            for a in range(K):
                for b in range(K):
                    dm[idx, where[int(truncation._Q[s_, a, b])]] -= inverse @ second.Qm[s_, a, b, idx]
        return np.einsum("rkln,nj->rklj", second.Qm, dm)

    def events(self, truncation, y0):
        """The student's collapse: its smallest slaving rate below 1e-3 of its start (β singular at 0), as
        ``(function, status, message)``."""
        collapse = self.slaving_rates(truncation, y0).min()
        return [
            (
                lambda t, y: self.slaving_rates(truncation, y).min() - 1e-3 * collapse,
                "left-feasible-set",
                "the student collapsed: its slaving rate D (t^A + t^B) fell below 1e-3 of its initial "
                "value (beta = -psi/D is singular at 0); the truncation is not valid beyond",
            )
        ]

    def fast_phase(self, truncation, y0, T, points=101, rtol=1e-10, atol=1e-12):
        """Fast phase on ``t = nη``: ``dm_k/dt = −D_k ∂Φ/∂m_k (m, q(0))`` for trainable k, moments at ``y0``
        (an array, or a function giving it: a centred kind never computes them).

        Returns ``{"fast_t", "fast_m", "m_star"}``; the branch the slow phase starts on is the end point,
        polished to m*(q0) by Newton (``truncation.state`` is moved there).
        """
        y0 = y0() if callable(y0) else y0
        idx = np.array(truncation.trainable) - 1
        Q1, Q2 = truncation.order_parameters(y0)
        D = truncation.definition.slaving_rates(truncation.moments(y0), truncation.model)
        potential = truncation.potential

        def velocity(t, m):
            dm = np.zeros_like(m)
            dm[idx] = -(D * potential.at(Q1, Q2, m).b)[idx]
            return dm

        run = integrate(velocity, truncation.state.m, np.linspace(0.0, T, points), method="LSODA", rtol=rtol, atol=atol)
        if run.status != "ok":
            raise PotentialError(f"the fast phase failed: {run.message}")
        end = run.y[-1]
        m_star = potential.m_star(Q1, Q2, end, truncation.trainable)
        truncation.state = replace(truncation.state, m=m_star, level=potential.rule_level)
        if np.abs(m_star - end).max() > 1e-6 * max(1.0, np.abs(m_star).max()):
            warnings.warn(
                f"the fast phase had not converged at t = {T:g} (m = {end.tolist()}, m* = {m_star.tolist()}): "
                "raise fast_T, or start off an unstable symmetric point (an exactly symmetric m stays there at "
                "d = ∞)",
                stacklevel=3,
            )
        return {"fast_t": run.t, "fast_m": run.y, "m_star": m_star.copy()}


def mean_of(definition):
    """The mean role of a kind (`NoMean` for a centred kind, else `SlavedMean`): the one place that reads
    ``centred`` on the theory side."""
    return NoMean() if definition.centred else SlavedMean()
