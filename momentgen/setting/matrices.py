"""Finite-d matrices: the letters of factors, the trace moments of words on them, and where the
factors come from (sampled with a seed, or read from a file).

This is the reference side of a word: ``μ_α = (1/d) Tr(Z_1 ⋯ Z_w)`` evaluated on actual
``d × d`` matrices at finite ``d`` (MATH.md §2). Factors are in the layout of the model's kind
(`momentgen.models.ModelKind`: e.g. ``W_k`` whose letter is ``W_k W_kᵀ``, or ``(U_k, V_k)``);
letter matrices are listed in letter-code order (`momentgen.models.words.Alphabet`). Nothing here
depends on the theory: SGD and the matrix flow use it, and so does the theory when it starts
from finite matrices.
"""

import collections
import functools
import zipfile
import zlib

import numpy as np

from .. import models
from ..core.errors import ModelError, MomentgenError, WordError
from ..core.files import check_regular_file

__all__ = [
    "read_vectors",
    "read_covariance",
    "letter_matrices",
    "trace_moments",
    "means",
    "sample_factors",
    "initial_factors",
    "load_factors",
    "matrix_bytes",
    "MAX_DIMENSION",
    "MAX_ARRAY_BYTES",
]

MAX_DIMENSION = 10_000  # d of matrices read from a file: each d × d letter takes 8 d² bytes (0.8 GB here)
MAX_ARRAY_BYTES = 2 * 2**30  # one array in an .npz, as its header declares it
MAX_FILE_BYTES = 3 * MAX_ARRAY_BYTES  # a whole .npz (two arrays and their headers)
MAX_TABLE = 1_000_000  # entries of a vector read from a file (a schedule's table)
MAX_DENSE_SIGMA = 3000  # d of a dense from-file Σ: its eigendecomposition at load costs O(d³) (a few seconds here)
MAX_ENTRY = 1e6  # |an entry| of a from-file matrix: beyond it the moments of degree M overflow


def matrix_bytes(model, n, inits=None, batch=0, L=1):
    """An upper estimate of the memory (bytes) of a run on n × n matrices of ``model``: its factors (a
    tied ``W_k`` is n × width_ratio·n), their letters, a few products of the trace-moment stack and the
    flow's work arrays, and — for SGD — a minibatch of ``batch`` samples of ``L`` tokens and its
    pre-activations. Checked against ``[truncation] max_memory_gb`` before anything is allocated."""
    widest = max([1.0] + [spec.width_ratio for spec in (inits or {}).values()])
    square = 8.0 * n * n * (model.K * (3 + 2 * widest) + 6)
    return square + 8.0 * batch * L * n * (model.K + 3)


def letter_matrices(model, factors, sigma=None):
    """The letter matrices of the kind ``model`` (a name) built from its factors, in letter-code order, and the data
    covariance ``sigma`` (a d × d Σ, or None) last."""
    return models.get(model).matrices.letter_matrices(factors, sigma)


def means(model, factors, sigma=None):
    """Pre-activation means Tr(Σ M_k)/√d of finite factors (kinds with a mean; Σ = ``sigma``, I if None), else None."""
    return model.definition.matrices.means(factors, sigma)


def _complete(model, specs):
    missing = [k for k in range(1, model.K + 1) if k not in specs]
    if missing:
        raise ModelError(f"no init given for indices {missing}: add an [init.{missing[0]}] table")
    return specs


def sample_factors(model, specs, d, seed, data=None):
    """Finite-d factors (the kind's layout) drawn from ``specs`` ({k: InitSpec}) with a seed; from-file
    indices are read (their d must be ``d``); aligned ones are ``c Σ^b`` of the data covariance ``data``
    (`momentgen.setting.data.DataCovariance`); a Gaussian index with a configured mean is shifted to it, the mean
    read as Tr(Σ M)/√d."""
    rng = np.random.default_rng(seed)
    specs = _complete(model, specs)
    family, factors = model.definition, []
    for k in range(1, model.K + 1):
        spec = specs[k]
        if spec.kind == "from-file":
            factors.append(load_factors(model, spec.path, d))
        elif spec.kind == "identity":
            factors.append(family.matrices.identity_factor(spec.c, d))
        elif spec.kind == "aligned":
            factors.append(family.matrices.aligned_factor(spec.c, data.power(d, spec.exponent / 2)))
        else:
            factor = family.matrices.sample_factor(spec, d, rng)
            if spec.mean is not None:  # the mean Tr(Σ M)/√d: Σ only built when it is needed
                sigma = None if data is None else data.letter(model, d)
                factor = family.matrices.shifted_to_mean(factor, spec.mean, sigma)
            factors.append(factor)
    return factors


