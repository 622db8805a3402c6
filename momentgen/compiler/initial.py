"""Initial states: exact d = ∞ moments of Gaussian initialisations, empirical moments of finite
matrices, deterministic matrices that follow the d = ∞ law, and the truncated GNS representation
of either (the quadrature closure's starting state).

An initialisation is given per index ``k`` (1-based) as an `InitSpec`:

* ``gaussian``: factors with iid ``N(0, scale²/d)`` entries and inner width
  ``d_k = width_ratio · d`` (the kind says which factors: e.g. ``W_k`` with ``S_k = W_k W_kᵀ``,
  or ``U_k, V_k`` with scales ``scale_U``, ``scale_V``);
* ``identity``: the letters are ``c I``;
* ``from-file``: finite-d matrices from an ``.npz`` (`momentgen.setting.matrices.load_factors`).

Exact d = ∞ moments of Gaussian factors (independent indices) come from planar Wick pairings:
each letter is a scalar times a product of Gaussian factors (`KindLaws.letter_factors`), and
at d = ∞ the normalised trace of a product of factors is the sum over non-crossing pairings of
each factor ``G`` with a ``Gᵀ`` of the same matrix (a symmetric matrix pairs with itself in
either orientation), each pair weighted by ``scale²`` and each face of the planar map that runs
through a factor's inner index by its width ratio. The recursion pairs the first factor with
each compatible partner and splits the rest into the inside and the outside of the arc;
memoised on the factor sequence, a word of length w costs O(w³).
"""

from functools import cache

import numpy as np
from scipy.linalg import hadamard

from ..core.errors import ModelError
from ..laws.edge import edge_rule, measure_component
from ..laws.representation import Component, block_radau, free_product, gram_component
from ..setting.data import ISOTROPIC
from ..setting.inits import INIT_KINDS, InitSpec
from ..setting.matrices import letter_matrices, trace_moments

__all__ = [
    "InitSpec",
    "exact_moments",
    "empirical_moments",
    "law_factors",
    "flat_rotation",
    "flat_size",
    "free_poisson_quantiles",
    "initial_representation",
    "matrix_moments",
    "INIT_KINDS",
]

# ---- exact d = ∞ moments -------------------------------------------------------------------


def exact_moments(model, specs, words, data=ISOTROPIC):
    """d = ∞ moments ``μ_α`` of the words (tuples of letter codes) for independent Gaussian / identity /
    aligned initialisations ``specs`` ({k: InitSpec}) and the data covariance ``data`` (its letter Σ, and
    aligned letters c Σ^b, are deterministic: free from the Gaussian factors); float array of shape (len(words),).

    A word is a sequence of Gaussian factors with powers of Σ between them; the sum over non-crossing pairings
    (module docstring) evaluates each face of the planar map at ``τ(Σ^e)``, e the total power of Σ on it
    (all deterministic letters commute). `_faces` returns, for a linear stretch, the weights of each power on its
    outer face, so that face is evaluated once it closes."""
    specs = _complete(model, specs)
    if any(s.kind == "from-file" for s in specs.values()):
        raise ModelError(
            "exact d = ∞ moments need gaussian, identity or aligned inits; use empirical_moments for files"
        )
    letters = _letter_items(model, specs)
    laws = {}
    for k, spec in specs.items():
        if spec.kind == "gaussian":
            laws.update(model.definition.laws.matrix_laws(k, spec))

    @cache
    def faces(factors, powers):
        """{power on the outer face: Σ over pairings of Π variance × Π closed inner faces} of D₀ G₁ D₁ … G_m D_m
        (``powers`` = the m + 1 powers of Σ between and around the factors; D₀ and D_m are on the outer face)."""
        if not factors:
            return {powers[0]: 1.0}
        (matrix, transposed), total = factors[0], {}
        variance, ratio, symmetric = laws[matrix]
        inner_face = 1.0 if transposed else ratio  # the face inside the arc runs through the right index of factors[0]
        for j in range(1, len(factors), 2):
            partner = factors[j]
            if partner[0] == matrix and (symmetric or partner[1] != transposed):
                inside = sum(w * data.moment(e) for e, w in faces(factors[1:j], powers[1 : j + 1]).items())
                weight = variance * inner_face * inside
                for e, w in faces(factors[j + 1 :], powers[j + 1 :]).items():
                    total[powers[0] + e] = total.get(powers[0] + e, 0.0) + weight * w
        return total

    out = np.empty(len(words))
    for i, word in enumerate(words):
        scalar, factors, powers = 1.0, [], [0.0]
        for code in word:
            s, power, f = letters[code]
            scalar *= s
            powers[-1] += power
            for factor in f:
                factors.append(factor)
                powers.append(0.0)
        out[i] = scalar * sum(w * data.moment(e) for e, w in faces(tuple(factors), tuple(powers)).items())
    return out


