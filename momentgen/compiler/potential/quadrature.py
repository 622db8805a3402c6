"""The quadrature path of `potential.Potential`: calibrated Gaussian rules (tensor trapezoidal, Smolyak
sparse grids) over the directions the loss depends on, and the loss's additive groups."""

import warnings
from functools import lru_cache
from itertools import combinations_with_replacement, permutations, product
from math import comb

import numba
import numpy as np
import sympy

from ...core.codegen import compile_weighted_sum
from ...core.errors import NonFinitePotential, UnsupportedLoss
from .geometry import _psd_root, _restricted_basis, kron
from .noise import NoiseMoments
from .values import PotentialValue

_TENSOR_MAX_DIM = 4
_TRUNCATION = 10.0  # the trapezoidal rule covers [-10, 10]: Gaussian mass outside ~1e-23
_MAX_POINTS = 400_000
_MAX_LEVEL = 200
_DIVERGED = 1e-3  # a rule still changing this much at its finest level: Φ is (probably) infinite


class _Quadrature:
    """Gaussian expectations of ℓ, ∇ℓ, ∇²ℓ on a fixed rule over the relevant directions."""

    def __init__(self, potential):
        self.potential = potential
        loss = potential.loss
        v = loss.variables
        self.p = len(v)
        self.groups = _additive_groups(loss.expr)

        def outputs():
            out = []
            for term in self.groups:
                grad = [sympy.diff(term, x) for x in v]
                hess = [sympy.diff(grad[a], v[b]) for a in range(self.p) for b in range(a, self.p)]
                bad = [h for h in hess if h.has(sympy.DiracDelta, sympy.Derivative, sympy.Subs)]
                if bad:
                    raise UnsupportedLoss(
                        f"the second derivatives of loss {loss.name!r} are not ordinary functions (e.g. {bad[0]}): "
                        "Price's theorem needs a loss twice differentiable without Dirac masses; "
                        "use a smooth activation (softplus, tanh, erf) instead of relu/abs"
                    )
                out.append([term] + grad + hess)
            return out

        self._key = sympy.srepr(self.groups)
        self.kernel = compile_weighted_sum(outputs, v, key="value-gradient-hessian|" + self._key)
        self.upper = np.triu_indices(self.p)
        self.features = [self._feature_basis(g) for g in range(len(self.groups))]
        self.level = potential.level
        self.lowest = potential.level  # the first calibrated (or the fixed) level: no state may ask for less
        self.fixed = potential.level is not None  # a level the user fixed is never changed
        self.frozen = False
        self.verified = []  # signatures of the states where the level was checked
        self.pending = []  # far states met while frozen: (signature, mean, factors)
        self.accuracy = 0.0  # largest relative change level − 1 → level seen at a checked state
        self.noise = None  # `NoiseMoments`, made on the first finite-learning-rate call

    def _feature_basis(self, group):
        """Orthonormal basis (p, f) of the directions a term depends on: the span of its ∇ at random points."""
        rng = np.random.default_rng(self.potential.seed)
        probes = rng.standard_normal((3 * self.p + 3, self.p))
        origin, identity = np.zeros(self.p), np.eye(self.p)
        grads = np.array([self.kernel(x[None, :], origin, identity, np.ones(1), group)[1 : 1 + self.p] for x in probes])
        _, s, Vt = np.linalg.svd(grads, full_matrices=False)
        rank = int(np.sum(s > 1e-9 * s[0])) if s[0] > 0 else 0
        return Vt[:rank].T

    def _factors(self, m, Q1, Q2, bases=None):
        """Mean (p,) of G and, per term group (or per basis of ``bases``), the covariance factor
        restricted to its directions."""
        pairs = self.potential._pairs
        blocks = [kron(pairs.sym_root, _psd_root(Q1 + Q2, "Q1 + Q2", Q1, Q2))]
        if pairs.anti_root.size and not np.array_equal(Q1, Q2):
            blocks.append(kron(pairs.anti_root, _psd_root(Q1 - Q2, "Q1 - Q2", Q1, Q2)))
        F = np.hstack(blocks)
        restricted = []
        for basis in self.features if bases is None else bases:
            if basis.shape[1] >= F.shape[1]:
                restricted.append(F)
                continue
            restricted.append(F @ _restricted_basis(F, basis))
        return pairs.mean(m), restricted

    def _moments(self, mean, factors, level):
        out = 0
        for group, F in enumerate(factors):
            z, w = _rule(F.shape[1], level)
            out = out + self.kernel(z, mean, F, w, group)
        hess = np.zeros((self.p, self.p))
        hess[self.upper] = hess[self.upper[::-1]] = out[1 + self.p :]  # the upper triangle, mirrored
        return out[0], out[1 : 1 + self.p], hess

    def _value(self, mean, factors, level):
        phi, grad, hess = self._moments(mean, factors, level)
        return PotentialValue(phi, *self.potential._pairs.contract(grad, hess, self.potential.K))

    def _jet_kernel(self):
        """Kernel of the 3rd and 4th derivatives of each term group (compiled on first use)."""
        if getattr(self, "_jet", None) is None:
            v = self.potential.loss.variables
            self._combos3 = list(combinations_with_replacement(range(self.p), 3))
            self._combos4 = list(combinations_with_replacement(range(self.p), 4))

            def groups():
                out = []
                for term in self.groups:
                    used = term.free_symbols
                    out.append(
                        [
                            sympy.diff(term, *[v[a] for a in combo])
                            if {v[a] for a in combo} <= used
                            else sympy.Integer(0)
                            for combo in self._combos3 + self._combos4
                        ]
                    )
                return out

            self._jet = compile_weighted_sum(groups, v, key="third-fourth|" + self._key)
        return self._jet

    # ---- the noise second moments E[∇ℓ ∇ℓᵀ] (finite learning rate) ------------------------------
    def gradient_outer(self, m, Q1, Q2):
        """E[∇ℓ ∇ℓᵀ] (p, p) at a state (`noise.NoiseMoments`: pairs of additive groups, level fixed at the
        first call)."""
        if self.noise is None:
            stacked = np.hstack(self.features)
            basis, s, _ = np.linalg.svd(stacked, full_matrices=False)
            self._noise_basis = basis[:, s > 1e-9 * s[0]] if s.size and s[0] > 0 else basis[:, :0]
            self.noise = NoiseMoments(
                self.potential.loss,
                self.groups,
                self.features,
                _rule,
                self.potential.rtol,
            )
        mean, (F,) = self._factors(m, Q1, Q2, bases=[self._noise_basis])
        return self.noise.outer(mean, F)

    def second(self, m, Q1, Q2):
        mean, factors = self._factors(m, Q1, Q2)
        self._control(mean, factors)
        jet = self._jet_kernel()
        _, _, hess = self._moments(mean, factors, self.level)
        out = 0
        for group, F in enumerate(factors):
            z, w = _rule(F.shape[1], self.level)
            out = out + jet(z, mean, F, w, group)
        n3 = len(self._combos3)
        third = _symmetric_tensor(out[:n3], self._combos3, self.p, 3)
        fourth = _symmetric_tensor(out[n3:], self._combos4, self.p, 4)
        return self.potential._pairs.contract_second(hess, third, fourth, self.potential.K)

    # ---- error control along the path ------------------------------------------------------
    # The rule is calibrated at the first state. A state is *near* a checked one when the Gram
    # matrices of its restricted covariance factors and its mean are within 40 % (20 % in scale) of
    # that state's: the trapezoidal rule's accuracy depends on the state only through them. At a far state
    # the level is checked (levels L − 1 and L must agree to rtol) and raised when it fails,
    # unless the potential is frozen (a run in progress, whose right-hand side must stay a pure
    # function of the state): then the state is kept for `audit`, which checks it afterwards.

    def _signature(self, mean, factors):
        """What the rule's accuracy depends on: each group's Gram matrix FᵀF (the covariance in the
        directions it integrates over) and the mean — cheap, no decomposition."""
        return np.concatenate([(F.T @ F).ravel() for F in factors] + [mean])

    def _near(self, signature, others):
        """Within 40 % of a checked state in the Gram matrices (20 % in their scale) and the mean."""
        return bool(others) and _near_any(signature, np.array(others))

    def _control(self, mean, factors):
        """Calibrate at the first state; check (or, frozen, remember) states far from the checked ones."""
        if self.level is None:
            self.level = self.lowest = self._calibrate(mean, factors, 2)
            self.verified.append(self._signature(mean, factors))
            return
        if self.fixed:
            return
        signature = self._signature(mean, factors)
        if self._near(signature, self.verified):
            return
        if self.frozen:
            if not self._near(signature, [p[0] for p in self.pending]):
                self.pending.append((signature, mean, factors))
            return
        self._check(signature, mean, factors)

    def _check(self, signature, mean, factors):
        """Keep the level if levels L − 1 and L agree to rtol at this state, else raise it. True if kept."""
        change = self._change(mean, factors, self.level)
        kept = change <= self.potential.rtol
        if kept:
            self.accuracy = max(self.accuracy, change)
        else:
            self.level = self._calibrate(mean, factors, self.level + 1)
        self.verified.append(signature)
        return kept

    def audit(self):
        """Check the far states met while frozen; raise the level where needed. True if it stood."""
        pending, self.pending = self.pending, []
        return all([self._check(*p) for p in pending])

    def _change(self, mean, factors, level, known=None):
        """Relative error of ``level`` from the changes c between levels L − 2, L − 1, L: the change
        ``c_L`` itself, or — where the trapezoidal rule converges slowly (geometric rate
        ``ρ = c_L/c_{L−1}`` above ½) — its geometric tail ``c_L ρ/(1 − ρ)`` (softmax at
        q = [[6, 2], [2, 5]]: ρ ≈ 0.58, where the plain change is 1.4× below the error). ``known``: values by
        level at this state already computed (a calibration walks up the levels: each is computed once)."""
        known = {} if known is None else known
        for lv in (level - 2, level - 1, level):
            if lv not in known:
                known[lv] = self._value(mean, factors, lv)
        values = [known[lv] for lv in (level - 2, level - 1, level)]
        scale = _scale(values[-1])
        if not np.isfinite(scale):
            return 0.0  # evaluate() reports the non-finite value with the state
        older, change = (_difference(a, b) / scale for a, b in zip(values[:-1], values[1:]))
        rate = change / older if older > 0 else 0.0
        return change * max(1.0, rate / (1 - rate) if rate < 0.9 else 10.0)

    def _calibrate(self, mean, factors, start):
        """Lowest level ≥ ``start`` whose result changes by < rtol from the level below."""
        dim = max(F.shape[1] for F in factors)
        level, known = max(3, start), {}
        while True:
            change = self._change(mean, factors, level, known)
            if change <= self.potential.rtol:
                self.accuracy = max(self.accuracy, change)
                return level
            if len(_rule(dim, level + 1)[1]) > _MAX_POINTS or level >= _MAX_LEVEL:
                if change > _DIVERGED:
                    raise NonFinitePotential(
                        f"the Gaussian expectation Phi of loss {self.potential.loss.name!r} does not converge "
                        "(relative "
                        f"change {change:.2g} between quadrature levels at the finest, {level}, in {dim} "
                        "dimensions): it may be infinite at this state (e.g. exp(G**2) once Var G >= 1/2), or "
                        f"too rough for a rule in {dim} dimensions; change the loss or the scales"
                    )
                warnings.warn(
                    f"quadrature for loss {self.potential.loss.name!r} stopped at level {level} "
                    f"(dimension {dim}) short of rtol={self.potential.rtol:g}: relative change "
                    f"{change:.2g}",
                    stacklevel=4,
                )
                self.accuracy = max(self.accuracy, change)
                return level
            level += 1

    def evaluate(self, m, Q1, Q2, estimate_error):
        mean, factors = self._factors(m, Q1, Q2)
        self._control(mean, factors)
        value = self._value(mean, factors, self.level)
        if estimate_error:  # the next-coarser rule's distance: a conservative error estimate
            value.error = _difference(self._value(mean, factors, self.level - 1), value) if self.level > 1 else np.inf
        return value


