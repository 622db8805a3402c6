"""The protocol every model kind implements: `ModelKind`.

A *kind* (tied, untied, direct, symmetric, …) is one module in `momentgen.models` with one
subclass of `ModelKind`; the registry (`momentgen.models.KINDS`) maps the configuration's
``kind`` to its instance. Nothing outside `momentgen.models` names a kind: every module that
needs kind-specific behaviour asks the kind through this protocol. What a kind declares:

1. **letters** — `letter_kinds`, their `transposes`, the `time_scale` of its hierarchy (and
   `steps_per_time`: SGD steps per unit of it);
2. **the pre-activations** — `centred` (a mean variable m_k or not) and, through `order_words`,
   which normalised traces are the order parameters ``(Q1, Q2)`` of the covariance
   ``Cov(G_ijk, G_i'j'l) = C_ii'C_jj' Q1_kl + C_ij'C_ji' Q2_kl`` (MATH.md §2);
3. **the coefficients** — `families`: named arrays over index pairs (or indices) with their
   constant factor in the hierarchy, computed by `coefficient_arrays` from Φ's derivatives
   (and, for the untied bias β, from moments);
4. **the hierarchy** — `rules` (substitution of a trainable letter by a product of letters,
   times a coefficient family entry), `weight_decay_factor`, `required_words`, and `closed`
   when the hierarchy closes on degree ≤ 2 (then the zero closure is exact);
5. **finite matrices** — a separate object, ``kind.matrices`` (`KindMatrices`, the role the reference
   side and the flow engine use): the factor layout, `index_letters` (one index's letters;
   `letter_matrices` of all), `factor_velocities` (the matrix flow of MATH.md §3–§5), `sgd_step`
   (one online-SGD step), `noise_increments`, `means`, sampling, identity, aligned and file factors;
6. **d = ∞ laws and quadrature states** — ``kind.laws`` (`KindLaws`): the configured means, the laws of
   Gaussian factors (`letter_factors`, `matrix_laws`) for exact initial moments, which letters drive
   the flow, a quadrature state's components, spectral laws and edges, and the factor form of
   compressed letters (`factor_parts`);
7. **the finite-learning-rate term** (docs/FINITE_LR.md) — how the SGD noise matrix ``h_k`` of
   an index moves its factors (`noise_increments`) and, to first and second order in it, its
   letters (`noise_first`, `noise_second`), and the constant `noise_scale`.

Conventions: indices k, l are 1-based in words and names, 0-based in arrays; a letter's code is
``(k − 1)·len(letter_kinds) + position of its kind``. Times are on the kind's own axis
(`time_scale`).
"""

import functools
import weakref
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from ..core.errors import ModelError
from ..laws.representation import gram_component

#: The name of the data-covariance letter Σ in words (one letter for every index: the data are shared).
SIGMA = "Sigma"

__all__ = [
    "ModelKind",
    "Family",
    "Rule",
    "Batch",
    "NOISE_FAMILIES",
    "identity_or_none",
    "psd_root",
    "token_pairs",
    "token_mix",
    "sandwich",
    "inserted",
    "decayed",
    "sigma_letter",
    "diagonal_of",
    "identity_like",
    "shifted",
    "frozen",
]


@dataclass(frozen=True)
class Family:
    """A coefficient family: an array over (k, l) index pairs (``pairs=True``) or over k.

    ``factor`` is the constant that multiplies every entry in the hierarchy (e.g. −1 for Γ);
    ``meaning`` says what it is, for summaries and LaTeX.
    """

    name: str
    factor: float
    meaning: str
    pairs: bool = True
    latex: str = None


@dataclass(frozen=True)
class Rule:
    """Substitution of letter ``letter`` by the product ``replacement`` (letter codes), times the
    entry ``(k, l)`` of coefficient family ``family`` (``l`` None for a family over k)."""

    letter: int
    family: str
    k: int
    l: int
    replacement: tuple


