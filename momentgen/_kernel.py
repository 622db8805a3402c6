"""The one compiled kernel every truncation uses: a CSR program applied to a state.

Compiled once (numba ``cache=True``) and shared by all generated modules; the program is
data, so its size never changes the compile time.
"""

import numba
import numpy as np

__all__ = ["apply_program"]


@numba.njit(cache=True, nogil=True)
def apply_program(indptr, symbol, target, weight, coefficients, y, out):
    """``out[i] = Σ_{j in row i} coefficients[symbol[j]] · weight[j] · y[target[j]]``."""
    for i in range(len(indptr) - 1):
        total = 0.0
        for j in range(indptr[i], indptr[i + 1]):
            total += coefficients[symbol[j]] * weight[j] * y[target[j]]
        out[i] = total
    return out


def warm_up():
    """Compile (or load from the cache) with the argument types used at run time."""
    i, f = np.zeros(2, np.int64), np.zeros(1)
    apply_program(i, i[:1], i[:1], f, f, f, np.zeros(1))