def initial_factors(model, inits, d, seed, data=None):
    """The finite-d matrices an SGD run with ``seed`` starts from (shared with the matrix flow
    and with the theory started from finite matrices)."""
    init_seed = np.random.SeedSequence(seed).spawn(2)[0]
    return sample_factors(model, inits, d, seed=int(init_seed.generate_state(1)[0]), data=data)


def load_factors(model, path, d=None):
    """One index's factors from an .npz, in the kind's layout (`ModelKind.file_arrays`: e.g. tied
    ``W`` or ``S``, untied ``U`` and ``V``). ``d``, if given, must match.

    Nothing is trusted before it is checked: each array's declared size (zip entry and .npy
    header) against `MAX_ARRAY_BYTES`, its shape (2-d, d ≤ `MAX_DIMENSION`) and dtype (real
    numbers; no pickles) before it is read, its values (finite) after.
    """
    family = model.definition
    arrays = _read_npz(path, family.file_arrays)
    factor = family.matrices.file_factor(arrays, path)
    size = family.matrices.dimension(factor)
    for array in arrays.values():
        if array.shape[0] != size:
            raise ModelError(f"{path}: every array must have {size} rows (d), got shape {array.shape}")
    if d is not None and size != d:
        raise ModelError(f"{path}: matrices are {size}-dimensional but d = {d}")
    return factor


def read_covariance(path):
    """A from-file data covariance Σ (MATH.md §10): ``{"values": eigenvalues, "vectors": eigenvectors or None}``
    from an .npz holding ``eigenvalues`` (a vector: Σ = diag(eigenvalues), *in the file's order*, the order of the
    coordinates SGD's tokens and a from-file student share) or ``Sigma`` (a symmetric positive-definite matrix of
    dimension ≤ `MAX_DENSE_SIGMA`: its eigendecomposition costs O(d³) at load), never both; checked like a
    from-file init (size, dtype, finite) and then for symmetry and positivity."""
    if {"eigenvalues", "Sigma"} <= _npz_members(path, "[data] covariance file"):
        raise ModelError(f"{path}: holds both `eigenvalues` and `Sigma`; keep one of them (they could disagree)")
    arrays = _read_npz(
        path, (("eigenvalues",), ("Sigma",)), "[data] covariance file", ndim={"eigenvalues": 1},
        largest={"Sigma": MAX_DENSE_SIGMA},
    )  # fmt: skip
    if "eigenvalues" in arrays:
        values, vectors = arrays["eigenvalues"], None
    else:
        values, vectors = _eigen_of_sigma(arrays["Sigma"], path)
    smallest = float(np.min(values))
    if not smallest > 0:
        raise ModelError(f"{path}: Sigma must be positive definite (smallest eigenvalue {smallest:.3g})")
    if len(values) > MAX_DIMENSION:
        raise ModelError(f"{path}: Sigma has dimension {len(values)}; the limit is d ≤ {MAX_DIMENSION}")
    return {"values": tuple(float(v) for v in values), "vectors": vectors}


def _eigen_of_sigma(S, path):
    """(eigenvalues, eigenvectors as columns) of a file's dense ``Sigma``, after its shape and symmetry checks."""
    if S.shape[0] != S.shape[1]:
        raise ModelError(f"{path}: array Sigma must be square, got shape {S.shape}")
    asymmetry = float(np.abs(S - S.T).max())
    if asymmetry > 1e-12 * max(1.0, float(np.abs(S).max())):
        raise ModelError(f"{path}: array Sigma is not symmetric (max |Sigma - Sigma^T| = {asymmetry:.3g})")
    return np.linalg.eigh(S)


def _npz_members(path, what):
    """The names of the arrays an .npz holds (the archive's ``*.npy`` entries), or a one-line `ModelError`."""
    with _open_npz(path, what) as archive:
        return {n[:-4] for n in archive.namelist() if n.endswith(".npy")}


