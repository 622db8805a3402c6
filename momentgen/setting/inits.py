"""How each index starts: `InitSpec` (one ``[init.k]`` table of a configuration).

* ``gaussian``: factors with iid ``N(0, scale²/d)`` entries and inner width ``width_ratio · d``
  (scales ``scale_U``, ``scale_V`` for a kind with two factors);
* ``identity``: the letters are ``c I``;
* ``from-file``: finite-d matrices from an ``.npz`` (`momentgen.setting.matrices.load_factors`);
* ``aligned``: the letter is ``c Σ^b`` (b = ``exponent``), a function of the data covariance Σ
  (MATH.md §10: the source condition of the scaling-law literature).

``mean``: the pre-activation mean ``Tr(Σ M_k)/√d`` (Σ = I for isotropic tokens) of a kind with a mean (None: not
set — 0 at d = ∞; a draw keeps its own O(1/√d) value, a file its own value).
"""

from dataclasses import dataclass

import numpy as np

from ..core.errors import ModelError

__all__ = ["InitSpec", "INIT_KINDS"]

INIT_KINDS = ("gaussian", "identity", "from-file", "aligned")


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
    mean: float = None  # a kind with a mean: m_k = Tr(Σ M_k)/√d at the start (None: not set)
    exponent: float = 1.0  # aligned: b of c Σ^b

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
        """The mean m_k this spec asks for at the start (0 unless given)."""
        return 0.0 if self.mean is None else float(self.mean)
