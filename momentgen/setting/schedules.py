"""Learning-rate and batch-size schedules, and the time change they bring (MATH.md §11).

A run of ``N`` SGD steps — the steps a constant-lr run needs to reach ``T`` (tied ``N = T d/(4η)``,
the τ-axis kinds ``N = T d/η``) — uses ``η_n = η f(n/N)`` and ``B_n = B b(n/N)`` at step n. Results
are reported on the *nominal* axis ``t = 4nη/d`` (τ = nη/d), proportional to the samples seen. The
hierarchy runs on the *integrated* axis ``s = T F(t/T)``, ``F(u) = ∫₀ᵘ f``, on which the κ → 0
hierarchy and the weight decay are those of a constant rate, and the finite-learning-rate term
carries ``κ(s) = κ₀ f(u)/b(u)`` with ``κ₀ = ηd/B`` (`TimeChange`).

`Schedule` is one multiplier f(u) on u = n/N ∈ [0, 1]:

* ``constant`` — f = 1;
* ``cosine`` — ``final + (1 − final)(1 + cos πv)/2``; ``linear`` — ``1 − (1 − final) v``; where
  ``v = (u − warmup)/(1 − warmup)`` is the progress after the warm-up;
* ``step`` — multiplied by ``factor`` at each of the ``milestones`` (fractions of the run);
* ``wsd`` — warm-up, stable, decay: 1 until the last ``decay`` fraction of the run, then linear down to
  ``final`` at u = 1;
* ``power`` — ``final + (1 − final)(1 − v)^exponent`` (the optimal form of the functional scaling-law papers);
* ``from-file`` — the table ``(u, f)`` of an .npz, linear between its points; ``table`` — the same from an
  inline table ``{u = […], f = […]}`` (what a Python callable ``f(u)`` given to the API becomes, `tabulate`);

times a linear warm-up ``min(1, u/warmup)`` (every form but the tabulated ones, whose tables hold their own).

Momentum (heavy ball ``v ← βv − ηg``, ``W ← W + v``, MATH.md §14) is, to first order in κ, SGD at
``η/(1 − β)``: the time axis and κ of such a run are those of `effective_lr` (one place for the rule).
"""

from dataclasses import dataclass
from functools import cached_property

import numpy as np

__all__ = [
    "FORMS",
    "TABULATED",
    "Schedule",
    "TimeChange",
    "CONSTANT",
    "effective_lr",
    "kappa_of",
    "lr_for_kappa",
    "axis_lr_for_kappa",
    "raw_lr",
    "tabulate",
]

FORMS = ("constant", "cosine", "linear", "step", "wsd", "power", "from-file", "table")
TABULATED = ("from-file", "table")  # forms read from a table (u, f): no warm-up of their own
#: points at which a Python callable f(u) is tabulated (`tabulate`)
TABLE_POINTS = 1025
_CELLS = 2**14  # cells of the table F is integrated on (midpoint rule; breakpoints are cell edges)


@dataclass(frozen=True)
class Schedule:
    """A multiplier ``f(u)`` of a base value over the fraction ``u = n/N`` of the run (see the module
    docstring); ``table`` is the tabulated forms' ``(u, f)``, each a tuple of floats."""

    form: str = "constant"
    warmup: float = 0.0
    final: float = 0.0
    milestones: tuple = ()
    factor: float = 0.1
    table: tuple = None
    decay: float = 0.2
    exponent: float = 1.0

    @property
    def constant(self):
        """True when f = 1 everywhere (then no time change is needed)."""
        return self.form == "constant" and self.warmup == 0.0

    def __call__(self, u):
        """f at fractions ``u`` (clipped to [0, 1]); an array like ``u``."""
        u = np.clip(np.asarray(u, dtype=float), 0.0, 1.0)
        if self.table is not None:
            return np.interp(u, *self.table)
        ramp = np.minimum(1.0, u / self.warmup) if self.warmup > 0 else np.ones_like(u)
        return ramp * self._main(u)

    def _main(self, u):
        v = np.clip((u - self.warmup) / (1.0 - self.warmup), 0.0, 1.0)
        if self.form == "cosine":
            return self.final + (1.0 - self.final) * 0.5 * (1.0 + np.cos(np.pi * v))
        if self.form == "linear":
            return 1.0 - (1.0 - self.final) * v
        if self.form == "step":
            return self.factor ** np.searchsorted(np.asarray(self.milestones, float), u, side="right")
        if self.form == "wsd":
            into_decay = np.clip((u - (1.0 - self.decay)) / self.decay, 0.0, 1.0)
            return 1.0 - (1.0 - self.final) * into_decay
        if self.form == "power":
            return self.final + (1.0 - self.final) * (1.0 - v) ** self.exponent
        return np.ones_like(u)

    @property
    def peak(self):
        """The largest multiplier over the run."""
        return float(self(self.knots).max())

    @cached_property
    def knots(self):
        """Cell edges on [0, 1]: a uniform grid plus every breakpoint (warm-up end, milestones, table points)."""
        points = [np.linspace(0.0, 1.0, _CELLS + 1), [self.warmup], list(self.milestones)]
        if self.form == "wsd":
            points.append([1.0 - self.decay])
        if self.table is not None:
            points.append(self.table[0])
        return np.unique(np.clip(np.concatenate([np.asarray(p, float) for p in points]), 0.0, 1.0))

    @cached_property
    def _integral_table(self):
        """``F`` at the knots, by the midpoint rule (each midpoint lies inside one smooth piece)."""
        edges = self.knots
        middle = 0.5 * (edges[1:] + edges[:-1])
        return np.concatenate([[0.0], np.cumsum(self(middle) * np.diff(edges))])

    def integral(self, u):
        """``F(u) = ∫₀ᵘ f``: the table to the last knot below u, then the midpoint rule on the rest of the
        cell (exact on constant and linear pieces, O(1e-10) on cosine)."""
        u = np.clip(np.asarray(u, dtype=float), 0.0, 1.0)
        cell = np.clip(np.searchsorted(self.knots, u, side="right") - 1, 0, len(self.knots) - 1)
        start = self.knots[cell]
        return self._integral_table[cell] + self(0.5 * (start + u)) * (u - start)

    def fraction_at(self, F):
        """The u where the integral reaches ``F`` (the inverse of `integral`; the first such u where f = 0)."""
        table, F = self._integral_table, np.asarray(F, dtype=float)
        keep = np.concatenate([[True], np.diff(table) > 0])
        u = np.interp(F, table[keep], self.knots[keep])
        rate = self(u)
        with np.errstate(divide="ignore", invalid="ignore"):  # one Newton step where f > 0
            step = np.where(rate > 0, (self.integral(u) - F) / rate, 0.0)
        return np.clip(u - step, 0.0, 1.0)


