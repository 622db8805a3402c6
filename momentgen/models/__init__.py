"""Model kinds: one module per kind, one registry (`KINDS`), and `Model` (a kind with K indices).

Adding a kind is one new module in this package implementing `ModelKind` (see `base`) and one
line in `KINDS`; docs/ARCHITECTURE.md walks through it. Everything else in momentgen reaches the
kind through ``model.definition`` and never names it.
"""

from dataclasses import dataclass, field

import numpy as np

from ..core.errors import ModelError, WordError
from .alphabet import Alphabet
from .base import NOISE_FAMILIES, Batch, Family, ModelKind, Rule
from .registry import KINDS, get

__all__ = ["KINDS", "NOISE_FAMILIES", "Model", "ModelKind", "Family", "Rule", "Batch", "get"]


@dataclass(frozen=True)
class Model:
    """A model to compile: its kind, number of indices ``K`` and trainable indices (1-based).

        The trainable set defaults to every index. Coefficient values (Γ, a, β, A, B, γ) are
        *not* part of the model: they are inputs of the compiled program. ``sigma``: the tokens have a
        covariance Σ ≠ I (MATH.md §10), a fixed letter ``Sigma`` in the words (its law is data, not part of
        the model). ``definition`` is the kind's `ModelKind` (its letters, rules and coefficient families, and its roles
    ``definition.matrices``, ``definition.laws``), ``alphabet`` its letters (`momentgen.models.words.Alphabet`).
    """

    kind: str
    K: int
    trainable: tuple = None
    sigma: bool = False
    definition: ModelKind = field(init=False, repr=False, compare=False)
    #: Code of the letter Σ, None for isotropic tokens (set once: the flows ask at every evaluation).
    sigma_code: int | None = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "definition", get(self.kind))
        if isinstance(self.K, bool) or not isinstance(self.K, (int, np.integer)) or self.K < 1:
            raise WordError(f"K must be a positive integer (number of indices), got {self.K!r}")
        trainable = tuple(range(1, self.K + 1)) if self.trainable is None else self.trainable
        if isinstance(trainable, (str, bytes)) or not hasattr(trainable, "__iter__"):
            raise ModelError(f"trainable must be a list of 1-based indices, got {self.trainable!r}")
        if any(isinstance(k, bool) or not isinstance(k, (int, np.integer)) for k in trainable):
            raise ModelError(f"trainable must be a list of integer indices (1-based), got {self.trainable!r}")
        trainable = tuple(sorted({int(k) for k in trainable}))
        bad = [k for k in trainable if not 1 <= k <= self.K]
        if bad:
            raise ModelError(f"trainable indices {bad} are out of range 1..{self.K} (indices are 1-based)")
        object.__setattr__(self, "trainable", trainable)
        object.__setattr__(self, "sigma", bool(self.sigma))
        object.__setattr__(self, "sigma_code", self.alphabet.sigma_code)

    @property
    def alphabet(self):
        return Alphabet(self.kind, self.K, self.sigma)

    @property
    def time_scale(self):
        return self.definition.time_scale

    def is_trainable_letter(self):
        """Boolean array over letter codes: does the letter carry a trainable index?"""
        alphabet = self.alphabet
        return np.array([alphabet.index(c) in self.trainable for c in range(alphabet.size)])
