"""Initial moments: exact d = ∞ values for Gaussian initialisations, empirical ones from matrices.

An initialisation is given per index ``k`` (1-based) as an `InitSpec`:

* ``gaussian``: factors with iid ``N(0, scale²/d)`` entries and inner width
  ``d_k = width_ratio · d`` — tied ``W_k`` (``S_k = W_k W_kᵀ``), untied ``U_k, V_k`` (scales
  ``scale_U``, ``scale_V``), direct ``S_k`` itself (``d × d``, width ratio 1);
* ``identity``: ``S_k = c I`` (untied: ``U_k = V_k = √c I``, so every letter is ``c I``);
* ``from-file``: finite-d matrices from an ``.npz`` (tied ``W`` or ``S``; untied ``U``, ``V``;
  direct ``S``).

Exact d = ∞ moments of Gaussian factors (student and teacher independent) come from
planar Wick pairings: a letter is a product of Gaussian factors (``S = W Wᵀ``,
``M = U Vᵀ``, ``Mᵀ = V Uᵀ``, ``A = U Uᵀ``, ``B = V Vᵀ``), and at d = ∞ the normalised trace
of a product of factors is the sum over non-crossing pairings of each factor ``G`` with a
``Gᵀ`` of the same matrix, each pair weighted by ``scale²`` and each face of the planar map
that runs through a factor's inner index by its width ratio. The recursion pairs the
first factor with each compatible partner and splits the rest into the inside and the
outside of the arc; memoised on the factor sequence, a word of length w costs O(w³).
"""

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .errors import ModelError
from .matrices import letter_matrices, trace_moments

__all__ = ["InitSpec", "exact_moments", "empirical_moments", "sample_factors", "initial_factors", "load_factors",
           "law_factors", "free_poisson_quantiles", "shift_to_mean"]

INIT_KINDS = ("gaussian", "identity", "from-file")


@dataclass(frozen=True)
class InitSpec:
    """How index ``k`` is initialised (see the module docstring); scales are entry std·√d."""

    kind: str = "gaussian"
    width_ratio: float = 1.0
    scale: float = 1.0
    scale_U: float = 1.0
    scale_V: float = 1.0
    c: float = 1.0
    path: str = None
    mean: float = None  # untied only: m_k = Tr(M_k)/√d at the start; None: not set (d = ∞: 0; a draw
    # keeps its own O(1/√d) value; a file its own value)

    def __post_init__(self):
        if self.kind not in INIT_KINDS:
            raise ModelError(f"unknown init kind {self.kind!r}: choose one of {', '.join(INIT_KINDS)}")
        for name in ("width_ratio", "scale", "scale_U", "scale_V"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and np.isfinite(value) and value > 0):
                raise ModelError(f"init `{name}` must be a positive number, got {value!r}")
        if self.kind == "from-file" and not self.path:
            raise ModelError("init kind 'from-file' needs `path` (an .npz of finite-d matrices)")
        if self.mean is not None and not (isinstance(self.mean, (int, float)) and np.isfinite(self.mean)):
            raise ModelError(f"init `mean` must be a finite number, got {self.mean!r}")

    @property
    def configured_mean(self):
        """The untied mean m_k this spec asks for at the start (0 unless given)."""
        return 0.0 if self.mean is None else float(self.mean)


# ---- exact d = ∞ moments -------------------------------------------------------------------


def _letter_factors(kind, k, spec):
    """Scalar and Gaussian factors of each letter kind of index k.

    A factor is (matrix, transposed); matrix = (name, k). Returns {letter kind: (scalar, factors)}.
    """
    if spec.kind == "identity":
        kinds = {"tied": ("S",), "untied": ("M", "M^T", "A", "B"), "direct": ("S", "S^T")}[kind]
        return {kk: (spec.c, ()) for kk in kinds}
    if kind == "tied":
        W = ("W", k)
        return {"S": (1.0, ((W, False), (W, True)))}
    if kind == "direct":
        S = ("S", k)
        return {"S": (1.0, ((S, False),)), "S^T": (1.0, ((S, True),))}
    U, V = ("U", k), ("V", k)
    return {
        "M": (1.0, ((U, False), (V, True))),
        "M^T": (1.0, ((V, False), (U, True))),
        "A": (1.0, ((U, False), (U, True))),
        "B": (1.0, ((V, False), (V, True))),
    }


