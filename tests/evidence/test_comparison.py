"""The reference-side commands and claims: simulate, compare, Dask, untied fast phase, escapes."""

import json

import numpy as np
import pytest

from momentgen.compiler.hierarchy import Model, build
from momentgen.compiler.initial import InitSpec, empirical_moments, exact_moments
from momentgen.compiler.potential import Potential
from momentgen.compiler.truncation import Truncation, from_config
from momentgen.dynamics.integrate import solve
from momentgen.evidence.comparison import run_tasks, sgd_task
from momentgen.interface.cli import main
from momentgen.reference import sgd
from momentgen.setting.config import parse_config
from momentgen.setting.losses import builtin
from momentgen.setting.matrices import sample_factors
from tests.helpers import SMALL, write_config


def test_compare_command_writes_figure_and_table(tmp_path):
    out = tmp_path / "cmp"
    assert (
        main(
            [
                "compare",
                str(write_config(tmp_path)),
                "--degrees",
                "4,6",
                "--d",
                "30,40",
                "--out",
                str(out),
                "--closures",
                "zero,quadrature,matrix-model",
                "--theory-init",
                "infinite",
            ]
        )
        == 0
    )
    data = json.loads((out / "compare.json").read_text())
    assert (out / "compare.png").stat().st_size > 10_000
    assert all((out / f"compare.{suffix}").stat().st_size > 1_000 for suffix in ("svg", "pdf", "csv"))
    assert data["provenance"]["config"]["hash"] == data["config_hash"]
    kinds = {(r["comparison"], r["theory"], r["d"]) for r in data["table"] if r["observable"] == "S1 S1"}
    assert ("theory-sgd", "M=6", 40) in kinds and ("theory-flow", "M=4", 30) in kinds
    assert ("flow-sgd", None, 40) in kinds and ("theory-sgd", "matrix-model n=400", 30) in kinds
    assert ("theory-flow", "quadrature n=2", 40) in kinds  # degree 6 → order ⌊5/2⌋
    assert len(data["theory"]["quadrature n=2"]["error_series"]["estimate"]) == 6
    assert "S2 S2" not in data["observables"]  # constants are not compared
    flow_sgd = [r["sup_error"] for r in data["table"] if r["comparison"] == "flow-sgd"]
    assert max(flow_sgd) < 0.1  # ηd/B ≈ 0.01: SGD stays near the flow


def test_dask_cluster_returns_the_local_numbers():
    distributed = pytest.importorskip("dask.distributed")
    config = parse_config(SMALL)
    tasks = [(sgd_task, (config.raw, None, 30, seed)) for seed in (0, 1)]
    local = run_tasks(tasks, n_jobs=2)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        remote = run_tasks(tasks, scheduler=cluster.scheduler_address)
    for a, b in zip(local, remote):
        assert a["series"] == b["series"] and a["steps"] == b["steps"]


def test_untied_sgd_fast_phase_follows_the_fast_ode_then_tracks_m_star():
    """Untied, L = 1, h1, d = 100, η = 0.01, B = 1024: SGD's m1 on t = nη follows the fast ODE
    (started from the same matrices' q and means) within 0.01 — SGD noise on m (measured
    ≤ 0.004) — and afterwards stays at m*(q) = m2 (h1) within 0.015 on τ = nη/d (measured 0.008)."""
    d, lr = 100, 0.01
    model = Model("untied", 2, [1])
    loss = builtin("mse", L=1, K=2, activation="h1")
    inits = {1: InitSpec(scale_U=0.8, scale_V=0.8), 2: InitSpec()}
    factors = sample_factors(model, inits, d, seed=6)
    fast_t = np.linspace(0, 8, 9)
    run = sgd(
        model,
        loss,
        inits,
        d=d,
        lr=lr,
        batch=1024,
        times=[0, 0.05, 0.1],
        words=["M1 M2^T"],
        seed=1,
        factors=factors,
        progress=False,
        fast_times=fast_t,
    )
    program = build(model, 2, [])
    y0 = empirical_moments(model, factors, program.word_codes)
    means0 = run.info["fast_m"][0]
    truncation = Truncation(program, Potential(loss, "untied"), 0.0, means=means0)
    times, ode = truncation.fast_phase(y0, T=8.0, points=9)
    assert abs(means0[0] - means0[1]) > 0.05  # the fast phase has somewhere to go
    np.testing.assert_allclose(run.info["fast_m"][:, 0], ode[:, 0], atol=0.01)
    np.testing.assert_allclose(run.means[1:, 0], run.means[1:, 1], atol=0.015)  # after it: m1 tracks m*(q) = m2 on τ