@numba.njit(cache=True)
def _near_any(signature, others):
    """Whether some row of ``others`` is within 0.4·max(its largest entry in size, 0.05) of ``signature`` in every
    entry (compiled: it runs at every evaluation)."""
    for i in range(others.shape[0]):
        tolerance = 0.4 * max(np.abs(others[i]).max(), 0.05)
        if np.all(np.abs(others[i] - signature) <= tolerance):
            return True
    return False


def _additive_groups(expr):
    """Split ℓ into sums of top-level terms that depend on the same variables.

    Each group is integrated over its own (often much smaller) set of directions: a
    row-softmax loss on L = 2 tokens is a sum over rows, each row a 2-dimensional integral
    for K = 2 instead of one 4-dimensional one. Where multiplying out each top-level term
    (a square of a sum of heads, say) makes the largest group depend on fewer variables, the
    expanded terms are grouped instead: the multi-head softmax loss with four heads is then
    a sum of 2-dimensional integrals (pairs of heads) instead of 4-dimensional ones (all
    heads of a row): fewer points of a much cheaper integrand (`benchmarks/bench_potential.py`
    measures it).
    """
    plain = _group_terms(sympy.Add.make_args(expr))
    if sum(_expanded_size(term) for term in sympy.Add.make_args(expr)) <= _MAX_EXPANDED_TERMS:
        expanded = _group_terms(
            [
                part
                for term in sympy.Add.make_args(expr)
                for part in sympy.Add.make_args(sympy.expand(term, deep=False, **_EXPAND_PRODUCTS))
            ]
        )
        if _widest(expanded) < _widest(plain):
            return expanded
    return plain


