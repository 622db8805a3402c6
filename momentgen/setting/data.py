"""The token covariance Σ of anisotropic data (MATH.md §10): ``E[x_ia x_jb] = C_ij Σ_ab``.

`DataCovariance` is the ``[data]`` table of a configuration:

* ``isotropic`` (default): Σ = I — no letter Σ in the words, every formula as in MATH.md §1–§9;
* ``power-law`` with ``exponent`` a > 0: the eigenvalue at quantile u ∈ (0, 1) is ``(1 + a) u^a``
  (``Tr Σ / d = 1``; density ∝ λ^{1/a − 1} near 0: many small directions, learned last);
* ``from-file``: the ``eigenvalues`` (length d) or the matrix ``Sigma`` (d × d, symmetric positive definite)
  of one finite Σ, read from an ``.npz``.

Both descriptions read it from here: the theory as the fixed letter ``Sigma`` (`momentgen.models.base.SIGMA`),
whose pure words are the moments of its law (`moment`, `law`, `rule`); SGD and the matrix flow as a d × d matrix
(`eigenvalues` and `basis` at dimension d: x = Σ^{1/2} z costs O(B d) for a diagonal Σ). A teacher *aligned* with Σ is a
function of it, ``c Σ^b`` (`power`). Finite-d eigenvalues of a named law are its midpoint quantiles,
rescaled so that ``Tr Σ / d = 1`` exactly at every d; a matrix-model ensemble's draws sample each quantile bin
instead (`stratified_eigenvalues`), so that their average is the law's own.
"""

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..core.errors import ModelError
from ..laws.edge import gauss_rule, power_law

__all__ = ["DataCovariance", "COVARIANCES", "ISOTROPIC"]

#: The values of ``[data] covariance``.
COVARIANCES = ("isotropic", "power-law", "from-file")


