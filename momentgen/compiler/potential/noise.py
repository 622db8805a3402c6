"""The SGD-noise second moments ``E[∇ℓ ∇ℓᵀ]`` of the finite-learning-rate term, on the loss's additive groups.

With ``ℓ = Σ_g ℓ_g`` (`quadrature._additive_groups`; e.g. one group per row of a row softmax) the outer
product splits into pairs of groups: ``E[∇ℓ∇ℓᵀ] = Σ_g E[∇ℓ_g∇ℓ_gᵀ] + Σ_{g≠h} E[∇ℓ_g∇ℓ_hᵀ]``.

* A diagonal block is an integral over the group's own directions only (2 for a softmax row at K = 2
  instead of the 4 of the whole loss), on the group's tensor rule.
* A cross block is a product of two functions of two correlated Gaussian vectors. In canonical
  coordinates (the SVD of their cross-correlation ``R = P diag(ρ) Vᵀ``) Mehler's formula gives

      E[a(u) b(v)] = Σ_α ρ^α  E[a h_α(u)] E[b h_α(v)],      h_α = Π_i He_{α_i}/√(α_i!),

  a sum of products of *projections*, each a low-dimensional integral on one group's rule. Cut at total
  order N, Cauchy–Schwarz bounds what is left by ``ρ_max^{N+1} √(E a²) √(E b²)`` (a bound, not an
  estimate); N is the smallest order whose bound is below the target. Where the groups share a
  direction (ρ_max near 1: the series would need hundreds of orders) the pair is integrated jointly over
  the union of the two groups' directions instead.

The rule level is calibrated at the first state (the geometric tail of successive levels, as for Φ) and
then fixed, so that the term is smooth along a run. The finite-learning-rate term is the first order of an
expansion in κ whose next order is O(κ) relative to it (5e-2 at κ = 0.05): its coefficients need a
relative accuracy of 1e-3, no more.
"""

import itertools
import warnings

import numpy as np
import sympy

from ...core.codegen import compile_pointwise
from .geometry import _restricted_basis

NOISE_RTOL = 1e-3
TRUNCATION = 6.0  # the rules cover [−6, 6]: Gaussian mass outside 2e-9 ≪ NOISE_RTOL
MAX_ORDER = 40  # Mehler orders beyond this: the pair is integrated jointly (ρ_max ≳ 0.84 at 1e-3)
_MAX_LEVEL = 60
_SHARED = 1e-9  # canonical correlations this close to 1 are one shared direction; below it, none


