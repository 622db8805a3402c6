"""What `momentgen.compiler.potential.Potential` returns: Φ and its derivatives at one state."""

from dataclasses import dataclass

import numpy as np

from ... import models


@dataclass
class PotentialValue:
    """Φ and its derivatives at one state; arrays indexed by 0-based k, l.

    ``dQ1``, ``dQ2``: (K, K) ``∂Φ/∂Q1_kl``, ``∂Φ/∂Q2_kl``; ``b``: (K,) ``∂Φ/∂m_k``;
    ``m_hessian``: (K, K) ``∂²Φ/∂m_k∂m_l`` (both zero for a kind without a mean); ``error``: estimated
    absolute error of Φ and of the largest derivative (0 for the exact path; None if not requested).
    """

    phi: float
    dQ1: np.ndarray
    dQ2: np.ndarray
    b: np.ndarray
    m_hessian: np.ndarray
    error: float = None

    def coefficients(self, kind, trainable):
        """The hierarchy's coefficients that Φ alone determines (`ModelKind.potential_families`) for the
        trainable rows, keyed by symbol name (e.g. ``Gamma[1,2]``)."""
        K = len(self.b)
        arrays = models.get(kind).potential_families(self)
        return {
            f"{name}[{k},{l + 1}]": array[k - 1, l]
            for name, array in arrays.items()
            for k in trainable
            for l in range(K)
        }


@dataclass
class SecondDerivatives:
    """Second derivatives of Φ: ``QQ[r, k, l, s, m, n] = ∂²Φ/∂Q(r+1)_kl ∂Q(s+1)_mn`` (2, K, K, 2, K, K),
    ``Qm[r, k, l, n] = ∂²Φ/∂Q(r+1)_kl ∂m_n`` (2, K, K, K) and ``mm = ∂²Φ/∂m∂m`` (K, K)."""

    QQ: np.ndarray
    Qm: np.ndarray
    mm: np.ndarray
