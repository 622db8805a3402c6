"""Spectra of the attention matrices: the spectral measure of a letter in a closure's state, and a smooth
reconstruction of its distribution (MATH.md §12).

A *symmetric* letter (tied and symmetric ``S_k``, untied ``A_k``, ``B_k``) has a real spectrum; for any
other letter X (untied ``M_k``, direct ``S_k``) the spectrum reported is that of ``X Xᵀ`` (squared
singular values), named ``"X X^T"``. In a state the closure carries, the spectral measure of a symmetric
product P is

* a matrix model (n × n matrices, normalised trace): its n eigenvalues, weight 1/n each
  (`trace_spectrum`);
* a GNS state (quadrature closure: letters acting on a space with state vector e₀): eigenvalues λᵢ of P
  with weights ⟨vᵢ, e₀⟩² (`vector_spectrum`) — the Gauss rule of the measure, whose moments are the
  closure's own moments of the powers of P.

`reconstruct` turns nodes and weights into a continuous CDF and a density: the monotone (PCHIP)
interpolant through the midpoints of the rule's steps, which lies within the Chebyshev–Markov–Stieltjes
band the rule certifies (``cdf_low``, ``cdf_high``: the step function without and with each node's own
weight); the density is its derivative. A matrix model's many equal weights give an empirical CDF
smoothed the same way.
"""

import numpy as np
from scipy.interpolate import PchipInterpolator

from ..core.errors import WordError

__all__ = ["spectral_product", "trace_spectrum", "vector_spectrum", "reconstruct", "product_matrix"]


def spectral_product(model, letter):
    """(text, codes) of what the spectrum of ``letter`` (one letter, e.g. ``"S1"``) is taken of: the letter
    itself when it is symmetric, else ``X Xᵀ``."""
    from ..models.words import parse  # noqa: PLC0415 - words imports nothing of this module; keep the import local

    codes = parse(letter, model)
    if len(codes) != 1:
        raise WordError(f"a spectrum is of one letter, e.g. 'S1'; {letter!r} has {len(codes)}: name one letter")
    code = codes[0]
    transposed = int(model.alphabet.transpose[code])
    if transposed == code:
        return letter.strip(), (code,)
    names = [model.alphabet.name(c) for c in (code, transposed)]
    return " ".join(names), (code, transposed)


def product_matrix(codes, letters):
    """The product of the letter matrices ``codes`` (left to right)."""
    out = letters[codes[0]]
    for code in codes[1:]:
        out = out @ letters[code]
    return out


def trace_spectrum(P):
    """(nodes, weights) of a symmetric n × n matrix under the normalised trace: its eigenvalues, 1/n each."""
    nodes = np.linalg.eigvalsh(0.5 * (P + P.T))
    return nodes, np.full(len(nodes), 1.0 / len(nodes))


def vector_spectrum(P, tol=1e-14):
    """(nodes, weights) of a symmetric P in the vector state e₀: eigenvalues with weights ⟨v, e₀⟩² (nodes of
    weight below ``tol`` dropped: they are outside the cyclic space of e₀)."""
    nodes, vectors = np.linalg.eigh(0.5 * (P + P.T))
    weights = vectors[0] ** 2
    keep = weights > tol
    return nodes[keep], weights[keep] / weights[keep].sum()


def reconstruct(nodes, weights, x=None, points=400, lower=None, resolution=0.02):
    """A smooth CDF and density from a discrete spectral measure.

    Returns ``{"x", "cdf", "density", "cdf_low", "cdf_high"}`` on the grid ``x`` (default: ``points``
    points spanning the nodes with a margin of one mean node spacing). The CDF is the PCHIP
    interpolant through (node, mass strictly below + half its own weight), 0 and 1 one spacing beyond
    the extreme nodes — 0 at ``lower`` instead when the support is known to start there (0 for a
    positive semi-definite letter: the mass of the smallest node then spreads down to the edge, where a
    hard edge's last eigenvalues sit); ``cdf_low``/``cdf_high`` are the step functions that bound the
    true CDF at the nodes when the nodes are a Gauss rule of it (Chebyshev–Markov–Stieltjes). Knots closer
    than ``resolution`` in mass and in x (as a fraction of the spread) are thinned to one, so that clusters
    of light nodes do not turn into spikes of the density: detail finer than that is not in the rule (an
    isolated node of a low-order rule still shows as a peak: its mass has nowhere else to go)."""
    order = np.argsort(nodes)
    nodes, weights = np.asarray(nodes, float)[order], np.asarray(weights, float)[order]
    nodes, weights = _merged(nodes, weights)
    span = nodes[-1] - nodes[0]
    pad = span / max(len(nodes) - 1, 1) if span > 0 else max(abs(nodes[0]), 1.0) * 0.05
    start = lower if lower is not None and lower < nodes[0] else nodes[0] - pad
    if x is None:
        x = np.linspace(start, nodes[-1] + pad, points)
    x = np.asarray(x, float)
    below = np.concatenate([[0.0], np.cumsum(weights)[:-1]])
    knots, values = _thinned(nodes, below + 0.5 * weights, resolution)
    knots = np.concatenate([[start], knots, [nodes[-1] + pad]])
    values = np.concatenate([[0.0], values, [1.0]])
    curve = PchipInterpolator(knots, values, extrapolate=False)
    cdf = np.clip(np.nan_to_num(curve(x), nan=0.0) + (x >= knots[-1]), 0.0, 1.0)
    density = np.clip(np.nan_to_num(curve.derivative()(x), nan=0.0), 0.0, None)
    cumulative = np.concatenate([[0.0], np.cumsum(weights)])
    below, at_or_below = np.searchsorted(nodes, x, side="left"), np.searchsorted(nodes, x, side="right")
    low = cumulative[np.maximum(below - 1, 0)]  # F(x) ≥ F(x_j) ≥ mass below x_j, x_j the last node below x
    high = cumulative[np.minimum(at_or_below + 1, len(nodes))]  # F(x) ≤ F(x_{j+1}−) ≤ mass up to x_{j+1}
    return {"x": x, "cdf": cdf, "density": density, "cdf_low": low, "cdf_high": high}


def _thinned(knots, values, resolution):
    """The knots kept: the first, then each one at least ``resolution`` above the last kept in CDF value or
    ``resolution`` × the spread beyond it in x; the last always."""
    gap = resolution * max(knots[-1] - knots[0], 1e-300)
    keep = [0]
    for i in range(1, len(knots) - 1):
        if values[i] - values[keep[-1]] >= resolution or knots[i] - knots[keep[-1]] >= gap:
            keep.append(i)
    if len(knots) > 1:
        keep.append(len(knots) - 1)
    return knots[keep], values[keep]


def _merged(nodes, weights, tol=1e-12):
    """Nodes closer than ``tol`` (relative to the spread) merged, their weights added (PCHIP needs
    increasing knots)."""
    scale = max(nodes[-1] - nodes[0], abs(nodes[-1]), 1e-300)
    keep = np.concatenate([[True], np.diff(nodes) > tol * scale])
    groups = np.cumsum(keep) - 1
    return nodes[keep], np.bincount(groups, weights=weights)
