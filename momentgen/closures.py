"""Closures of the moment hierarchy: how the words beyond the state are supplied (MATH.md §6, §8).

A closure turns a configuration into a trajectory of the observables on the model's time
axis with an honest validity horizon and error estimate. Contract of a closure class:

1. ``name``: the value of ``[truncation] closure`` (and of ``--closure``) that selects it;
2. ``solve(config, degree=None, size=None)`` returns the JSON-ready dict of the ``solve``
   command: ``t``, ``series`` (canonical word → values), ``derived``, ``status``,
   ``valid_until``, ``message``, plus ``closure`` and ``error_estimate``;
3. the estimate compares two resolutions of the same closure (degrees M and M − 2; sizes n
   and n/2).

* ``zero`` — the paper's Π_M: words beyond degree M are 0. Exactly the Taylor polynomial in
  time when the coefficients are constant, so valid only inside a short window.
* ``matrix-model`` — evolve n × n matrices with the exact matrix flow, started from
  deterministic matrices that follow the d = ∞ initial law (`momentgen.initial.law_factors`:
  spectra at quantiles, Haar rotations between free indices), coefficients from the
  matrices' own moments. A realisable state, so it cannot blow up; error O(1/n).
"""

import time

import numpy as np

from .errors import ModelError

__all__ = ["Closure", "ZeroClosure", "MatrixModelClosure", "CLOSURES", "solve_with_closure"]


class Closure:
    """Base class: see the module docstring for the contract."""

    name = None

    def solve(self, config, degree=None, size=None):
        raise NotImplementedError


class ZeroClosure(Closure):
    name = "zero"

    def solve(self, config, degree=None, size=None):
        from .integrate import solve_config

        out = solve_config(config, degree)
        out["closure"] = self.name
        return out


class MatrixModelClosure(Closure):
    name = "matrix-model"

    def solve(self, config, degree=None, size=None):
        from .integrate import SolveResult, _to_json
        from .initial import law_factors
        from .potential import Potential
        from .simulate import _reported, matrix_flow

        model, integrate = config.model, config.section("integrate")
        n = size or config.section("truncation")["size"]
        potential = Potential(config.loss(), model.kind, C=config.section("model")["C"],
                              rtol=config.section("loss")["rtol"])  # fmt: skip
        inits = config.inits()
        means = [inits[k].mean for k in range(1, model.K + 1)] if model.kind == "untied" else None
        times = np.linspace(0.0, integrate["T"], integrate["points"])
        words = _reported(config)
        start, runs = time.perf_counter(), {}
        for size_ in (n, max(2, n // 2)):
            factors = law_factors(model, inits, size_, seed=0)
            runs[size_] = matrix_flow(model, potential, factors, times=times, words=words,
                                      gamma=config.section("model")["gamma"], means=means)  # fmt: skip
        fine, coarse = runs[n], runs[max(2, n // 2)]
        estimate = max(float(np.max(np.abs(fine.series[w] - coarse.series[w]))) for w in words)
        y = np.array([fine.series[w] for w in words]).T
        result = SolveResult(fine.t, y, words, "ok", f"matrix model of size {n} (estimate from n and n/2)",
                             float(fine.t[-1]), model.time_scale, None, "DOP853", fine.info.get("nfev", 0),
                             time.perf_counter() - start)  # fmt: skip
        result.valid_until = float(fine.t[-1])
        out = _to_json(result, words, config)
        out.update(closure=self.name, size=n, error_estimate=estimate)
        return out


CLOSURES = {cls.name: cls for cls in (ZeroClosure, MatrixModelClosure)}


def solve_with_closure(config, closure=None, degree=None, size=None):
    """Solve ``config`` with the named closure (default: ``[truncation] closure``)."""
    name = closure or config.section("truncation")["closure"]
    if name not in CLOSURES:
        raise ModelError(f"unknown closure {name!r}: choose one of {', '.join(CLOSURES)}")
    return CLOSURES[name]().solve(config, degree=degree, size=size)