def _matrix_laws(kind, specs):
    """{matrix: (entry variance · d, width ratio of its inner index)} for the Gaussian factors."""
    laws = {}
    for k, spec in specs.items():
        if spec.kind != "gaussian":
            continue
        if kind == "tied":
            laws[("W", k)] = (spec.scale**2, spec.width_ratio)
        elif kind == "direct":
            laws[("S", k)] = (spec.scale**2, 1.0)
        else:
            laws[("U", k)] = (spec.scale_U**2, spec.width_ratio)
            laws[("V", k)] = (spec.scale_V**2, spec.width_ratio)
    return laws


def exact_moments(model, specs, words):
    """d = ∞ moments ``μ_α`` of the words (tuples of letter codes) for independent Gaussian /
    identity initialisations ``specs`` ({k: InitSpec}); float array of shape (len(words),)."""
    specs = _complete(model, specs)
    if any(s.kind == "from-file" for s in specs.values()):
        raise ModelError("exact d = ∞ moments need gaussian or identity inits; use empirical_moments for files")
    alphabet = model.alphabet
    letters = []
    for code in range(alphabet.size):
        k = alphabet.index(code)
        letter_kind = alphabet.kinds[code % len(alphabet.kinds)]
        letters.append(_letter_factors(model.kind, k, specs[k])[letter_kind])
    laws = _matrix_laws(model.kind, specs)

    @lru_cache(maxsize=None)
    def planar(factors):
        """Σ over non-crossing compatible pairings of Π variance × Π inner-face ratios."""
        if not factors:
            return 1.0
        (matrix, transposed), total = factors[0], 0.0
        variance, ratio = laws[matrix]
        inner_face = 1.0 if transposed else ratio  # the face inside the arc runs through the right index of factors[0]
        for j in range(1, len(factors), 2):
            if factors[j] == (matrix, not transposed):
                total += variance * inner_face * planar(factors[1:j]) * planar(factors[j + 1 :])
        return total

    out = np.empty(len(words))
    for i, word in enumerate(words):
        scalar, factors = 1.0, ()
        for code in word:
            s, f = letters[code]
            scalar, factors = scalar * s, factors + f
        out[i] = scalar * planar(factors)
    return out


def _complete(model, specs):
    missing = [k for k in range(1, model.K + 1) if k not in specs]
    if missing:
        raise ModelError(f"no init given for indices {missing}: add an [init.{missing[0]}] table")
    return specs


# ---- finite-d matrices -----------------------------------------------------------------------


def sample_factors(model, specs, d, seed):
    """Finite-d factors (layout of `momentgen.matrices`) drawn from ``specs`` with a seed."""
    rng = np.random.default_rng(seed)
    specs = _complete(model, specs)
    factors = []
    for k in range(1, model.K + 1):
        spec = specs[k]
        if spec.kind == "from-file":
            factors.append(load_factors(model, spec.path, d))
            continue
        width = max(1, int(round(spec.width_ratio * d)))
        if spec.kind == "identity":
            factors.append(_identity_factor(model.kind, spec.c, d))
        elif model.kind == "tied":
            factors.append(rng.standard_normal((d, width)) * spec.scale / np.sqrt(d))
        elif model.kind == "untied":
            U = rng.standard_normal((d, width)) * spec.scale_U / np.sqrt(d)
            V = rng.standard_normal((d, width)) * spec.scale_V / np.sqrt(d)
            factors.append((U, V) if spec.mean is None else shift_to_mean(U, V, spec.mean))
        else:
            factors.append(rng.standard_normal((d, d)) * spec.scale / np.sqrt(d))
    return factors


def shift_to_mean(U, V, mean):
    """Untied factors moved to the pre-activation mean ``Tr(U Vᵀ)/√d = mean``.

    The move is the fast phase's own direction (MATH.md §4): ``U ← U + εV``, ``V ← V + εU``
    shifts ``M = U Vᵀ`` by ``ε(A + B) + ε² Mᵀ``, with ε the root of that quadratic nearest 0;
    ε = O(mean/√d), so the normalised moments change by O(1/d) only.
    """
    d = len(U)
    current, spread = np.sum(U * V), np.sum(U * U) + np.sum(V * V)
    target = mean * np.sqrt(d)
    if current == target:
        return U, V
    roots = np.roots([current, spread, current - target])
    real = roots[np.abs(roots.imag) < 1e-12 * max(1.0, np.abs(roots).max())].real
    if not real.size:
        raise ModelError(f"cannot shift untied factors to mean {mean}: Tr(M)/√d can reach "
                         f"{(current - spread**2 / (4 * current)) / np.sqrt(d):.3g} at most; lower |mean| or raise the scales")  # fmt: skip
    epsilon = real[np.argmin(np.abs(real))]
    return U + epsilon * V, V + epsilon * U