def _letter_items(model, specs):
    """Each letter code as (scalar, power of Σ, Gaussian factors): ``c Σ^b`` for an aligned index's letters (MATH.md
    §10), Σ itself (1, 1, ()), the kind's `letter_factors` (power 0) otherwise."""
    definition, kinds = model.definition, model.definition.letter_kinds
    items = []
    for k in range(1, model.K + 1):
        spec = specs[k]
        if spec.kind == "aligned":
            items += [(spec.c, float(spec.exponent), ())] * len(kinds)
            continue
        by_kind = definition.laws.letter_factors(k, spec)
        items += [(by_kind[kind][0], 0.0, by_kind[kind][1]) for kind in kinds]
    return items + ([(1.0, 1.0, ())] if model.sigma else [])


def _complete(model, specs):
    missing = [k for k in range(1, model.K + 1) if k not in specs]
    if missing:
        raise ModelError(f"no init given for indices {missing}: add an [init.{missing[0]}] table")
    return specs


def empirical_moments(model, factors, words, sigma=None):
    """``(1/d) Tr`` of the words on the finite-d matrices built from ``factors`` (and the data covariance ``sigma``,
    a d × d Σ, when the model has the letter)."""
    return trace_moments(words, letter_matrices(model.kind, factors, sigma))


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


def flat_size(n):
    """Whether ``n`` has a `flat_rotation` (a power of two, at least 2)."""
    return n >= 2 and not n & (n - 1)


def flat_rotation(n, rng):
    """A random orthogonal n × n matrix whose entries all have magnitude 1/√n (n a power of two): ``Q H P`` with H
    the normalised Sylvester–Hadamard matrix and Q, P a random signed permutation and a random permutation — an
    asymptotically liberating rotation (Anderson & Farrell 2014) like a Haar one, but every diagonal entry of
    ``R D Rᵀ`` is exactly τ(D) for a diagonal D: the mass a Gaussian factor puts on each direction of a diagonal
    letter (Σ's eigenbasis) is its mean, not a chi-square draw."""
    if not flat_size(n):
        raise ModelError(f"flat mixing needs a power-of-two size, got n = {n}")
    H = hadamard(n) / np.sqrt(n)
    rows = H[rng.permutation(n)] * rng.choice([-1.0, 1.0], n)[:, None]
    return rows[:, rng.permutation(n)]


def law_factors(model, specs, n, seed=0, data=ISOTROPIC, flat=False, spectrum=None):
    """Deterministic n-dimensional factors whose letters follow the d = ∞ initial law.

    Singular values at the quantiles of each Gaussian factor's limiting law (squares of
    free Poisson quantiles), independent Haar rotations on both sides (so that independent
    indices are free), identity letters exactly. With a fixed ``seed`` the matrices are
    reproducible; the moments approach the d = ∞ values as n grows (error O(1/n) or better).
    ``flat`` (n a power of two): each Gaussian factor's n-side rotation is a `flat_rotation` instead, so that its
    mass on each basis direction — each eigen-direction of a diagonal Σ — is exact (an ensemble of draws then
    fluctuates less: the risk of a Gaussian student against a power-law Σ by 1.2–2.5× at n = 64–128). A kind with a
    mean gets each Gaussian index centred (`KindLaws.centred`: Tr(Σ M_k) = 0, the mean being the d = ∞ variable m).
    ``spectrum``: Σ's n eigenvalues in this draw (default: its law's midpoint quantiles,
    `DataCovariance.law_eigenvalues`; an ensemble's draws pass `DataCovariance.stratified_eigenvalues`), which an
    aligned index's letters and the centring read; the flow must run with the same Σ.
    """
    rng = np.random.default_rng(seed)
    specs = _complete(model, specs)
    left = flat_rotation if flat else _haar
    spectrum = data.law_eigenvalues(n) if spectrum is None else np.asarray(spectrum, float)
    sigma = np.diag(spectrum) if model.sigma else None

    def gaussian(scale, width):
        """n × width with G Gᵀ at the free Poisson quantiles (rate width/n, jump scale²)."""
        eigenvalues = np.sort(free_poisson_quantiles(n, width / n, scale**2))[::-1][: min(n, width)]
        core = np.zeros((n, width))
        core[np.arange(len(eigenvalues)), np.arange(len(eigenvalues))] = np.sqrt(eigenvalues)
        return left(n, rng) @ core @ _haar(width, rng).T

    factors = []
    for k in range(1, model.K + 1):
        spec = specs[k]
        if spec.kind == "from-file":
            raise ModelError(
                "the matrix-model closure needs gaussian or identity inits (files give their own matrices)"
            )
        if spec.kind == "identity":
            factors.append(model.definition.matrices.identity_factor(spec.c, n))
        elif spec.kind == "aligned":  # c Σ^b of this draw's Σ
            factors.append(model.definition.matrices.aligned_factor(spec.c, np.diag(spectrum ** (spec.exponent / 2))))
        else:
            laws = model.definition.laws
            factors.append(laws.centred(laws.law_factor(spec, n, rng, gaussian), sigma))
    return factors