def read_vectors(path, names, what):
    """The 1-d arrays ``names`` of an .npz, checked as a from-file init's (size, dtype, finite values)."""
    return _read_npz(path, (tuple(names),), what, ndim=1)


def _read_npz(path, alternatives, what="from-file init", ndim=2, largest=None):
    """The arrays of the first of ``alternatives`` (tuples of names) an .npz holds in full, checked
    (``ndim``: 2 for matrices, 1 for vectors such as a schedule's table, or {name: ndim} with 2 for the names it
    leaves out; ``largest``: {name: the largest dimension of that matrix}, `MAX_DIMENSION` for the others, checked
    on the header before the data is read; ``what`` names the file's role)."""
    with _open_npz(path, what) as archive:
        held = {n[:-4] for n in archive.namelist() if n.endswith(".npy")}
        wanted = next((names for names in alternatives if set(names) <= held), None)
        if wanted is None:
            need = " or ".join(" and ".join(names) for names in alternatives)
            raise ModelError(f"{path} holds {sorted(held)}; this model needs {need}")
        out = {}
        for name in wanted:
            info = archive.getinfo(f"{name}.npy")
            if info.file_size > MAX_ARRAY_BYTES:
                raise ModelError(
                    f"{path}: array {name} would take {info.file_size / 2**30:.3g} GiB; the limit is "
                    f"{MAX_ARRAY_BYTES / 2**30:g} GiB"
                )
            with archive.open(info) as member:
                shape, dtype = _npy_header(member, path, name)
            _check_shape(shape, dtype, path, name, ndim.get(name, 2) if isinstance(ndim, dict) else ndim)
            _check_largest(shape, (largest or {}).get(name), path, name)
            array = _read_member(archive, info, path, name)
            if not np.all(np.isfinite(array)):
                raise ModelError(f"{path}: array {name} holds non-finite values (NaN or inf)")
            if array.size and np.abs(array).max() > MAX_ENTRY:
                raise ModelError(
                    f"{path}: array {name} has an entry of size {np.abs(array).max():.3g}; entries must be at most "
                    f"{MAX_ENTRY:g} (the factors' entries are O(1/√d))"
                )
            out[name] = np.asarray(array, dtype=float)
    return out


#: What a damaged archive member raises while it is read: a bad CRC or a truncated member (BadZipFile, EOFError),
#: broken deflate data (zlib.error), a header that lies about the data (ValueError), a read error (OSError).
_DAMAGED = (zipfile.BadZipFile, zlib.error, EOFError, ValueError, OSError)


def _open_npz(path, what):
    """The .npz at ``path`` as an open `zipfile.ZipFile`, after `check_regular_file`; a one-line `ModelError`
    naming ``what`` and the path for a missing, oversized, non-regular or non-zip file."""
    try:
        check_regular_file(path, MAX_FILE_BYTES, what)
        return zipfile.ZipFile(path)
    except FileNotFoundError:
        raise ModelError(f"{what}: {str(path)!r} not found") from None
    except MomentgenError as error:
        raise ModelError(str(error)) from None
    except (zipfile.BadZipFile, OSError, ValueError) as error:
        raise ModelError(f"{what}: {str(path)!r} is not an .npz archive ({error})") from None


def _read_member(archive, info, path, name):
    """The array of one member whose header was checked; a damaged member is a one-line `ModelError`."""
    try:
        with archive.open(info) as member:
            return np.lib.format.read_array(member, allow_pickle=False)
    except _DAMAGED as error:
        raise ModelError(
            f"{path}: array {name} is damaged ({type(error).__name__}: {error}); write the file again"
        ) from None


def _npy_header(member, path, name):
    try:
        version = np.lib.format.read_magic(member)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read(member)  # shape, Fortran order, dtype
    except _DAMAGED as error:
        raise ModelError(f"{path}: array {name} is not a valid .npy ({type(error).__name__}: {error})") from None
    return shape, dtype