@dataclass(frozen=True, eq=False)
class DataCovariance:
    """Σ of the tokens (module docstring). ``values``: a from-file Σ's eigenvalues and ``vectors`` its eigenvectors
    as columns in the same order (None: Σ = diag(values), in the file's coordinate order), read by
    `momentgen.setting.config` from the file."""

    covariance: str = "isotropic"
    exponent: float = 1.0
    path: str = None
    values: tuple = None
    vectors: np.ndarray = None

    def __post_init__(self):
        if self.covariance not in COVARIANCES:
            raise ModelError(f"[data] covariance = {self.covariance!r}: choose one of {', '.join(COVARIANCES)}")
        a = self.exponent
        if isinstance(a, bool) or not isinstance(a, (int, float)) or not np.isfinite(a) or a <= 0:
            raise ModelError(f"[data] exponent must be a positive number (eigenvalue (1 + a) u^a), got {a!r}")
        if self.covariance == "from-file" and self.values is None:
            raise ModelError('[data] covariance = "from-file" needs `path` (an .npz with `eigenvalues` or `Sigma`)')

    @property
    def isotropic(self):
        return self.covariance == "isotropic"

    # ---- the d = ∞ law ---------------------------------------------------------------------------------
    def moment(self, power):
        """``τ(Σ^power)`` (any real power): power law ``(1 + a)^p / (1 + a p)``; a file: the mean of its eigenvalues'
        powers; isotropic 1."""
        if self.covariance == "power-law":
            a = self.exponent
            if 1 + a * power <= 0:
                raise ModelError(f"tau(Sigma^{power:g}) diverges for the power law of exponent {a:g}")
            return (1 + a) ** power / (1 + a * power)
        if self.covariance == "from-file":
            return float(np.mean(np.asarray(self.values) ** power))
        return 1.0

    @cached_property
    def law(self):
        """The spectral law (`edge.SpectralLaw`) of a named law, for its recurrence and edge-adapted rule;
        None for isotropic and from-file data (a file's law is its own discrete measure: `rule`)."""
        return power_law(self.exponent) if self.covariance == "power-law" else None

    # ---- finite d -----------------------------------------------------------------------------------
    def eigenvalues(self, d):
        """Σ's eigenvalues at dimension d: midpoint quantiles of the law with mean 1 (ascending), or the file's in its
        order (the diagonal of a diagonal Σ). A file's Σ runs at its own dimension d_file or at d = r·d_file as
        Σ ⊗ I_r (each eigenvalue r times: the same spectral law, so the same d = ∞ theory; `verify` extrapolates from
        d_file and 2·d_file)."""
        if self.covariance == "isotropic":
            return np.ones(d)
        if self.covariance == "from-file":
            return np.repeat(np.asarray(self.values, float), self._replicas(d))
        values = self._quantile((np.arange(d) + 0.5) / d)
        return values / values.mean()

    @property
    def file_dimension(self):
        """The dimension of a from-file Σ as the file gives it; None for a named law (any d)."""
        return len(self.values) if self.covariance == "from-file" else None

    def _replicas(self, d):
        """r with d = r·d_file for a from-file Σ (a one-line `ModelError` otherwise)."""
        size = len(self.values)
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < size or d % size:
            raise ModelError(
                f"{self.path}: Sigma has dimension {size}, the run d = {d}: make d = {size} (or a multiple of it, "
                "Sigma ⊗ I then)"
            )
        return int(d) // size

    def law_eigenvalues(self, n):
        """n eigenvalues that follow Σ's law (the theory's n × n matrix model): a named law's midpoint quantiles
        (`eigenvalues`), a file's spectrum at its midpoint quantiles (any n)."""
        if self.covariance != "from-file":
            return self.eigenvalues(n)
        return self._quantile((np.arange(n) + 0.5) / n)

    def stratified_eigenvalues(self, n, rng, within=None):
        """n eigenvalues, ascending, one drawn uniformly within each of the law's n quantile bins (stratified
        sampling; ``rng``: a numpy Generator). Over draws, a linear statistic (1/n) Σᵢ f(λᵢ) averages to the law's
        own ∫ f exactly, where a midpoint quantile's is off: at a power law's lower edge, which a late risk reads,
        by far more than O(1/n²). The matrix-model ensemble's draws use them (`momentgen.dynamics.ensemble`);
        `bin_means` are their expectations. ``within``: where in each bin, in [0, 1) (default: uniform draws)."""
        return self._quantile((np.arange(n) + (rng.random(n) if within is None else within)) / n)

    def bin_means(self, n):
        """The expectation of each of the n `stratified_eigenvalues`: n times the integral of the quantile function
        over its bin (exact: a power law's in closed form, a file's step function by its partial sums)."""
        return n * np.diff(self._quantile_integral(np.arange(n + 1) / n))

    @cached_property
    def _ascending(self):
        """A from-file Σ's eigenvalues, sorted (its quantile function is this step function)."""
        return np.sort(np.asarray(self.values, float))

    def _quantile(self, u):
        """The law's quantile function at ``u`` ∈ [0, 1): the eigenvalue below which a fraction u of them lie."""
        if self.covariance == "power-law":
            return (1 + self.exponent) * u**self.exponent
        if self.covariance == "from-file":
            values = self._ascending
            return values[np.minimum((u * len(values)).astype(int), len(values) - 1)]
        return np.ones_like(u)

    def _quantile_integral(self, x):
        """∫₀ˣ of `_quantile` (x ∈ [0, 1])."""
        if self.covariance == "power-law":
            return x ** (1 + self.exponent)
        if self.covariance == "from-file":
            values = self._ascending
            count = len(values)
            whole = np.minimum((x * count).astype(int), count)
            partial = np.concatenate([[0.0], np.cumsum(values)])[whole]
            return (partial + (x * count - whole) * values[np.minimum(whole, count - 1)]) / count
        return np.asarray(x, float)

    def law_power(self, n, b):
        """``Σ^b`` of an n × n matrix model (diagonal: only Σ's law matters at d = ∞)."""
        return np.diag(self.law_eigenvalues(n) ** b)

    def basis(self, d):
        """Σ's eigenvectors as columns at dimension d, or None when Σ is diagonal."""
        if self.vectors is None:
            return None
        replicas = self._replicas(d)
        return self.vectors if replicas == 1 else np.kron(self.vectors, np.eye(replicas))

    def power(self, d, b):
        """``Σ^b`` at dimension d (a d × d matrix; b may be any real)."""
        values, vectors = self.eigenvalues(d) ** b, self.basis(d)
        return np.diag(values) if vectors is None else (vectors * values) @ vectors.T

    def matrix(self, d):
        """Σ at dimension d."""
        return self.power(d, 1.0)

    def letter(self, model, d):
        """The letter matrix Σ of ``model`` at dimension d: `matrix`, or None when the model has no letter Σ."""
        return self.matrix(d) if model.sigma else None

    def rule(self, n):
        """(nodes, weights) of the (n + 1)-point Gauss rule of Σ's law (a file's: of its eigenvalues' discrete
        measure): every moment of degree ≤ 2n + 1."""
        if self.covariance == "from-file":
            atoms, counts = _atoms(self.values)
            return gauss_rule(*_stieltjes(atoms, counts / counts.sum(), min(n + 1, len(atoms))))
        return gauss_rule(*self.law.recurrence(n + 1))


def _atoms(values, rtol=1e-12):
    """The distinct values of a finite spectrum (those within ``rtol`` of the largest merged) and their counts: a
    discrete measure with k atoms has k orthogonal polynomials, so its Gauss rule has at most k nodes (Σ = 2I is one
    atom; asking the recurrence for more divides by a zero norm)."""
    values = np.sort(np.asarray(values, float))
    new = np.flatnonzero(np.diff(values) > rtol * values[-1]) + 1
    starts = np.concatenate([[0], new])
    counts = np.diff(np.concatenate([starts, [len(values)]])).astype(float)
    return values[starts], counts


def _stieltjes(x, w, m):
    """Monic recurrence (α, β; β₀ = the mass) of m orthogonal polynomials of the discrete measure Σ wᵢ δ_{xᵢ}
    (Stieltjes' procedure, the discretised one of Gautschi; stable for m far below the number of points)."""
    alpha, beta = np.zeros(m), np.zeros(m)
    previous, current = np.zeros_like(x), np.ones_like(x)
    norm = w.sum()
    beta[0] = norm
    for k in range(m):
        alpha[k] = np.sum(w * x * current**2) / norm
        if k + 1 < m:
            following = (x - alpha[k]) * current - (beta[k] if k else 0.0) * previous
            new_norm = np.sum(w * following**2)
            beta[k + 1] = new_norm / norm
            previous, current, norm = current, following, new_norm
    return alpha, beta


ISOTROPIC = DataCovariance()