# ---- the truncated GNS representation of the initial state (MATH.md §8) ------------------------


def initial_representation(
    model, specs, n, moments=None, tol=1e-10, generators=None, variant="gauss", edge=None, data=ISOTROPIC
):
    """The degree-n representation of the initial state of ``model``.

    Default: the d = ∞ law of independent ``specs`` ({k: InitSpec}) as a free product of each
    index's component (`KindLaws.representation_component`: e.g. a Wishart letter's Jacobi
    matrix, or Gram–Schmidt on the index's own exact moments; identity letters are scalars).
    With ``moments`` (an oracle: list of code tuples → values, e.g. `matrix_moments` of given
    matrices) one Gram–Schmidt over all letters. ``generators``: the letter codes that span
    the space (default: all); the others ride along as passengers (`gram_component`).

    ``variant="radau"``: the Gauss–Radau representation of the same moments to degree 2n
    (`free_product`, `block_radau`), or None when no letter has a known spectral edge: then no
    second principal representation exists to bracket the first.

    ``edge``: (step, depth) of an edge-adapted rule (`momentgen.laws.edge.edge_rule`) for the one index
    that is not a multiple of the identity, when its kind gives its law (`KindLaws.spectral_law`):
    then every other letter is a scalar on its space, the flow of its layer is represented exactly,
    and the representation carries the exact root (`Representation.roots`). Ignored otherwise.

    ``data``: the tokens' covariance Σ of a model with the letter Σ (MATH.md §10). Σ and the aligned letters
    c Σ^b are one commutative component (`data_component`) free from the Gaussian indices: a discrete measure of
    Σ's law — its (n + 1)-point Gauss rule (exact for the words of Σ alone to degree 2n + 1; an aligned letter with
    b ∉ {0, 1} is not a polynomial in Σ, so its mixed words are exact only to that rule's accuracy), or with
    ``edge``, when every index is an identity or aligned (`layered_index` 0), the edge-adapted rule of its law.
    """
    if variant not in ("gauss", "radau"):
        raise ModelError(f"variant must be 'gauss' or 'radau', got {variant!r}")
    radau = variant == "radau"
    definition = model.definition
    if definition.closes(model):
        raise ModelError(
            f'the {model.kind} model\'s hierarchy is closed: it needs no quadrature closure (use closure = "zero")'
        )
    if n < 0:
        raise ModelError(f"quadrature order n must be ≥ 0 (degree M ≥ 1), got {n}")
    size = model.alphabet.size
    generators = set(range(size) if generators is None else generators)
    if moments is not None:
        return _representation_of_moments(model, moments, n, tol, generators, radau)
    specs = _complete(model, specs)
    layered = layered_index(model, specs, edge, data)
    components = [data_component(model, specs, n, data, edge if layered == 0 else None)] if model.sigma else []
    for k in range(1, model.K + 1):
        spec, codes = specs[k], definition.letter_codes(k)
        if spec.kind == "aligned":  # a function of Σ: on Σ's component
            continue
        if k == layered:
            law, code = definition.laws.spectral_law(k, spec), codes[0]
            components.append(measure_component(code, *edge_rule(law, n, *edge), n))
        elif spec.kind == "identity":
            components.append(Component({c: np.full((1, 1), spec.c) for c in codes}, np.zeros(1)))
        elif spec.kind == "from-file":
            raise ModelError("a from-file init has no d = ∞ law: build the representation from its moments")
        else:
            same = {j: spec for j in range(1, model.K + 1)}  # only index k's letters are asked for
            components.append(
                definition.laws.representation_component(
                    k, spec, n, lambda words, same=same: exact_moments(model, same, words), generators, tol
                )
            )
    if radau and not any(c.edges for c in components):
        return None
    return free_product(components, n, size, radau)