@dataclass
class Batch:
    """One SGD minibatch: tokens ``X`` of shape (B, L, d), the loss gradient ``gradient(G)`` (G of
    shape (B, L, L, K) → ∂ℓ/∂G of the same shape), the token covariance ``C`` (L, L) and the data
    covariance ``sigma`` (MATH.md §10: None for Σ = I, Σ's diagonal (d,) or Σ itself (d, d))."""

    X: np.ndarray
    gradient: callable
    C: np.ndarray
    sigma: np.ndarray = None

    def covariance_times(self, A):
        """``Σ A`` for a (d, w) array A (A itself for isotropic tokens; O(d w) for a diagonal Σ)."""
        if self.sigma is None:
            return A
        return self.sigma[:, None] * A if self.sigma.ndim == 1 else self.sigma @ A

    def trace_with(self, S):
        """``Tr(Σ S)`` of a d × d matrix (``Tr S`` for isotropic tokens): the centring of G."""
        if self.sigma is None:
            return np.trace(S)
        return float(self.sigma @ np.diag(S)) if self.sigma.ndim == 1 else float(np.sum(self.sigma * S.T))

    def covariance(self, d):
        """Σ as a d × d matrix (the identity for isotropic tokens)."""
        if self.sigma is None:
            return np.eye(d)
        return np.diag(self.sigma) if self.sigma.ndim == 1 else self.sigma

    @property
    def flat(self):
        """The tokens as rows, (B·L, d): every product of a step is one GEMM or a small einsum."""
        return self.X.reshape(-1, self.X.shape[-1])

    def rows(self, A):
        """(B·L, w) → (B, L, w)."""
        return A.reshape(self.X.shape[0], self.X.shape[1], -1)

    def descend(self, factors, trainable, G, update):
        """``factors`` after one SGD step on this batch: each trainable index k's factor is ``update(k, g_k)``, with
        ``g_k`` = ∂ℓ/∂G_k (B, L, L) at the pre-activations ``G`` (B, L, L, K); None when ∂ℓ/∂G is not finite
        (the run then stops with a status)."""
        g = self.gradient(G)
        if not np.all(np.isfinite(g)):
            return None
        out = list(factors)
        for k in trainable:
            out[k - 1] = update(k, g[..., k - 1])
        return out


def token_pairs(A, B):
    """G-shaped (B, L, L) inner products of token rows: ``out[b, i, j] = A[b, i] · B[b, j]``."""
    return np.einsum("bik,bjk->bij", A, B)


def sandwich(sigma, X):
    """``Σ X Σ`` (X itself for isotropic tokens, ``sigma`` None): the inserted letter of a flow with Σ (MATH.md §10);
    a diagonal Σ (its eigenbasis: the power-law and eigenvalue-file laws) scales rows and columns, O(d²)."""
    return inserted(sigma, [(1.0, X)])


def inserted(sigma, terms):
    """``Σ (Σ_l c_l X_l) Σ`` for ``terms`` [(c_l, X_l), …] (the sum itself for isotropic tokens, ``sigma`` None): the
    inserted letter of a flow (MATH.md §3–§5, §10), built in one new array — each term added to it in turn, a term
    with c = 0 skipped, a diagonal Σ (its eigenbasis: the power-law and eigenvalue-file laws) applied by scaling its
    rows and columns in place, O(d²). One array, not one per operation: at d = 256 each fresh d × d array costs
    about as much as the arithmetic done in it."""
    live = [(c, X) for c, X in terms if c != 0] or [(0.0, terms[0][1])]
    (c, X), rest = live[0], live[1:]
    out = c * X
    for c, X in rest:
        out += c * X
    if sigma is None:
        return out
    diagonal = diagonal_of(sigma)
    if diagonal is None:
        return sigma @ out @ sigma
    out *= diagonal[:, None]
    out *= diagonal[None, :]
    return out


def decayed(velocity, rate, factor):
    """``velocity − rate · factor`` in place (weight decay), ``velocity`` as it is where ``rate`` is 0."""
    if rate != 0:
        velocity -= rate * factor
    return velocity


def shifted(factor, step, c=1.0):
    """``factor + c·step`` for one index's factor and a step of the same layout (a matrix, or a tuple such as the
    untied (U, V))."""
    return tuple(a + c * b for a, b in zip(factor, step)) if isinstance(factor, tuple) else factor + c * step


