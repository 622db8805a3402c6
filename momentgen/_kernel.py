"""The one compiled kernel every truncation uses: a CSR program applied to a state.

Compiled once (numba ``cache=True``) and shared by all generated modules; the program is
data, so its size never changes the compile time.
"""

import numba
import numpy as np

__all__ = ["apply_program", "NO_NOISE"]


@numba.njit(cache=True, nogil=True)
def apply_program(indptr, symbol, target, weight, noise, coefficients, y, out):
    """``out[i] = Σ_{j in row i} c[symbol[j]] · weight[j] · y[target[j]]``
    ``+ Σ_{j in noise row i} c[noise_symbol[j]] · noise_weight[j] · y[left[j]] · y[right[j]]``.

    ``noise`` = (noise_indptr, noise_symbol, left, right, noise_weight): the quadratic terms of the
    finite-learning-rate term (an index −1 is the empty word, whose moment is 1); `NO_NOISE`
    (a one-entry row pointer) when the program has none.
    """
    noise_indptr, noise_symbol, left, right, noise_weight = noise
    for i in range(len(indptr) - 1):
        total = 0.0
        for j in range(indptr[i], indptr[i + 1]):
            total += coefficients[symbol[j]] * weight[j] * y[target[j]]
        if len(noise_indptr) > 1:
            for j in range(noise_indptr[i], noise_indptr[i + 1]):
                a, b = left[j], right[j]
                total += (
                    coefficients[noise_symbol[j]]
                    * noise_weight[j]
                    * (1.0 if a < 0 else y[a])
                    * (1.0 if b < 0 else y[b])
                )
        out[i] = total
    return out


#: The ``noise`` argument of a program without quadratic terms.
NO_NOISE = (
    np.zeros(1, np.int64),
    np.zeros(0, np.int16),
    np.zeros(0, np.int32),
    np.zeros(0, np.int32),
    np.zeros(0, np.float64),
)
