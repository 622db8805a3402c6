import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

# Deterministic fuzzing: the same examples on every run and in CI.
settings.register_profile("momentgen", derandomize=True, deadline=None, max_examples=60)
settings.load_profile("momentgen")


@pytest.fixture
def rng():
    return np.random.default_rng(20261202)


def random_factors(kind, K, d, rng):
    """Random finite-d factors with the model's structure (layout of momentgen.setting.matrices).

    Widths d_k alternate between d and d - 2 so that rectangular factors are covered;
    entries N(0, 1/d) keep operator norms O(1).
    """
    widths = [d - 2 * (k % 2) for k in range(K)]
    g = lambda w: rng.standard_normal((d, w)) / np.sqrt(d)  # noqa: E731
    if kind == "tied":
        return [g(w) for w in widths]
    if kind == "untied":
        return [(g(w), g(w)) for w in widths]
    if kind == "symmetric":
        return [(a + a.T) / np.sqrt(2) for a in (g(d) for _ in range(K))]
    return [g(d) for _ in range(K)]