def _representation_of_moments(model, moments, n, tol, generators, radau):
    """One Gram–Schmidt over the letters of ``model`` from a moment oracle (`initial_representation`); its Gauss–Radau
    variant (None without a known edge) when ``radau``."""
    size, transpose = model.alphabet.size, model.alphabet.transpose
    spanning = [c for c in range(size) if c in generators]
    passengers = [c for c in range(size) if c not in generators]
    kernels = {c: p for c, p in getattr(moments, "kernels", {}).items() if c in generators}
    component = gram_component(spanning, transpose, moments, n, tol, passengers, kernels)
    component.edges = {c: z for c, z in getattr(moments, "edges", {}).items() if c in component.letters}
    if radau:
        if not component.edges:
            return None
        component = block_radau(component, n)
    return free_product([component], n, size)


def layered_index(model, specs, edge, data=ISOTROPIC):
    """The index that gets the edge-adapted rule: the only one that is not the identity, if its kind
    knows its law; 0 (Σ's index in the alphabet) when the tokens have a covariance with a named law and every index
    is an identity or aligned with it (then Σ's component is the only one that is not a scalar); else None."""
    if edge is None:
        return None
    specs = _complete(model, specs)
    if model.sigma:
        scalar_or_aligned = all(specs[k].kind in ("identity", "aligned") for k in range(1, model.K + 1))
        return 0 if scalar_or_aligned and data.law is not None else None
    others = [k for k in range(1, model.K + 1) if specs[k].kind != "identity"]
    if len(others) != 1 or model.definition.laws.spectral_law(others[0], specs[others[0]]) is None:
        return None
    return others[0]


def data_component(model, specs, n, data, edge=None):
    """Σ and the aligned letters ``c Σ^b`` (with their exact roots) as one `Component` on a discrete measure of Σ's law:
    its (n + 1)-point Gauss rule, or the edge-adapted rule `edge.edge_rule` (``edge`` = (step, depth))."""
    nodes, weights = data.rule(n) if edge is None else edge_rule(data.law, n, *edge)
    functions = {}
    for k in range(1, model.K + 1):
        spec = specs[k]
        if spec.kind == "aligned":
            values = spec.c * nodes**spec.exponent
            functions.update(
                {c: (values, np.sqrt(np.clip(values, 0.0, None))) for c in model.definition.letter_codes(k)}
            )
    return measure_component(model.sigma_code, nodes, weights, n, functions)


def matrix_moments(model, factors, sigma=None):
    """A moment oracle on finite-d matrices (e.g. the ones an SGD run starts from): words are
    reduced to canonical form (packed, vectorised) first, so each distinct trace is computed once.

    Its ``kernels`` attribute maps each tied letter of deficient rank to a code (beyond the
    alphabet) that the oracle reads as the orthogonal projector onto that letter's kernel —
    the rank split of `gram_component`. Words holding such a code are traced as they are.
    """
    letters, alphabet = letter_matrices(model.kind, factors, sigma), model.alphabet
    projectors = model.definition.laws.kernel_projectors(factors)
    kernels = {c: alphabet.size + j for j, c in enumerate(projectors)}
    extended = letters + list(projectors.values())
    known = {}  # ("canonical", length, packed word) or ("raw", *codes) → moment

    def moments(words):
        keys = [("raw", *word) for word in words]  # a word holding a projector letter is traced as it is
        plain = [i for i, word in enumerate(words) if max(word) < alphabet.size]
        for w in {len(words[i]) for i in plain}:
            rows = [i for i in plain if len(words[i]) == w]
            packed = alphabet.canonicalize(alphabet.pack(np.array([words[i] for i in rows])), w)
            for i, p in zip(rows, packed):
                keys[i] = ("canonical", w, int(p))
        fresh = list(dict.fromkeys(k for k in keys if k not in known))
        if fresh:
            codes = [
                tuple(int(c) for c in k[1:])
                if k[0] == "raw"
                else tuple(alphabet.unpack(np.array([k[2]], dtype=np.uint64), k[1])[0])
                for k in fresh
            ]
            known.update(zip(fresh, trace_moments(codes, extended)))
        return np.array([known[k] for k in keys])

    moments.kernels = kernels
    moments.edges = model.definition.laws.spectral_edges(factors)
    return moments
