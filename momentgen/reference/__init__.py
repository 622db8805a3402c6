"""The references, independent of the theory: online SGD at finite d (`online_sgd`), the finite-d matrix flow
(`finite_flow`) and an SGD reference built from a configuration (`from_config`).

Imports `core`, `laws`, `models` and `setting` only — never the compiler, the dynamics or the evidence
(`tests/reference/test_independence.py` fails if it ever loads one of them). The public names are re-exported
here, so ``momentgen.reference.sgd`` and its neighbours keep their documented paths.
"""

from .finite_flow import matrix_flow
from .from_config import (
    check_sgd_plan,
    config_increments,
    config_sampler,
    config_sgd,
    excess_over_seeds,
    risk_over_seeds,
    simulate_config,
)
from .online_sgd import (
    RISK_SAMPLES,
    RiskProbe,
    SGDRun,
    SimulationResult,
    initial_factors,
    loss_gradient,
    loss_value,
    mean_increments,
    sgd,
    steps_for,
)

__all__ = [
    "SimulationResult",
    "SGDRun",
    "sgd",
    "matrix_flow",
    "simulate_config",
    "config_sgd",
    "config_sampler",
    "config_increments",
    "mean_increments",
    "steps_for",
    "check_sgd_plan",
    "loss_gradient",
    "loss_value",
    "RiskProbe",
    "RISK_SAMPLES",
    "risk_over_seeds",
    "excess_over_seeds",
    "initial_factors",
]