class NoiseMoments:
    """``E[∇ℓ∇ℓᵀ]`` (p, p) at a Gaussian law of the loss's variables, for `quadrature._Quadrature`.

    ``groups``: the loss's additive groups (sympy); ``features``: each group's orthonormal basis (p, f) of the
    directions it depends on; ``rule(dim, level, truncation)``: the Gaussian rule the quadrature path uses.
    """

    def __init__(self, loss, groups, features, rule, rtol):
        self.loss, self.rule = loss, rule
        self.groups, self.features = _merge_contained(groups, features)
        self.target = max(rtol, NOISE_RTOL)
        self.p = len(loss.variables)
        self._kernels, self._projectors = {}, {}
        self.level = None
        self.accuracy = 0.0  # calibration's level error, then the largest Mehler bound met (relative)

    # ---- kernels --------------------------------------------------------------------------------------
    def _gradient(self, g):
        """Pointwise ∇ℓ_g (points (n, p) → (n, p)), compiled on first use (disk cache)."""
        if g not in self._kernels:
            term, v = self.groups[g], self.loss.variables
            self._kernels[g] = compile_pointwise(
                lambda: [sympy.diff(term, x) for x in v], v, key="gradient|" + sympy.srepr(term)
            )
        return self._kernels[g]

    # ---- the expectation ------------------------------------------------------------------------------
    def outer(self, mean, F):
        """E[∇ℓ∇ℓᵀ] at G = mean + F z, z ~ N(0, I_r) (F (p, r)); the level is calibrated at the first call."""
        bases = self._bases(F)
        if self.level is None:
            self.level = self._calibrate(mean, F, bases)
        value, bound = self._outer(mean, F, bases, self.level)
        self.accuracy = max(self.accuracy, bound / _scale(value))
        return value

    def _bases(self, F):
        """Each group's directions in z (r, f): orthonormal Q_g with the group's law G = mean + F Q_g u."""
        return [_restricted_basis(F, basis) if basis.shape[1] else None for basis in self.features]

    def _outer(self, mean, F, bases, level):
        """(E[∇ℓ∇ℓᵀ], bound of its Mehler truncation in absolute terms) on rules of ``level``."""
        groups = [g for g, Q in enumerate(bases) if Q is not None]
        out = np.zeros((self.p, self.p))
        second = {}  # E[(∂_i ℓ_g)²] per group: the norms in the Mehler bound
        for g in groups:
            grads, w = self._on_rule(g, mean, F @ bases[g], level)
            block = grads.T @ (grads * w[:, None])
            second[g] = np.diag(block).clip(0)
            out += block
        bound = np.zeros((self.p, self.p))
        for g, h in itertools.combinations(groups, 2):
            cross, tail = self._cross(g, h, mean, F, bases, level, second)
            out += cross + cross.T
            bound += tail + tail.T
        return out, float(bound.max(initial=0.0))

    def _on_rule(self, g, mean, factor, level):
        z, w = self.rule(factor.shape[1], level, TRUNCATION)
        return self._gradient(g)(mean + z @ factor.T), w

    def _cross(self, g, h, mean, F, bases, level, second):
        """E[∇ℓ_g ∇ℓ_hᵀ] by Mehler's formula in canonical coordinates, and its truncation bound.

        Canonical directions with ρ = 1 are shared by the two groups: they are integrated on one rule
        ``s`` and the series runs over the others, conditionally on ``s``; where a direction that is not
        shared is too correlated for `MAX_ORDER` orders, the pair is integrated jointly."""
        P, rho, Vt = np.linalg.svd(bases[g].T @ bases[h])
        shared = int(np.sum(rho > 1 - _SHARED))
        rest = rho[shared:]
        norms = np.sqrt(np.outer(second[g], second[h]))
        pairs = len(second) * (len(second) - 1) // 2  # the bounds of all pairs add up to at most the target
        order = _mehler_order(
            float(rest.max(initial=0.0)), norms.max(initial=0.0), self.target * _largest(second) / pairs
        )
        if order is None:
            return self._joint(g, h, mean, F, bases, level), np.zeros_like(norms)
        paired = int(np.sum(rest > _SHARED))
        s, s_weights = self._rule(shared, level)
        projections = []
        for group, rotation in ((g, P), (h, Vt.T)):
            factor = F @ bases[group] @ rotation  # canonical coordinates: the shared ones first
            u, hermite, indices = self._projector(factor.shape[1] - shared, level, paired, order)
            points = (mean + s @ factor[:, :shared].T)[:, None, :] + (u @ factor[:, shared:].T)[None, :, :]
            grads = self._gradient(group)(points.reshape(-1, self.p)).reshape(len(s), len(u), self.p)
            projections.append(hermite.T[None] @ grads)
        weights = s_weights[:, None] * np.prod(rest[:paired] ** indices, axis=1)[None, :]
        a, b = (x.reshape(-1, self.p) for x in projections)
        cross = a.T @ (b * weights.reshape(-1, 1))
        return cross, float(rest.max(initial=0.0)) ** (order + 1) * norms

    def _projector(self, dim, level, paired, order):
        """(points u, weighted h_α(u) (n, n_α), multi-indices α) of the rule in ``dim`` dimensions, the series
        over its first ``paired`` coordinates to total order ``order`` (cached: the same few recur)."""
        key = (dim, level, paired, order)
        if key not in self._projectors:
            u, w = self._rule(dim, level)
            indices = _multi_indices(paired, order)
            self._projectors[key] = (u, _hermite(u[:, :paired], indices) * w[:, None], indices)
        return self._projectors[key]

    def _rule(self, dim, level):
        """The Gaussian rule in ``dim`` dimensions; one point of weight 1 in none."""
        return self.rule(dim, level, TRUNCATION) if dim else (np.zeros((1, 0)), np.ones(1))

    def _joint(self, g, h, mean, F, bases, level):
        """E[∇ℓ_g∇ℓ_hᵀ] on one rule over the union of the two groups' directions (shared directions)."""
        union, s, _ = np.linalg.svd(np.hstack([bases[g], bases[h]]), full_matrices=False)
        factor = F @ union[:, s > 1e-9 * s[0]]
        z, w = self.rule(factor.shape[1], level, TRUNCATION)
        points = mean + z @ factor.T
        a, b = self._gradient(g)(points), self._gradient(h)(points)
        return a.T @ (b * w[:, None])

    def _calibrate(self, mean, F, bases):
        """Lowest level ≥ 3 whose geometric-tail error estimate (levels L − 2, L − 1, L) is below the target."""
        values = [self._outer(mean, F, bases, level)[0] for level in (2, 3)]
        for level in range(4, _MAX_LEVEL + 1):
            values.append(self._outer(mean, F, bases, level)[0])
            scale = _scale(values[-1])
            older, change = (np.abs(b - a).max() / scale for a, b in zip(values[-3:-1], values[-2:]))
            rate = change / older if older > 0 else 0.0
            error = change * max(1.0, rate / (1 - rate) if rate < 0.9 else 10.0)
            if error <= self.target:
                self.accuracy = max(self.accuracy, error)
                return level
        warnings.warn(
            f"the noise second moments of loss {self.loss.name!r} stopped at quadrature level {level} "
            f"(relative error about {error:.2g}) short of {self.target:g}",
            stacklevel=5,
        )
        self.accuracy = max(self.accuracy, error)
        return level