def _check_shape(shape, dtype, path, name, ndim=2):
    if dtype.kind not in "fiu" or dtype.hasobject:
        raise ModelError(f"{path}: array {name} has dtype {dtype}; real numbers are needed")
    if ndim == 1:
        if len(shape) != 1 or not 2 <= shape[0] <= MAX_TABLE:
            raise ModelError(f"{path}: array {name} must be a vector of 2 to {MAX_TABLE} numbers, got shape {shape}")
        return
    if len(shape) != 2:
        raise ModelError(f"{path}: array {name} must be a matrix (2-d), got shape {shape}")
    d = shape[0]
    if min(shape) < 1:
        raise ModelError(f"{path}: array {name} has shape {shape}: a matrix needs at least one row and column")
    if d > MAX_DIMENSION or shape[1] > MAX_DIMENSION:
        raise ModelError(
            f"{path}: array {name} has shape {shape}: the letters would be {d} × {d} "
            f"({8 * d * d / 2**30:.2g} GiB each); the limit is d ≤ {MAX_DIMENSION}"
        )
    if np.prod(shape, dtype=float) * dtype.itemsize > MAX_ARRAY_BYTES:
        raise ModelError(f"{path}: array {name} of shape {shape} exceeds {MAX_ARRAY_BYTES / 2**30:g} GiB")


def _check_largest(shape, limit, path, name):
    """A matrix whose use costs O(d³) at load (a dense Σ's eigendecomposition) is refused above ``limit``."""
    if limit is not None and max(shape) > limit:
        raise ModelError(
            f"{path}: array {name} is {shape[0]} × {shape[-1]}; a dense {name} is limited to d ≤ {limit} (its "
            "eigendecomposition is O(d³)): store a diagonal Sigma as `eigenvalues`"
        )


def trace_moments(words, letters, transposes=None):
    """``(1/d) Tr(Z_1 ⋯ Z_w)`` for each word, as a float array of shape (len(words),).

    ``words`` are tuples of letter codes, ``letters`` the (d, d) letter matrices in code order. A diagonal letter
    (`momentgen.models.base.diagonal_of`: Σ in its eigenbasis, an identity) multiplies by scaling, O(d²). Each word
    is rotated (the trace is cyclic) and cut in two halves P, Q that each start at a dense letter and hold about
    half of its dense letters: ``Tr(P Q) = Σ P ∘ Qᵀ`` costs O(d²), so a word with at most two dense letters costs no
    O(d³) product and one with k costs k − 2; among the cuts, the one whose halves the call's other words share
    most (`_trace_plan`, cached per word list), and every half is multiplied once per call; a second half is
    transposed into contiguous memory once per call, so each trace is one contiguous dot product. ``transposes``
    (``transposes[c]``: the code of letter c's transpose, `momentgen.models.alphabet.Alphabet.transpose`) lets a
    second half be read as the product of its mirror ``Z_wᵀ ⋯ Z_1ᵀ`` where the call has made that product already,
    or as the letter itself where the mirror is one contiguous letter (a symmetric S, the Mᵀ of an M), instead of
    copying its transpose (16 copies an evaluation of an untied flow with Σ).
    """
    d = letters[0].shape[0]
    diagonals = [models.base.diagonal_of(letter) for letter in letters]
    plan = _trace_plan(tuple(map(tuple, words)), tuple(diagonal is None for diagonal in diagonals))
    halves = _Halves(letters, diagonals, transposes)
    for dense, first, _ in plan:  # every first half, so that a second half can be read from its mirror
        if dense >= 2:
            halves.product(first)
    result = np.empty(len(words))
    for i, (dense, first, second) in enumerate(plan):
        result[i] = halves.trace(dense, first, second) / d
    return result