CONSTANT = Schedule()


@dataclass(frozen=True)
class TimeChange:
    """The nominal axis ``t`` (∝ samples) and the integrated axis ``s`` of a scheduled run with horizon
    ``T`` (both on the kind's axis, ``t = 4nη/d`` tied, ``τ = nη/d`` the others); ``lr`` and ``batch``
    are the two `Schedule` s."""

    lr: Schedule
    batch: Schedule
    T: float

    def integrated(self, t):
        """s at nominal times ``t``: ``T F(t/T)``."""
        return self.T * self.lr.integral(np.asarray(t, dtype=float) / self.T)

    def nominal(self, s):
        """Nominal t at integrated times ``s`` (the inverse of `integrated`)."""
        return self.T * self.lr.fraction_at(np.asarray(s, dtype=float) / self.T)

    def kappa_factor(self, s):
        """``κ(s)/κ₀ = f(u)/b(u)`` at the integrated time ``s`` (u = t/T): the finite-learning-rate term's
        multiplier."""
        u = self.nominal(s) / self.T
        return float(self.lr(u) / self.batch(u))

    @property
    def peak_kappa_factor(self):
        """The largest ``f/b`` over the run (κ₀ times it must stay below 1)."""
        u = np.union1d(self.lr.knots, self.batch.knots)
        return float(np.max(self.lr(u) / self.batch(u)))


# κ and the learning rates, the one place they are converted (MATH.md §9, §14): a heavy-ball run at (η, β) follows
# the SGD of η_eff = η/(1 − β); its time axis (tied t = 4nη_eff/d) and κ = η_eff d/B are read with η_eff.


def effective_lr(lr, momentum=0.0):
    """The learning rate whose SGD a heavy-ball run at ``(lr, momentum)`` follows to first order in κ (MATH.md
    §14): ``η/(1 − β)``. The time axis (tied ``t = 4nη_eff/d``) and κ = η_eff d/B of such a run are read with it."""
    return lr / (1.0 - momentum)


def raw_lr(axis_lr, momentum=0.0):
    """The raw step η of a heavy-ball run whose effective rate is ``axis_lr`` (`effective_lr`'s inverse)."""
    return axis_lr * (1.0 - momentum)


def kappa_of(lr, d, batch, momentum=0.0):
    """κ = η_eff d/B of the finite-learning-rate term (MATH.md §9, §14)."""
    return effective_lr(lr, momentum) * d / batch


def axis_lr_for_kappa(kappa, d, batch):
    """The effective rate η_eff = κB/d of a run at κ (its time axis is read with it)."""
    return kappa * batch / d


def lr_for_kappa(kappa, d, batch, momentum=0.0):
    """The raw step η of a run at κ (`kappa_of`'s inverse): ``κ B (1 − β)/d``."""
    return raw_lr(axis_lr_for_kappa(kappa, d, batch), momentum)


def tabulate(f, points=TABLE_POINTS):
    """The table ``{"u": […], "f": […]}`` of a Python callable ``f(u)`` on ``points`` equally spaced fractions of
    the run (linear between them, like a from-file table): the ``table`` form of a schedule. ``f`` is called on each
    u (a float); a value that is not a finite number ≥ 0 is a ValueError naming the u."""
    u = np.linspace(0.0, 1.0, points)
    values = []
    for x in u:
        try:
            value = float(f(float(x)))
        except Exception as error:  # the user's function: any failure becomes one line
            raise ValueError(f"the schedule function failed at u = {x:g}: {type(error).__name__}: {error}") from None
        if not (np.isfinite(value) and value >= 0):
            raise ValueError(f"the schedule function returned {value!r} at u = {x:g}; a multiplier is finite and ≥ 0")
        values.append(value)
    return {"u": u.tolist(), "f": values}