def initial_factors(model, inits, d, seed):
    """The finite-d matrices an SGD run with ``seed`` starts from (shared with the matrix flow
    and with the theory started from finite matrices)."""
    init_seed = np.random.SeedSequence(seed).spawn(2)[0]
    return sample_factors(model, inits, d, seed=int(init_seed.generate_state(1)[0]))


def _identity_factor(kind, c, d):
    """Factors of the letter c·I: direct S = cI; tied W = √c I; untied U = V = √c I."""
    root = np.sqrt(c) * np.eye(d)
    return c * np.eye(d) if kind == "direct" else (root, root) if kind == "untied" else root


MAX_DIMENSION = 10_000  # d of matrices read from a file: each d × d letter takes 8 d² bytes (0.8 GB here)
MAX_ARRAY_BYTES = 2 * 2**30  # one array in an .npz, as its header declares it


def load_factors(model, path, d=None):
    """One index's factors from an .npz: tied ``W`` (or ``S``, then W = S^½), untied ``U`` and
    ``V``, direct ``S``. ``d``, if given, must match.

    Nothing is trusted before it is checked: each array's declared size (zip entry and .npy
    header) against `MAX_ARRAY_BYTES`, its shape (2-d, d ≤ `MAX_DIMENSION`) and dtype (real
    numbers; no pickles) before it is read, its values (finite) after.
    """
    names = {"untied": ("U", "V"), "direct": ("S",)}.get(model.kind)
    arrays = _read_npz(path, names or ("W", "S"), any_of=names is None)
    if model.kind == "untied":
        factor, size = (arrays["U"], arrays["V"]), arrays["U"].shape[0]
        if arrays["U"].shape != arrays["V"].shape:
            raise ModelError(f"{path}: U and V must have the same shape, got {arrays['U'].shape} and {arrays['V'].shape}")
    elif "W" in arrays:
        factor, size = arrays["W"], arrays["W"].shape[0]
    else:
        S = arrays["S"]
        if S.shape[0] != S.shape[1]:
            raise ModelError(f"{path}: S must be square, got shape {S.shape}")
        if model.kind == "tied":
            w, V = np.linalg.eigh(0.5 * (S + S.T))
            if w.min() < -1e-10 * max(1.0, abs(w).max()):
                raise ModelError(f"{path}: S must be positive semi-definite for the tied model (eigenvalue {w.min():.3g})")
            factor = V * np.sqrt(np.clip(w, 0, None))
        else:
            factor = S
        size = S.shape[0]
    if d is not None and size != d:
        raise ModelError(f"{path}: matrices are {size}-dimensional but d = {d}")
    return factor


def _read_npz(path, names, any_of=False):
    """The named arrays of an .npz (all of them, or — ``any_of`` — the first present), checked."""
    import zipfile

    try:
        archive = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise ModelError(f"from-file init: {str(path)!r} not found") from None
    except (zipfile.BadZipFile, OSError) as error:
        raise ModelError(f"from-file init: {str(path)!r} is not an .npz archive ({error})") from None
    with archive:
        present = [n for n in names if f"{n}.npy" in archive.namelist()]
        wanted = present[:1] if any_of else list(names)
        if not present or (not any_of and len(present) < len(names)):
            held = sorted(n[:-4] for n in archive.namelist() if n.endswith(".npy"))
            need = " or ".join(names) if any_of else " and ".join(names)
            raise ModelError(f"{path} holds {held}; this model needs {need}")
        out = {}
        for name in wanted:
            info = archive.getinfo(f"{name}.npy")
            if info.file_size > MAX_ARRAY_BYTES:
                raise ModelError(f"{path}: array {name} would take {info.file_size / 2**30:.3g} GiB; the limit is "
                                 f"{MAX_ARRAY_BYTES / 2**30:g} GiB")  # fmt: skip
            with archive.open(info) as member:
                shape, dtype = _npy_header(member, path, name)
            _check_shape(shape, dtype, path, name)
            with archive.open(info) as member:
                array = np.lib.format.read_array(member, allow_pickle=False)
            if not np.all(np.isfinite(array)):
                raise ModelError(f"{path}: array {name} holds non-finite values (NaN or inf)")
            out[name] = np.asarray(array, dtype=float)
    return out


