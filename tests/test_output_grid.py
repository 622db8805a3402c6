"""The output grid on a log axis (``[integrate] grid = "log"``): one grid for every closure and SGD's measurements."""

import numpy as np
import pytest

from momentgen.dynamics.closures import solve_with_closure
from momentgen.reference import simulate_config
from momentgen.setting.config import ConfigError, load_config


def test_a_log_grid_is_shared_by_the_theory_and_sgd():
    """``grid = "log"``: 0, then log-spaced from ``log_first`` to T; the theory reports there and SGD measures there
    (its steps within half a step of each time)."""
    config = load_config("fig4_linear", integrate={"grid": "log", "log_first": 0.005, "points": 6}, sgd={"d": 100})
    expected = np.concatenate([[0.0], np.geomspace(0.005, 0.05, 5)])
    np.testing.assert_allclose(config.output_times(), expected, rtol=1e-12)
    result = solve_with_closure(config)
    np.testing.assert_allclose(result.t, expected, rtol=1e-12)
    run = simulate_config(config, progress=False)
    np.testing.assert_allclose(run["t"], expected, rtol=1e-12)
    step = 4 * config.settings.sgd.lr / 100
    assert np.all(np.abs(np.subtract(run["t_reached"], expected)) <= step / 2 + 1e-12)


@pytest.mark.parametrize(
    "keys,match",
    [
        ({"grid": "exp"}, r"grid must be one of linear, log"),
        ({"grid": "log", "log_first": 0.0}, r"log_first must be a positive number"),
        ({"grid": "log", "log_first": 0.05}, r"log_first = 0.05 must be below T = 0.01"),
        ({"log_first": 0.001}, r"`log_first` applies to grid = \"log\" only"),
    ],
)
def test_bad_grid_keys_are_one_line_errors(keys, match):
    with pytest.raises(ConfigError, match=match):
        load_config("fig4_linear", integrate={"T": 0.01, **keys})


def test_an_sgd_step_longer_than_the_first_log_spacing_is_refused_first():
    """SGD cannot be reported at a log grid's first time when one step is longer: the check says which key to raise."""
    config = load_config("fig4_linear", integrate={"grid": "log", "log_first": 1e-5}, sgd={"d": 400})
    with pytest.raises(Exception, match=r"raise \[integrate\] log_first to at least"):
        simulate_config(config, progress=False)


@pytest.mark.parametrize("grid", ["linear", "log"])
def test_verify_reads_sgd_on_the_most_points_it_resolves(grid):
    """verify's finite-d leg reads SGD on the largest grid (≤ `points`) whose every spacing is at least one SGD step:
    the bisection against a brute-force scan of every point count, and against the closed form ⌊T/step⌋ + 1 on a
    linear grid."""
    from momentgen.evidence.verification_plan import _sgd_points

    config = load_config("fig4_linear", integrate={"grid": grid, "points": 200, "T": 0.5})
    for d, kappa in ((100, 0.05), (200, 0.2), (400, 0.01)):
        step = 4 * kappa * config.settings.sgd.batch / d / d  # tied: one step is 4η/d on t, η = κB/d
        scan = [p for p in range(2, 201) if np.diff(config.output_times(p)).min() >= step * (1 - 1e-9)]
        assert _sgd_points(config, d, kappa) == max(scan, default=2)
        if grid == "linear":
            assert _sgd_points(config, d, kappa) == min(200, int(0.5 / step * (1 + 1e-9)) + 1)