class _Halves:
    """The products one `trace_moments` call makes, each once (dropped with the call: plain dictionaries, no
    reference cycle — a closure that called itself was one, and kept every call's products, hundreds of n × n
    matrices, alive until the cyclic garbage collector ran: 0.6 GB at n = 256 on an untied flow)."""

    def __init__(self, letters, diagonals, transposes):
        self.letters, self.diagonals, self.transposes = letters, diagonals, transposes
        self.products, self.transposed, self.diagonal_products = {}, {}, {}

    def trace(self, dense, first, second):
        """``Tr`` of a word cut by `_trace_plan` into ``first`` and ``second`` with ``dense`` dense letters."""
        if dense == 0:  # every letter diagonal: the product of the diagonals
            return self.diagonal_product(first).sum()
        if dense == 1:  # Tr(L D₁ D₂ ⋯) = Σ_j L_jj D₁(j) D₂(j) ⋯
            diagonal = np.diagonal(self.letters[first[0]])
            return np.dot(diagonal, self.diagonal_product(first[1:])) if len(first) > 1 else diagonal.sum()
        return np.vdot(self.product(first), self.transpose(second))

    def product(self, codes):
        """``Z_1 ⋯ Z_n`` of a tuple of codes that starts with a dense letter, left to right from its longest product
        already made (each prefix cached)."""
        products, letters = self.products, self.letters
        if codes not in products:
            start = max((k for k in range(1, len(codes)) if codes[:k] in products), default=0)
            value = products[codes[:start]] if start else letters[codes[0]]
            for k in range(max(start, 1), len(codes)):
                value = times_letter(value, letters[codes[k]], self.diagonals[codes[k]])
                products[codes[: k + 1]] = value
            products[codes] = value
        return products[codes]

    def transpose(self, codes):
        """``(Z_1 ⋯ Z_n)ᵀ`` (cached): read from its mirror where it can be (`mirrored`), else a copy in C order."""
        if codes not in self.transposed:
            value = self.mirrored(codes)
            self.transposed[codes] = np.ascontiguousarray(self.product(codes).T) if value is None else value
        return self.transposed[codes]

    def mirrored(self, codes):
        """``(Z_1 ⋯ Z_n)ᵀ`` as its mirror ``Z_nᵀ ⋯ Z_1ᵀ`` — the mirror's leading diagonal letters scaling the rows of
        the rest, where the rest is a product this call has made or one contiguous letter (an M beside its Mᵀ, a
        symmetric S: one O(d²) scaling at most, where a copy of the transpose follows the product's own) — or None
        (no ``transposes``, or no such rest). ``codes`` starts with a dense letter, so its mirror ends with one."""
        if self.transposes is None:
            return None
        mirror = tuple(self.transposes[c] for c in reversed(codes))
        split = next(k for k, c in enumerate(mirror) if self.diagonals[c] is None)
        prefix, rest = mirror[:split], mirror[split:]
        if rest in self.products:
            value = self.products[rest]
        elif len(rest) == 1 and self.letters[rest[0]].flags.c_contiguous:
            value = self.letters[rest[0]]
        else:
            return None
        return self.diagonal_product(prefix)[:, None] * value if prefix else value

    def diagonal_product(self, codes):
        """The elementwise product of the diagonals of ``codes`` (diagonal letters), cached."""
        if codes not in self.diagonal_products:
            value = self.diagonals[codes[0]]
            for c in codes[1:]:
                value = value * self.diagonals[c]
            self.diagonal_products[codes] = value
        return self.diagonal_products[codes]


@functools.lru_cache(maxsize=64)
def _trace_plan(words, dense_letters):
    """For each word: (its number of dense letters, P, Q) — the halves of `trace_moments` (for fewer than two dense
    letters: (0 or 1, the word rotated to start at its dense letter, ())). ``dense_letters[c]``: whether letter c is
    dense. Among the rotations that start at a dense letter, the cut whose halves with two or more dense letters are
    most frequent over all words' candidates is chosen, so that the call multiplies shared halves once."""
    candidates = []
    for word in words:
        if not word:
            raise WordError("empty word: a trace moment needs at least one letter")
        dense = [j for j, c in enumerate(word) if dense_letters[c]]
        if len(dense) < 2:
            start = dense[0] if dense else 0
            candidates.append((len(dense), [(word[start:] + word[:start], ())]))
            continue
        k, cuts = len(dense), []
        for a in range(k):
            rotated = word[dense[a] :] + word[: dense[a]]
            cut = (dense[(a + (k + 1) // 2) % k] - dense[a]) % len(word)
            cuts.append((rotated[:cut], rotated[cut:]))
        candidates.append((k, cuts))
    halves = (half for k, cuts in candidates if k >= 2 for cut in set(cuts) for half in cut)
    frequency = collections.Counter(half for half in halves if _dense_count(half, dense_letters) >= 2)

    def shared(cut):
        return sum(frequency[half] for half in cut if _dense_count(half, dense_letters) >= 2)

    return tuple((k, *max(cuts, key=shared)) for k, cuts in candidates)


def _dense_count(codes, dense_letters):
    return sum(dense_letters[c] for c in codes)


def times_letter(P, letter, diagonal=None):
    """``P @ letter``, by scaling the columns when the letter is diagonal (its `diagonal_of`)."""
    return P @ letter if diagonal is None else P * diagonal[None, :]
