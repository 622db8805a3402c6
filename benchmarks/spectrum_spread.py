"""How far SGD's eigenvalues spread past the theory's atom on fig. 4 (issue 45): the excess of the largest eigenvalue
of S1 over the teacher's eigenvalue 1 at t = 1, d = 200, at two batches (κ = ηd/B and κ/4). An O(√κ) excess (ratio
≈ 2) is the finite-learning-rate noise, which the κ → 0 curve does not carry. About 4 min on 2 cores.
Run: ``python benchmarks/spectrum_spread.py``."""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import momentgen as mg  # noqa: E402
from momentgen.evidence.evolution import _sgd_eigenvalues  # noqa: E402
from momentgen.setting.spectra import spectral_product  # noqa: E402


def main():
    excess = {}
    for batch in (256, 1024):
        config = mg.load_config("fig4_linear", sgd={"d": 200, "batch": batch}, integrate={"T": 1.0})
        kappa = config.settings.sgd.lr * 200 / batch
        codes = spectral_product(config.model, "S1")[1]
        eigenvalues = np.asarray(_sgd_eigenvalues(config, [1.0], {"S1": codes})["S1"]["eigenvalues"][0])
        excess[kappa] = eigenvalues.max() - 1.0
        print(f"kappa = {kappa:.4f}: largest eigenvalue of S1 at t = 1 exceeds 1 by {excess[kappa]:.4f}")
    (large, a), (small, b) = sorted(excess.items(), reverse=True)
    print(f"ratio {a / b:.2f} for kappa ratio {large / small:g} (sqrt: {np.sqrt(large / small):.2f})")


if __name__ == "__main__":
    main()