def _merge_contained(groups, features):
    """Groups whose directions lie in another group's: added to it (∇ of a sum is the sum of the ∇s), so that
    fewer pairs remain; widest first."""
    merged, bases = [], []
    for g in sorted(range(len(groups)), key=lambda g: -features[g].shape[1]):
        B = features[g]
        host = next((k for k, A in enumerate(bases) if np.abs(B - A @ (A.T @ B)).max(initial=0.0) <= 1e-9), None)
        if host is None:
            merged.append(groups[g])
            bases.append(B)
        else:
            merged[host] = merged[host] + groups[g]
    return merged, bases


def _mehler_order(rho, norm, target):
    """Smallest N with ``ρ^{N+1} · norm ≤ target`` (0 when ρ = 0), or None beyond `MAX_ORDER`."""
    if rho <= 0 or norm <= target:
        return 0
    order = int(np.ceil(np.log(target / norm) / np.log(rho))) - 1 if rho < 1 else MAX_ORDER + 1
    return max(order, 0) if order <= MAX_ORDER else None


def _multi_indices(m, order):
    """Multi-indices α ∈ ℕ^m with |α| ≤ order, (n, m) (one empty index when m = 0)."""
    indices = [a for a in itertools.product(range(order + 1), repeat=m) if sum(a) <= order]
    return np.array(indices, int).reshape(len(indices), m)


def _hermite(z, indices):
    """h_α(z) = Π_i He_{α_i}(z_i)/√(α_i!) at points z (n, m) for each row α of ``indices``: (n, len(indices))."""
    order = int(indices.max(initial=0))
    H = np.ones((z.shape[1], len(z), order + 1))
    if order >= 1:
        H[:, :, 1] = z.T
    for n in range(1, order):
        H[:, :, n + 1] = (z.T * H[:, :, n] - np.sqrt(n) * H[:, :, n - 1]) / np.sqrt(n + 1)
    out = np.ones((len(z), len(indices)))
    for i in range(z.shape[1]):
        out *= H[i][:, indices[:, i]]
    return out


def _largest(second):
    return max((float(v.max(initial=0.0)) for v in second.values()), default=0.0)


def _scale(value):
    return max(float(np.abs(value).max(initial=0.0)), 1e-300)