def diagonal_of(matrix):
    """The diagonal of a square matrix that is diagonal (a data covariance Σ in its eigenbasis, an identity
    letter), else None: a product with it is then a scaling, O(d²) instead of O(d³). None for a matrix held by its
    diagonal already (a `momentgen.laws.commuting.Diagonal`, one axis), whose products are elementwise."""
    if np.ndim(matrix) == 1 or (len(matrix) > 1 and (matrix[0, -1] != 0 or matrix[-1, 0] != 0)):
        return None  # one axis, or a corner off the diagonal: not diagonal, seen without a pass over the matrix
    known = _KNOWN_DIAGONALS.get(id(matrix))
    if known is not None and known[0]() is matrix:
        return known[1]
    diagonal = np.diagonal(matrix)
    result = diagonal if np.count_nonzero(matrix) == np.count_nonzero(diagonal) else None
    if isinstance(matrix, np.ndarray) and not matrix.flags.writeable and matrix.flags.owndata:  # `frozen`
        key, result = id(matrix), None if result is None else result.copy()  # a copy: no reference to the matrix
        forget = functools.partial(_KNOWN_DIAGONALS.pop, key, None)  # bound now: still there at interpreter exit
        _KNOWN_DIAGONALS[key] = (weakref.ref(matrix, lambda _: forget()), result)
    return result


#: `diagonal_of` of the `frozen` matrices alive: id → (weak reference, result).
_KNOWN_DIAGONALS = {}


def frozen(matrix):
    """A read-only copy of ``matrix`` that owns its data (its subclass kept): nothing can change it in place, so
    `diagonal_of` remembers its answer — a flow's fixed letters and Σ are asked once per step, not once per run."""
    copy = np.array(matrix, copy=True, subok=True)
    copy.flags.writeable = False
    return copy


def identity_like(matrix):
    """The identity of ``matrix``'s size, held as it is held (by its diagonal for a one-axis
    `momentgen.laws.commuting.Diagonal`)."""
    return np.ones_like(matrix) if np.ndim(matrix) == 1 else np.eye(len(matrix))


def sigma_letter(model, letters):
    """Σ's matrix among ``letters`` (letter-code order), or None for isotropic tokens."""
    return None if model.sigma_code is None else letters[model.sigma_code]


def token_mix(g, A):
    """Σ_j g_ij A_j for each sample: (B, L, L) × (B, L, w) → (B·L, w)."""
    return np.einsum("bij,bjk->bik", g, A).reshape(-1, A.shape[-1])


def identity_or_none(spec):
    """True for an ``identity`` init (a scalar letter c I)."""
    return spec.kind == "identity"


#: The finite-learning-rate coefficients (docs/FINITE_LR.md): κ N1 and κ N2, where
#: ``N1_kl = Σ E[c_ijk c_i'j'l] C_ii'C_jj'`` pairs a noise matrix with a transposed one and
#: ``N2_kl = Σ E[c_ijk c_i'j'l] C_ij'C_ji'`` two of the same orientation (``c = ∂ℓ/∂G``).
NOISE_FAMILIES = ("N1", "N2")