_MAX_EXPANDED_TERMS = 512  # expand only when it cannot blow up the kernel
_EXPAND_PRODUCTS = dict(mul=True, multinomial=True, power_base=False, power_exp=False, log=False)


def _group_terms(terms):
    """The terms summed by the variables they depend on; a constant part (label noise's σ², an expression's + 1) is
    added to the first group, where it integrates to itself (the rule's weights sum to 1)."""
    groups = {}
    for term in terms:
        key = frozenset(term.free_symbols)
        groups[key] = groups.get(key, 0) + term
    constant = groups.pop(frozenset(), 0)
    out = list(groups.values()) or [0]
    out[0] = out[0] + constant
    return out


def _widest(groups):
    return max(len(g.free_symbols) for g in groups)


def _expanded_size(term):
    """How many terms multiplying out ``term`` at its top level gives (an upper bound)."""
    if term.is_Pow and term.base.is_Add and term.exp.is_Integer and term.exp > 1:
        return comb(len(term.base.args) + int(term.exp) - 1, int(term.exp))
    if term.is_Mul:
        size = 1
        for factor in term.args:
            size *= _expanded_size(factor)
        return size
    return len(term.args) if term.is_Add else 1


@lru_cache(maxsize=64)
def _rule(dim, level, truncation=_TRUNCATION):
    """Points (n, dim) and weights (n,) of the level-``level`` rule for N(0, I_dim) (tensor rules on
    [−truncation, truncation]); cached, do not modify."""
    return _tensor_rule(dim, level, truncation) if dim <= _TENSOR_MAX_DIM else _sparse_rule(dim, level)