def _npy_header(member, path, name):
    try:
        version = np.lib.format.read_magic(member)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read(member)  # shape, Fortran order, dtype
    except (ValueError, OSError) as error:
        raise ModelError(f"{path}: array {name} is not a valid .npy ({error})") from None
    return shape, dtype


def _check_shape(shape, dtype, path, name):
    if dtype.kind not in "fiu" or dtype.hasobject:
        raise ModelError(f"{path}: array {name} has dtype {dtype}; real numbers are needed")
    if len(shape) != 2:
        raise ModelError(f"{path}: array {name} must be a matrix (2-d), got shape {shape}")
    d = shape[0]
    if d > MAX_DIMENSION or shape[1] > MAX_DIMENSION:
        raise ModelError(f"{path}: array {name} has shape {shape}: the letters would be {d} × {d} "
                         f"({8 * d * d / 2**30:.2g} GiB each); the limit is d ≤ {MAX_DIMENSION}")  # fmt: skip
    if np.prod(shape, dtype=float) * dtype.itemsize > MAX_ARRAY_BYTES:
        raise ModelError(f"{path}: array {name} of shape {shape} exceeds {MAX_ARRAY_BYTES / 2**30:g} GiB")


def empirical_moments(model, factors, words):
    """``(1/d) Tr`` of the words on the finite-d matrices built from ``factors``."""
    return trace_moments(words, letter_matrices(model.kind, factors))


# ---- deterministic matrices with the d = ∞ law (the matrix-model closure's start) --------------


def free_poisson_quantiles(n, rate, jump):
    """``n`` midpoint quantiles of the free Poisson law (Marchenko–Pastur; rate r, jump σ²).

    For ``r < 1`` a fraction ``1 − r`` of them sit on the atom at 0. The spectrum of these
    points reproduces every moment of the law up to O(n^{-3/2}) (square-root edges).
    """
    a, b = jump * (1 - np.sqrt(rate)) ** 2, jump * (1 + np.sqrt(rate)) ** 2
    theta = np.linspace(np.pi, 0.0, 20001)
    x = (a + b) / 2 + (b - a) / 2 * np.cos(theta)  # ascending, dense near the edges
    density = np.sqrt(np.clip((b - x) * (x - a), 0, None)) / (2 * np.pi * jump * np.maximum(x, 1e-300))
    cumulative = np.concatenate([[0.0], np.cumsum(np.diff(x) * (density[1:] + density[:-1]) / 2)])
    atom = max(0.0, 1 - rate)
    cumulative = atom + cumulative / cumulative[-1] * (1 - atom)
    u = (np.arange(n) + 0.5) / n
    return np.where(u < atom, 0.0, np.interp(u, cumulative, x))


def _haar(n, rng):
    Q, R = np.linalg.qr(rng.standard_normal((n, n)))
    return Q * np.sign(np.diag(R))


def law_factors(model, specs, n, seed=0):
    """Deterministic n-dimensional factors whose letters follow the d = ∞ initial law.

    Singular values at the quantiles of each Gaussian factor's limiting law (squares of
    free Poisson quantiles), independent Haar rotations on both sides (so that independent
    indices are free), identity letters exactly. With a fixed ``seed`` the matrices are
    reproducible; the moments approach the d = ∞ values as n grows (error O(1/n) or better).
    """
    rng = np.random.default_rng(seed)
    specs = _complete(model, specs)

    def gaussian(scale, width):
        """n × width with G Gᵀ at the free Poisson quantiles (rate width/n, jump scale²)."""
        eigenvalues = np.sort(free_poisson_quantiles(n, width / n, scale**2))[::-1][: min(n, width)]
        core = np.zeros((n, width))
        core[np.arange(len(eigenvalues)), np.arange(len(eigenvalues))] = np.sqrt(eigenvalues)
        return _haar(n, rng) @ core @ _haar(width, rng).T

    factors = []
    for k in range(1, model.K + 1):
        spec = specs[k]
        if spec.kind == "from-file":
            raise ModelError("the matrix-model closure needs gaussian or identity inits (files give their own matrices)")
        if spec.kind == "identity":
            factors.append(_identity_factor(model.kind, spec.c, n))
            continue
        width = n if model.kind == "direct" else max(1, int(round(spec.width_ratio * n)))
        if model.kind == "untied":
            U, V = gaussian(spec.scale_U, width), gaussian(spec.scale_V, width)
            factors.append((U, V) if spec.mean is None else shift_to_mean(U, V, spec.mean))
        else:
            factors.append(gaussian(spec.scale, width))
    return factors
