"""The run pipeline's middle: Config → `Problem` → closure → `momentgen.dynamics.results.Result`.

A `Problem` is what any closure needs to run one configuration: the model, the loss and its
potential Φ, the initial state (a d = ∞ law of independent inits, or finite-d factors — from
files, or given, e.g. the matrices an SGD run starts from), the initial means of a kind with a
mean, the output grid on the kind's time axis and the words to report. The CLI, the Python API,
`momentgen.evidence.comparison` and `verify` all go through `Problem.from_config` and a closure of
`momentgen.dynamics.closures.CLOSURES`.
"""

import re
from dataclasses import dataclass
from functools import cached_property, partial

import numpy as np

from ..compiler.initial import empirical_moments, exact_moments
from ..compiler.potential import Potential
from ..compiler.truncation import CoefficientSource, Truncation, check_kappa, source_program
from ..models.words import parse
from ..setting.flow import run as run_flow
from ..setting.flow import run_stochastic
from ..setting.matrices import means as factor_means

__all__ = ["Problem"]


#: A time as the integrator's messages quote it (``"blowup at t = 0.37"``): on the integrated axis under a schedule.
_QUOTED_TIME = re.compile(r"\bt = ([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)")


@dataclass
class Problem:
    """One configuration, ready to run (see the module docstring).

    ``factors``: finite-d matrices the state starts from (None: the d = ∞ law of the inits).
    ``potential``: built on first use (so that a size guard refuses before any symbolic work),
    then reused by every run of the problem (its compiled integrand, its rule level).
    ``kappa``: κ = ηd/B of the finite-learning-rate term (default `Config.kappa`: 0 unless
    ``[integrate] finite_lr``). ``estimate``: whether a flow closure also runs the legs that only serve its error
    estimate (False: the reported leg alone, no estimate, status ``unverified``). ``n_jobs``: the processes a
    matrix-model ensemble's draws run on (None: `momentgen.dynamics.ensemble.ENSEMBLE_JOBS`); the draws, and so the
    result, are the same on any number of them.
    """

    config: object
    factors: list = None
    given_potential: Potential = None
    kappa: float = None
    output_times: tuple = ()
    spectra: bool = False
    estimate: bool = True
    n_jobs: int = None

    def __post_init__(self):
        self.kappa = check_kappa(self.config.kappa if self.kappa is None else self.kappa)

    @classmethod
    def from_config(
        cls, config, factors=None, potential=None, kappa=None, times=(), spectra=False, estimate=True, n_jobs=None
    ):
        """The problem of ``config``; ``factors`` (finite matrices) override the inits' d = ∞ law — a
        from-file init gives its own (`Config.start_factors`); ``kappa`` overrides `Config.kappa`; ``times``
        are extra output times in [0, T] (e.g. where a spectrum is wanted); ``spectra``: the flow closures
        also record the trainable letters' spectra (`momentgen.setting.spectra`; a matrix model's eigenvalues cost
        about a second per letter and 51 times at n = 400); ``estimate``, ``n_jobs``: see the class."""
        factors = config.start_factors() if factors is None else factors
        times = tuple(float(t) for t in times)
        return cls(config, factors, potential, kappa, times, bool(spectra), estimate, n_jobs)

    @cached_property
    def potential(self):
        return self.given_potential or Potential.from_config(self.config)

    # ---- what the configuration says ------------------------------------------------------------
    @property
    def model(self):
        return self.config.model

    @property
    def definition(self):
        """The kind's `momentgen.models.ModelKind`."""
        return self.config.model.definition

    @cached_property
    def loss(self):
        return self.config.loss()

    @cached_property
    def specs(self):
        return self.config.inits()

    @cached_property
    def data(self):
        """The tokens' covariance Σ (`momentgen.setting.data.DataCovariance`)."""
        return self.config.data()

    def sigma_of(self, factors):
        """Σ at the dimension of ``factors`` (a d × d matrix), None for isotropic tokens: the reference's own Σ when the
        problem starts from given finite matrices, else an n × n matrix that follows Σ's law (the matrix model)."""
        if self.factors is not None:
            return self.config.sigma_of(factors)
        return self.data.law_power(self.definition.matrices.dimension(factors[0]), 1.0) if self.model.sigma else None

    @property
    def gamma(self):
        return self.config.settings.model.gamma

    @property
    def integrate(self):
        return self.config.settings.integrate

    @cached_property
    def nominal_times(self):
        """The output grid on [0, T] on the kind's time axis (∝ samples: where results are reported; linear or log,
        `Config.output_times`), with the extra ``output_times``."""
        grid = self.config.output_times()
        return np.union1d(grid, self.output_times) if self.output_times else grid

    @cached_property
    def time_change(self):
        """The `momentgen.setting.schedules.TimeChange` of a scheduled run, None for constant lr and batch."""
        return self.config.time_change()

    @cached_property
    def times(self):
        """The grid the closures integrate on: the nominal grid, or under a schedule its integrated times
        ``s(t)`` (on which the κ → 0 hierarchy is that of a constant rate, MATH.md §11)."""
        if self.time_change is None:
            return self.nominal_times
        return self.time_change.integrated(self.nominal_times)

    @property
    def kappa_profile(self):
        """``κ(s)/κ₀`` on the integrated axis (a function), None for constant lr and batch."""
        return None if self.time_change is None else self.time_change.kappa_factor

    def on_nominal_axis(self, result):
        """``result`` (computed on `times`) reported on the nominal axis: ``t`` the nominal grid, the
        integrated time an extra derived column ``"integrated_t"``, ``valid_until`` and
        ``extra["risk_valid_until"]`` mapped back, and every time ``t = s`` its message quotes (the integrator's
        axis) rewritten as ``t = <nominal> (integrated s = <s>)``. Unchanged without a schedule."""
        if self.time_change is None:
            return result
        n = len(result.t)
        result.derived = {**result.derived, "integrated_t": np.asarray(result.t, float)}
        result.t = self.nominal_times[:n]
        result.valid_until = self._nominal_time(result.valid_until, result.t)
        if result.extra.get("risk_valid_until") is not None:
            result.extra["risk_valid_until"] = self._nominal_time(result.extra["risk_valid_until"], result.t)
        result.message = _QUOTED_TIME.sub(self._quoted_nominal, result.message or "")
        return result

    def _nominal_time(self, s, nominal_grid):
        """The nominal time of an integrated time ``s``, at most the last nominal output time."""
        return float(min(self.time_change.nominal(s), nominal_grid[-1] if len(nominal_grid) else 0.0))

    def _quoted_nominal(self, match):
        nominal = float(self.time_change.nominal(float(match.group(1))))
        return f"t = {nominal:.6g} (integrated s = {match.group(1)})"

    @cached_property
    def words(self):
        """The reported canonical words (`Config.reported_words`)."""
        return self.config.reported_words()

    @cached_property
    def word_codes(self):
        """The reported words as letter-code tuples (the flow engine's and the moment oracles' form)."""
        return [parse(w, self.model) for w in self.words]

    @property
    def means(self):
        """Initial means of a kind with a mean (the factors' own when given), else None."""
        if self.factors is not None:  # the kind's `means`: None for a centred kind
            return factor_means(self.model, self.factors, self.sigma_of(self.factors))
        return self.config.initial_means()

    # ---- what runs need --------------------------------------------------------------------
    def initial_moments(self, codes):
        """Moments of the words ``codes`` at the start: the factors' ``(1/d) Tr``, or exact at d = ∞."""
        if self.factors is not None:
            return empirical_moments(self.model, self.factors, codes, self.sigma_of(self.factors))
        return exact_moments(self.model, self.specs, codes, self.data)

    def fast_phase(self):
        """A kind with a mean: the fast phase on t = nη from the initial order parameters (exact in every
        closure), as ``{"fast_t", "fast_m", "m_star"}``; else ``{}`` (`momentgen.compiler.slaved_mean`)."""
        program = self._source_program
        truncation = Truncation(program, self.potential, self.gamma, means=self.means)
        initial = partial(self.initial_moments, program.word_codes)  # computed only by a kind with a mean
        return truncation.mean.fast_phase(truncation, initial, self.integrate.fast_T)

    def matrix_flow(self, factors, means=None, spectra=None, stepper=None, sigma=None):
        """``factors`` moved by the kind's matrix flow with the theory's coefficients (starting on the
        branch ``means``), the reported words read as ``(1/d) Tr`` on `times` (and the ``spectra`` of
        `momentgen.setting.flow.run`): a `momentgen.setting.flow.FlowRun`. ``stepper``: the ``method``, ``rtol`` and
        ``atol`` of a state that is not commuting (default DOP853 at the engine's tolerances;
        `momentgen.setting.flow.CHEBYSHEV`). ``sigma``: the run's Σ (default `sigma_of` the factors)."""
        return run_flow(
            self.model, factors, self.source(means), times=self.times, codes=self.word_codes, texts=self.words,
            spectra=spectra, sigma=self.sigma_of(factors) if sigma is None else sigma, dense_stepper=stepper,
        )  # fmt: skip

    def law_run(self, factors, means=None, seed=0, spectra=None, stepper=None, sigma=None):
        """The matrix model's run from finite ``factors``: their matrix flow (`matrix_flow` with ``stepper``), or with
        κ > 0 the stochastic matrix model of the finite-learning-rate term with noise seed ``seed``
        (`momentgen.setting.flow.run_stochastic`; no spectra). ``sigma``: the draw's Σ (default `sigma_of` the
        factors: Σ's law at its midpoint quantiles)."""
        sigma = self.sigma_of(factors) if sigma is None else sigma
        if self.kappa > 0:
            return run_stochastic(
                self.model, factors, self.source(means), times=self.times, codes=self.word_codes, texts=self.words,
                seed=seed, sigma=sigma,
            )  # fmt: skip
        return self.matrix_flow(factors, means, spectra=spectra, stepper=stepper, sigma=sigma)

    def source(self, means=None):
        """The theory's `CoefficientSource` for the flow engine, starting on the branch ``means``."""
        means = self.means if means is None else means
        return CoefficientSource(
            self.model,
            self.potential,
            self.gamma,
            means=means,
            kappa=self.kappa,
            kappa_profile=self.kappa_profile,
            program=self._source_program,
        )

    @cached_property
    def _source_program(self):
        """The sources' degree-2 program, built once per problem (every leg and every risk reads one)."""
        return source_program(self.model, self.kappa, self.config.max_bytes)