def _symmetric_tensor(values, combos, p, order):
    """Full symmetric tensor of shape (p,)*order from values on sorted index combinations."""
    out = np.zeros((p,) * order)
    for value, combo in zip(values, combos):
        for perm in set(permutations(combo)):
            out[perm] = value
    return out


def _tensor_rule(dim, level, truncation=_TRUNCATION):
    """Tensor trapezoidal rule with ``2·level + 2`` nodes per dimension on [−truncation, truncation].

    For integrands analytic in a strip (softmax, tanh, erf) the trapezoidal rule under the
    Gaussian weight converges geometrically in the node count, where Gauss–Hermite only
    converges root-exponentially; successive levels then differ by about the coarser
    level's error, which makes that difference a conservative error estimate.
    Weights below 1e-18 of the largest (the far corners) are pruned.
    """
    x = np.linspace(-truncation, truncation, 2 * level + 2)
    w = (x[1] - x[0]) * np.exp(-(x**2) / 2) / np.sqrt(2 * np.pi)
    points = np.stack([g.ravel() for g in np.meshgrid(*[x] * dim, indexing="ij")], axis=1)
    weights = np.prod(np.meshgrid(*[w] * dim, indexing="ij"), axis=0).ravel()
    keep = weights > 1e-18 * weights.max()
    return points[keep], weights[keep]


def _sparse_rule(dim, level):
    """Smolyak sparse grid (combination technique) of Gauss–Hermite rules with 2i − 1 nodes.

    ``A(d + ℓ, d) = Σ_{d+ℓ−d+1 ≤ |i| ≤ d+ℓ} (−1)^{d+ℓ−|i|} C(d−1, d+ℓ−|i|) ⊗_j U^{i_j}``;
    coincident points (the shared centre) are merged.
    """
    rules = {i: np.polynomial.hermite_e.hermegauss(2 * i - 1) for i in range(1, level + 2)}
    q = dim + level
    points, weights = [], []
    for index in product(range(1, level + 2), repeat=dim):
        total = sum(index)
        if not max(dim, q - dim + 1) <= total <= q:
            continue
        factor = (-1) ** (q - total) * comb(dim - 1, q - total)
        xs = [rules[i][0] for i in index]
        ws = [rules[i][1] / np.sqrt(2 * np.pi) for i in index]
        points.append(np.stack([g.ravel() for g in np.meshgrid(*xs, indexing="ij")], axis=1))
        weights.append(factor * np.prod(np.meshgrid(*ws, indexing="ij"), axis=0).ravel())
    points, weights = np.vstack(points), np.concatenate(weights)
    unique, inverse = np.unique(np.round(points, 12), axis=0, return_inverse=True)
    return unique, np.bincount(inverse.ravel(), weights=weights, minlength=len(unique))


def _difference(a, b):
    return float(
        max(
            abs(a.phi - b.phi),
            *(
                np.max(np.abs(x - y))
                for x, y in ((a.dQ1, b.dQ1), (a.dQ2, b.dQ2), (a.b, b.b), (a.m_hessian, b.m_hessian))
            ),
        )
    )


def _scale(v):
    return max(abs(v.phi), np.max(np.abs(v.dQ1)), np.max(np.abs(v.dQ2)), np.max(np.abs(v.b)), 1e-300)