def test_tied_h2_escapes_at_the_predicted_initial_rate():
    """Tied, h2, free Gaussian student and teacher: dp12/dt(0) = 16 t1² t2 (q22 − t2²) ≠ 0, so the
    centred overlap leaves 0 on the O(1) time scale (exact at d = ∞, from the program's rhs)."""
    config = parse_config(
        {
            "model": {"kind": "tied", "K": 2, "trainable": [1]},
            "loss": {"builtin": "mse", "activation": "h2"},
            "init": {"1": {"scale": 0.6}, "2": {"scale": 0.8, "width_ratio": 0.5}},
            "truncation": {"degree": 3, "observables": ["S1 S2"]},
            "integrate": {"T": 1.0},
        }
    )
    truncation, y0 = from_config(config)
    dy = truncation.rhs(0.0, y0)
    i = truncation.program.index
    t1, t2, q22 = y0[i("S1")], y0[i("S2")], y0[i("S2 S2")]
    dp12 = dy[i("S1 S2")] - dy[i("S1")] * t2
    assert y0[i("S1 S2")] - t1 * t2 == pytest.approx(0.0, abs=1e-14)  # free: no overlap at t = 0
    assert dp12 == pytest.approx(16 * t1**2 * t2 * (q22 - t2**2), rel=1e-10)
    assert abs(dp12) > 0.01


def direct_escape_time(d, seed=0, threshold=0.1, T=2.0):
    """τ at which the direct model's centred overlap Ω12 − t1 t2 first exceeds ``threshold``,
    from the empirical initial moments of d × d Gaussian matrices (the closed system is exact)."""
    model = Model("direct", 2, [1])
    inits = {1: InitSpec(scale=1.0), 2: InitSpec(scale=1.0)}
    program = build(model, 2, "all")
    y0 = empirical_moments(model, sample_factors(model, inits, d, seed), program.word_codes)
    truncation = Truncation(program, Potential(builtin("mse", L=1, K=2, activation="h2"), "direct"))
    result = solve(truncation, y0, T, 401, "DOP853", rtol=1e-10, atol=1e-12)
    i = program.index
    overlap = np.abs(result.series("S1 S2^T") - result.series("S1") * result.series("S2"))
    above = np.flatnonzero(overlap > threshold)
    return result.t[above[0]] if above.size else np.inf, exact_moments(model, inits, [program.word_codes[i("S1 S2^T")]])


def test_direct_h2_is_a_saddle_whose_escape_time_grows_like_log_d():
    """Direct S, h2: at d = ∞ the free state stays at zero overlap (Σ12 = 0 is invariant), but the
    O(1/d) overlap of finite-d matrices grows exponentially (rate ≈ 8 at the saddle, MATH.md §5;
    the state moves meanwhile): the escape time is linear in ln d with slope 1/rate (measured
    0.18 over d = 100…800, 2 seeds each; asserted in 1/16..1/4)."""
    dims = [100, 200, 400, 800]
    times = [np.mean([direct_escape_time(d, seed)[0] for seed in (0, 1)]) for d in dims]
    assert all(np.isfinite(times)) and times == sorted(times)
    slope = np.polyfit(np.log(dims), times, 1)[0]
    assert 1 / 16 < slope < 1 / 4, (times, slope)
    assert direct_escape_time(100)[1][0] == 0.0  # the d = ∞ overlap is exactly 0


def test_theory_can_start_from_the_sgd_matrices(tmp_path):
    """theory_init = "finite": each degree and the quadrature closure start from the moments of the
    matrices that seed 0's SGD run uses at that d — checked against traces computed here with numpy
    on those matrices, independently of the library's trace code."""
    from momentgen.evidence.comparison import compare
    from momentgen.setting.matrices import initial_factors

    config = parse_config(SMALL)
    data = compare(
        config,
        degrees=[6],
        dims=[30],
        seeds=[0],
        out=tmp_path,
        n_jobs=1,
        closures=("zero", "quadrature"),
        theory_init="finite",
    )
    W, root = initial_factors(config.model, config.inits(), 30, 0)
    S1, S2 = W @ W.T, root @ root.T
    expected = {"S1 S1": np.trace(S1 @ S1) / 30, "S1 S2": np.trace(S1 @ S2) / 30, "S1": np.trace(S1) / 30}
    for label in ("M=6 from d=30", "quadrature n=2 from d=30"):
        for word, value in expected.items():
            assert data["theory"][label]["series"][word][0] == pytest.approx(value, rel=1e-12)
    assert data["theory_init"] == "finite"


def test_compare_starts_the_theory_from_the_sgd_matrices_by_default():
    from momentgen.interface.cli import _parser

    assert _parser().parse_args(["compare", "x.toml"]).theory_init == "finite"


def test_no_tasks_is_an_empty_list():
    """Nothing to run (e.g. every reference flow cached) returns [] instead of asking joblib for 0 workers."""
    assert run_tasks([]) == []
