"""Finite-d matrices of the letters, and the trace moments of words on them.

This is the reference side of a word: ``μ_α = (1/d) Tr(Z_1 ⋯ Z_w)`` evaluated on
actual ``d × d`` matrices at finite ``d`` (MATH.md §2). Letter matrices are listed in
letter-code order (`momentgen.words.Alphabet`):

* tied:   factors ``[W_1, …, W_K]``, ``W_k`` of shape (d, d_k); letters ``S_k = W_k W_kᵀ``;
* untied: factors ``[(U_1, V_1), …]``, shapes (d, d_k); letters ``M_k = U_k V_kᵀ``,
  ``M_kᵀ``, ``A_k = U_k U_kᵀ``, ``B_k = V_k V_kᵀ``;
* direct: factors ``[S_1, …, S_K]``, any (d, d) matrices; letters ``S_k``, ``S_kᵀ``.
"""

import numpy as np

from .errors import WordError
from .words import check_model

__all__ = ["letter_matrices", "trace_moments", "untied_means"]


def letter_matrices(model, factors):
    """The letter matrices of ``model`` built from its factors, in letter-code order."""
    check_model(model)
    if model == "tied":
        return [W @ W.T for W in factors]
    if model == "untied":
        out = []
        for U, V in factors:
            M = U @ V.T
            out += [M, M.T, U @ U.T, V @ V.T]
        return out
    return [m for S in factors for m in (S, S.T)]


def untied_means(factors):
    """Untied pre-activation means ``m_k = Tr(U_k V_kᵀ)/√d`` of finite factors (array over k)."""
    return np.array([np.sum(U * V) / np.sqrt(len(U)) for U, V in factors])


def trace_moments(words, letters):
    """``(1/d) Tr(Z_1 ⋯ Z_w)`` for each word, as a float array of shape (len(words),).

    ``words`` are tuples of letter codes, ``letters`` the (d, d) letter matrices in code
    order. Words are visited in lexicographic order and keep a stack of prefix products,
    so a shared prefix is multiplied once; memory is O(w d²). The last letter enters
    through ``Tr(P Z) = Σ P ∘ Zᵀ`` without a product.
    """
    d = letters[0].shape[0]
    order = sorted(range(len(words)), key=lambda i: tuple(words[i]))
    result = np.empty(len(words))
    stack = []  # stack[j] = product of the first j + 1 letters of the previous word
    previous = ()
    for i in order:
        word = tuple(words[i])
        if not word:
            raise WordError("empty word: a trace moment needs at least one letter")
        shared = 0
        while shared < min(len(word), len(previous), len(stack)) and word[shared] == previous[shared]:
            shared += 1
        del stack[min(shared, len(word) - 1) :]
        for c in word[len(stack) : len(word) - 1]:
            stack.append(letters[c] if not stack else stack[-1] @ letters[c])
        last = letters[word[-1]]
        result[i] = (np.trace(last) if len(word) == 1 else np.sum(stack[-1] * last.T)) / d
        previous = word
    return result