class KindMatrices:
    """A kind on finite matrices: the letters of factors, the matrix flow, one SGD step, noise increments,
    means, sampled, identity, aligned and file factors (the reference side and the flow engine)."""

    def __init__(self, kind):
        self.kind = kind

    def index_letters(self, factor):
        """The letter matrices of one index's factor, in the order of `letter_kinds`."""
        raise NotImplementedError

    def letter_matrices(self, factors, sigma=None):
        """The letter matrices (letter-code order) of factors in this kind's layout, and Σ (``sigma``) last if given."""
        letters = [letter for factor in factors for letter in self.index_letters(factor)]
        return letters if sigma is None else letters + [sigma]

    def factor_velocities(self, model, factors, coefficients, letters=None):
        """d/dt of each factor under the matrix flow; fixed indices 0. ``coefficients`` maps family
        names to arrays (see `coefficient_arrays`) plus ``"gamma"``; ``letters``: the factors'
        `letter_matrices` when the caller has them already (computed here otherwise)."""
        raise NotImplementedError

    def sgd_step(self, model, factors, batch, lr, gamma):
        """One online-SGD step (MATH.md §1) from ``batch`` (a `Batch`: tokens, loss gradient, C);
        returns the new factors, or None when the step met a non-finite number."""
        raise NotImplementedError

    #: True when `noise_increments` reads only the symmetric part H + Hᵀ (the stochastic matrix model then draws no
    #: antisymmetric part: the same law of the increments at half the random numbers)
    symmetric_noise = False

    def noise_increments(self, model, factors, H):
        """The change of each factor when the noise matrices of the indices are ``H`` (list of d × d,
        one per index; None for a fixed index, which it does not read): the linear map h → Δfactor of one SGD
        step's fluctuation, without −η (the stochastic matrix model of `momentgen.setting.flow` and
        docs/FINITE_LR.md). Fixed indices: 0."""
        raise ModelError(f"the {self.kind.name} model has no finite-learning-rate term")

    def means(self, factors, sigma=None):
        """Untied pre-activation means Tr(Σ M_k)/√d of finite factors (array; Σ = ``sigma``, I when None), or None."""
        return None

    def shifted_to_mean(self, factor, mean, sigma=None):
        """One index's factor moved to the pre-activation mean ``mean`` along the fast phase's own direction (a kind
        with a mean only)."""
        raise ModelError(f"the {self.kind.name} model has no pre-activation mean to shift")

    def dimension(self, factor):
        """d of one index's factor."""
        return factor.shape[0]

    def sample_factor(self, spec, d, rng):
        """One index's Gaussian factor at dimension d (the draws' order is part of the seed's meaning)."""
        raise NotImplementedError

    def identity_factor(self, c, d):
        """One index's factor of the letter c·I."""
        raise NotImplementedError

    def aligned_factor(self, c, root):
        """One index's factor of the letter ``c Σ^b`` aligned with the data (MATH.md §10), given ``root`` = Σ^{b/2}."""
        raise ModelError(f"the {self.kind.name} model has no aligned init")

    def file_factor(self, arrays, path):
        """One index's factor from the arrays of an .npz (already size- and value-checked)."""
        raise NotImplementedError


class KindLaws:
    """A kind at d = ∞: law factors, Gaussian letter factors, the quadrature state's components, spectral
    laws and edges, factor parts (exact initial moments and the quadrature closure)."""

    def __init__(self, kind):
        self.kind = kind

    def configured_means(self, inits):
        """The initial means m_k the init specs ({k: `InitSpec`}) ask for (array over k), or None (a centred kind)."""
        return None

    def law_factor(self, spec, n, rng, gaussian):
        """One index's n-dimensional factor following the d = ∞ law (`gaussian(scale, width)` draws
        a factor with spectrum at the free Poisson quantiles and Haar rotations)."""
        raise NotImplementedError

    def centred(self, factor, sigma=None):
        """A law factor of a Gaussian index with its pre-activation mean exactly 0 (Σ = ``sigma``, I when None): the
        d = ∞ state carries a mean as its own variable m. Unchanged for a kind without a mean."""
        return factor

    def letter_factors(self, k, spec):
        """{letter kind: (scalar, factors)}: each letter of index k as a scalar times a product of
        Gaussian factors ``((name, k), transposed)``; an identity letter is a scalar."""
        if identity_or_none(spec):
            return {kind: (spec.c, ()) for kind in self.kind.letter_kinds}
        return self._gaussian_letter_factors(k)

    def _gaussian_letter_factors(self, k):
        raise NotImplementedError

    def matrix_laws(self, k, spec):
        """{(name, k): (variance·d, width ratio of its inner index, symmetric)} of index k's Gaussian factors."""
        raise NotImplementedError

    def driving_letters(self, model):
        """Codes of the letters that enter the velocities (the rest ride along as passengers)."""
        return [c for k in range(1, model.K + 1) for c in self.kind.letter_codes(k)]

    def representation_component(self, k, spec, n, exact_oracle, generators, tol):
        """A graded `momentgen.laws.representation.Component` of index k's letters at d = ∞ from a
        Gaussian ``spec`` (identity letters are scalars, handled by the caller);
        ``exact_oracle(words)`` gives the index's own exact moments, ``generators`` the letter codes
        that span the space (the others ride along as passengers). Default: Gram–Schmidt on those moments (letters
        that are not normal, e.g. untied M or direct S, have no Jacobi matrix); kinds with one override it."""
        codes = self.kind.letter_codes(k)
        generators = codes if generators is None else [c for c in codes if c in generators]
        passengers = [c for c in codes if c not in generators]
        return gram_component(generators, self.kind.transpose_table(k), exact_oracle, n, tol, passengers)

    def spectral_law(self, k, spec):
        """The d = ∞ spectral law (`momentgen.laws.edge.SpectralLaw`) of index k's one letter under a Gaussian
        ``spec``, when it is known in closed form and has no atom (the edge-adapted rule needs it); else None."""
        return None

    def kernel_projectors(self, factors):
        """{letter code: projector onto its kernel} of finite factors' letters of deficient rank whose
        kernel the flow keeps (the rank split of `momentgen.laws.representation.gram_component`)."""
        return {}

    def spectral_edges(self, factors):
        """{letter code: smallest non-zero eigenvalue} of finite factors' positive letters (Radau nodes)."""
        return {}

    def factor_parts(self, letters, tol, roots=None):
        """Factors (this kind's layout) of compressed letter matrices, so the flow moves factors; ``roots``:
        {letter code: exact root factor} to use instead of one computed from the letter
        (`momentgen.laws.representation.Representation.roots`)."""
        raise ModelError(f"the {self.kind.name} model's hierarchy is closed: it needs no quadrature representation")


