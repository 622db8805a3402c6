"""The references, independent of the theory: online SGD at finite d and the finite-d matrix flow.

Imports `core`, `laws`, `models` and `setting` only — never the compiler, the dynamics or the evidence
(`tests/reference/test_independence.py` fails if it ever loads one of them). The public names are re-exported
here, so ``momentgen.reference.online_sgd`` and its neighbours keep their documented paths.
"""

from .online_sgd import (
    RISK_SAMPLES,
    RiskProbe,
    SGDRun,
    SimulationResult,
    check_sgd_plan,
    config_sgd,
    initial_factors,
    loss_gradient,
    loss_value,
    matrix_flow,
    mean_increments,
    risk_over_seeds,
    sgd,
    simulate_config,
    steps_for,
)

__all__ = [
    "SimulationResult",
    "SGDRun",
    "sgd",
    "matrix_flow",
    "simulate_config",
    "config_sgd",
    "mean_increments",
    "steps_for",
    "check_sgd_plan",
    "loss_gradient",
    "loss_value",
    "RiskProbe",
    "RISK_SAMPLES",
    "risk_over_seeds",
    "initial_factors",
]