class ModelKind:
    """Base class of a model kind; see the module docstring for the contract."""

    name = None
    letter_kinds = ()
    transposes = ()
    time_scale = None
    time_symbol = None
    centred = True
    finite_d_power = 1.0  # finite-d corrections are O(d^−power): 1/d centred, 1/√d with a mean (μ(M) = m/√d)
    closed = False
    families = ()
    positive_letters = False  # letters are PSD (an identity init needs c ≥ 0)
    aligned_refused = None  # why an ``aligned`` init (c Σ^b, `aligned_factor`) does not fit this kind, if it does not
    state_names = {}  # the potential's keyword names of the order parameters → their roles ("Q1", "Q2", "m")
    weight_decay_factor = None
    file_arrays = ()  # the arrays an .npz holds for one index: alternatives (tuples of names), preferred first
    # The finite-learning-rate term (docs/FINITE_LR.md). The batch-gradient noise of index k is a
    # matrix h_k (h^+ = h, h^- = hᵀ); a trainable letter moves by −η(first order) + η²(second order):
    #   noise_first[letter kind]:  ((left, ε, right), …)          Σ left·h^ε·right
    #   noise_second[letter kind]: ((left, ε1, middle, ε2, right), …)   Σ left·h^ε1·middle·h^ε2·right
    # with left, middle, right tuples of letter kinds of the same index; `noise_scale` is the constant
    # of both noise families (SGD steps per unit time × η/d, times any constant of the map h → Δfactor).
    noise_first = {}
    noise_second = {}
    noise_scale = None
    # The kind's other roles (objects it provides; see their classes): finite matrices and d = ∞ laws.
    matrices_role = KindMatrices
    laws_role = KindLaws

    def __init__(self):
        self.matrices = self.matrices_role(self)
        self.laws = self.laws_role(self)

    # ---- letters -------------------------------------------------------------------------------
    def code(self, letter_kind, k):
        """Code of the letter of kind ``letter_kind`` and 1-based index ``k``."""
        return (k - 1) * len(self.letter_kinds) + self.letter_kinds.index(letter_kind)

    def letter_codes(self, k):
        """Codes of index k's letters, in letter-kind order."""
        n = len(self.letter_kinds)
        return list(range((k - 1) * n, k * n))

    def transpose_table(self, K):
        """``table[c]``: code of the transpose of letter ``c``, for K indices (int array)."""
        n = len(self.letter_kinds)
        return np.array([(c // n) * n + self.transposes[c % n] for c in range(n * K)], dtype=np.int64)

    def steps_per_time(self, d, lr):
        """SGD steps per unit of the hierarchy's time axis at dimension d and learning rate η."""
        raise NotImplementedError

    # ---- order parameters and coefficients ------------------------------------------------------
    def order_words(self, k, l):
        """The words whose normalised traces are ``(Q1_kl, Q2_kl)`` (text, 1-based indices)."""
        raise NotImplementedError

    def order_texts(self, model, k, l):
        """(Q1_kl, Q2_kl) as words of ``model``: `order_words`, each ``X Y`` Σ-weighted to ``Sigma X Sigma Y`` when the
        tokens are anisotropic (MATH.md §10: every Gaussian contraction of two token vectors carries one Σ)."""
        words = self.order_words(k, l)
        if not model.sigma:
            return words
        return tuple(f"{SIGMA} {a} {SIGMA} {b}" for a, b in (word.split() for word in words))

    def state_words(self, model):
        """[(word text, reason)]: `required_words` and, with Σ, the Σ-weighted order parameters Φ reads."""
        out = list(self.required_words(model))
        if model.sigma:
            K = model.K
            for k, l in [(k, l) for k in range(1, K + 1) for l in range(1, K + 1)]:
                out += [
                    (word, f"Sigma-weighted order parameter {k}{l} (Phi depends on it)")
                    for word in self.order_texts(model, k, l)
                ]
        return out

    def state_degree(self, model):
        """The longest word of `state_words`: the degree a program that reads the coefficients needs (2; 4 with Σ)."""
        return max(len(word.split()) for word, _ in self.state_words(model))

    def closes(self, model):
        """Whether the hierarchy of ``model`` closes on degree ≤ 2 (then the zero closure is exact): the kind's
        `closed`, unless Σ is a letter (its powers do not close: MATH.md §10)."""
        return self.closed and not model.sigma

    def weighted(self, model, code):
        """An inserted coefficient letter as the letters it stands for: ``(X,)``, or ``(Σ, X, Σ)`` with anisotropic
        tokens (MATH.md §10: Stein's lemma with covariance Σ puts Σ on both sides of each inserted letter)."""
        sigma = model.sigma_code
        return (code,) if sigma is None else (sigma, code, sigma)

    @property
    def weight_decay_family(self):
        """The weight decay γ as a coefficient (its factor `weight_decay_factor`, a scalar: ``pairs=False``)."""
        return Family("gamma", self.weight_decay_factor, "weight decay", pairs=False, latex=r"\gamma")

    def family(self, name):
        """The coefficient family ``name``: one of `families`, `noise_families` or the weight decay."""
        for family in self.families + self.noise_families + (self.weight_decay_family,):
            if family.name == name:
                return family
        raise ModelError(f"the {self.name} model has no coefficient family {name!r}")

    @property
    def noise_families(self):
        """The finite-learning-rate families κN1, κN2 (`NOISE_FAMILIES`) with this kind's `noise_scale`."""
        if self.noise_scale is None:
            return ()
        return (
            Family("N1", self.noise_scale, "kappa E[c c'] C_ii'C_jj' (SGD noise, h with h^T)", latex=r"\kappa N^{(1)}"),
            Family("N2", self.noise_scale, "kappa E[c c'] C_ij'C_ji' (SGD noise, h with h)", latex=r"\kappa N^{(2)}"),
        )

    def noise_program(self, model):
        """{trainable letter code: (index k, first-order terms, second-order terms)} with letter codes:
        first ``(left codes, transposed, right codes)``, second ``(left, t1, middle, t2, right)``."""
        if self.noise_scale is None:
            raise ModelError(f"the {self.name} model has no finite-learning-rate term")
        out = {}
        for k in model.trainable:
            for kind in self.letter_kinds:
                first = tuple(
                    (self._codes(a, k), e == "-", self._codes(b, k)) for a, e, b in self.noise_first.get(kind, ())
                )
                second = tuple(
                    (self._codes(a, k), e1 == "-", self._codes(m, k), e2 == "-", self._codes(b, k))
                    for a, e1, m, e2, b in self.noise_second.get(kind, ())
                )
                out[self.code(kind, k)] = (k, first, second)
        return out

    def _codes(self, kinds, k):
        return tuple(self.code(kind, k) for kind in kinds)

    def potential_families(self, value):
        """{family name: array} of the coefficients Φ alone determines, from the
        `momentgen.compiler.potential.PotentialValue` ``value`` (arrays dQ1 = ∂Φ/∂Q1, dQ2 = ∂Φ/∂Q2 (K, K))."""
        raise NotImplementedError

    def coefficient_arrays(self, value, moments, model, trace_conserving=False, gamma=0.0):
        """{family name: array} of every coefficient at one state; ``moments(text)`` gives a required
        word's value (the untied bias reads some). ``trace_conserving``: the finite-d variant (β′)."""
        return self.potential_families(value)

    def sensitivity(self, model, dQ, value, moments, column):
        """{family: array of the family's shape + (n_columns,)}: ∂(family entries)/∂y over the Jacobian's
        columns, given ``dQ[r, k, l, j] = ∂(∂Φ/∂Q(r+1)_kl)/∂y_j`` (already through m*(q)). Default: the
        Φ-only families are linear in (∂Φ/∂Q1, ∂Φ/∂Q2), so they map dQ as they map the values."""
        return self.potential_families(SimpleNamespace(dQ1=dQ[0], dQ2=dQ[1]))

    def slaving_rates(self, moments, model):
        """Kinds with a mean: the rates D_k (array over every k) of the fast phase dm_k/dt = −D_k ∂Φ/∂m_k."""
        raise ModelError(f"the {self.name} model has no mean to slave")

    # ---- the hierarchy ----------------------------------------------------------------------------
    def rules(self, model):
        """The substitution `Rule` s of the trainable letters (MATH.md §3–§5)."""
        raise NotImplementedError

    def required_words(self, model):
        """[(word text, reason)]: the words the coefficients and the feasibility checks read."""
        raise NotImplementedError

    def derived(self, series, K):
        """{name: array} of derived observables (overlaps) from ``series(text)``; K ≥ 2 only."""
        return {}

    # ---- finite matrices ------------------------------------------------------------------------
    def mean_weights(self, C):
        """The weights c of the pre-activations' mean at d = ∞, ``E G_ijk = c_ij m_k`` flattened over token pairs
        (MATH.md §2): 0 for a centred kind (a kind with a mean: vec C)."""
        return np.zeros(np.size(C))

    # ---- d = ∞ laws of Gaussian factors (exact initial moments, MATH.md §2) ---------------------------
    # ---- quadrature states --------------------------------------------------------------------
    def __repr__(self):
        return f"<model kind {self.name!r}>"


def symmetric_file_matrix(S, path, kind):
    """A from-file ``S`` that must be symmetric (tied, symmetric kinds): returned as it is, or a
    `ModelError` naming the file, the key and the asymmetry — never silently symmetrised."""
    if S.shape[0] != S.shape[1]:
        raise ModelError(f"{path}: array S must be square for the {kind} model, got shape {S.shape}")
    asymmetry = float(np.abs(S - S.T).max())
    if asymmetry > 1e-12 * max(1.0, float(np.abs(S).max())):
        raise ModelError(
            f"{path}: array S is not symmetric (max |S - Sᵀ| = {asymmetry:.3g}); the {kind} model needs a "
            "symmetric S: symmetrise it yourself if that is what you mean"
        )
    return S


def psd_root(X, tol=1e-12):
    """``F`` (n × rank) with ``F Fᵀ = X`` for a symmetric PSD ``X``; eigenvalues below tol·max dropped."""
    w, V = np.linalg.eigh(0.5 * (X + X.T))
    keep = w > tol * max(w.max(initial=0.0), 1e-300)
    return V[:, keep] * np.sqrt(w[keep])


def single_letter_words(model):
    """The required words of a kind with one symmetric letter S_k per index (tied, symmetric): the
    traces t_k = μ(S_k) and the overlaps q_kl = μ(S_k S_l)."""
    pairs = [(k, l) for k in range(1, model.K + 1) for l in range(k, model.K + 1)]
    return [(f"S{k}", f"t_{k} (mean trace)") for k in range(1, model.K + 1)] + [
        (f"S{k} S{l}", f"q_{k}{l} (Phi and Gamma depend on it)") for k, l in pairs
    ]


def single_letter_overlap(series):
    """p12 = q12 − t1 t2 of a kind with one symmetric letter per index."""
    return {"p12": series("S1 S2") - series("S1") * series("S2")}
