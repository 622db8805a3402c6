"""The examples run as a user would run them and write their figure and numbers."""

import json
import pathlib
import runpy
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_example(name, out, monkeypatch, *args):
    monkeypatch.setattr(sys, "argv", [name, "--out", str(out), *args])
    runpy.run_path(str(ROOT / "examples" / name), run_name="__main__")


def test_fig4_linear_example(tmp_path, monkeypatch):
    run_example("fig4_linear.py", tmp_path, monkeypatch, "--d", "100")
    for suffix in ("png", "csv", "json"):
        assert (tmp_path / f"fig4_linear.{suffix}").stat().st_size > 0
    table = json.loads((tmp_path / "fig4_linear.json").read_text())["table"]
    by_degree = {row["degree"]: row for row in table}
    # inside its validity window each degree is within 10 × the M vs M−2 tolerance of the closed form
    assert all(row["sup_error_in_window"] < 1e-3 for row in table if row["valid_until"] > 0)
    # the window grows with M but stays below the convergence radius T* ≈ 0.072
    horizons = [by_degree[M]["valid_until"] for M in (6, 8, 10, 12)]
    assert horizons == sorted(horizons) and horizons[-1] < 0.072
    assert by_degree[2]["valid_until"] == 0.0 and by_degree[12]["status"] == "blowup"
    # past every window (t ∈ [0, 0.5]) the quadrature closure stays on the closed form (n = 32:
    # measured 9e-5, the Gauss-rule error of MATH.md §8) and SGD at d = 100 near it (O(1/d) ≈ 4/d)
    data = json.loads((tmp_path / "fig4_linear.json").read_text())
    assert data["figure_checks"] == [] and data["provenance"]["config"]["file_hash"]
    long = data["long_horizon"]
    assert long["quadrature"]["32"]["sup_minus_exact_q11"] < 1e-3
    assert long["sgd"]["sup_minus_exact_q11"] < 0.1 and long["zero_M12"]["status"] == "blowup"


def test_readme_python_snippets_run(monkeypatch):
    """Every ```python block of the README runs verbatim, in order, in one fresh namespace (from the
    repository root) — nothing is supplied to it."""
    monkeypatch.chdir(ROOT)
    text = (ROOT / "README.md").read_text()
    blocks = [b.split("```")[0] for b in text.split("```python\n")[1:]]
    assert len(blocks) >= 3
    namespace = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)


def test_the_readme_configuration_table_lists_every_key_of_the_schema():
    """Every key the configuration accepts is in the README's table, under its table, and the table lists
    no key the configuration refuses (the schema is `momentgen.setting.config._SCHEMA`); the activations it names
    are the ones the loss accepts."""
    import re

    from momentgen.setting.config import _SCHEMA
    from momentgen.setting.losses import ACTIVATIONS

    text = (ROOT / "README.md").read_text()
    rows = text.split("| table | key | default | meaning |")[1].split("\n\n")[0].splitlines()[2:]
    documented, table = {}, None
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        table = re.sub(r"[`\[\]]", "", cells[0]) or table
        documented.setdefault(table, set()).update(re.findall(r"`([A-Za-z_]+)`", cells[1]))
    schema = {("init.k" if name == "init" else name): set(keys) for name, keys in _SCHEMA.items()}
    assert documented == schema
    activation_row = next(r for r in rows if "`activation`" in r)
    meaning = activation_row.split("|")[4].split("(")[0].removeprefix(" `mse`:")
    listed = set(" ".join(re.findall(r"`([^`]+)`", meaning)).split())
    assert listed == {name for name, h in ACTIVATIONS.items() if not isinstance(h, str)}


def test_the_readme_indexes_every_shipped_configuration():
    """Issue 32: the README's index of `examples/configs/` names every shipped configuration, and only those."""
    import re

    from momentgen.setting.shipped import names

    text = (ROOT / "README.md").read_text()
    index = text.split("| config | what it is for |")[1].split("\n\n")[0]
    assert set(re.findall(r"^\| `(\w+)` \|", index, re.M)) == set(names())


def test_noise_floors_runs_one_theory_for_the_cases_that_differ_only_in_momentum():
    """examples/noise_floors.py shares a theory run between plain SGD and heavy ball at the same κ_eff: the theory
    sees the momentum only through κ_eff (MATH.md §14). Checked on what the theory reads — κ and its profile along
    the schedule — not on the key itself: the β = 0.9 case's are the β = 0 case's, while another schedule or κ is
    another key."""
    from momentgen.dynamics.problem import Problem

    example = runpy.run_path(str(ROOT / "examples" / "noise_floors.py"))
    configs = example["cases"](2, True)
    plain, heavy = configs[("softmax, β = 0", "WSD")], configs[("softmax, β = 0.9", "WSD")]
    assert heavy.settings.sgd.momentum == 0.9 and plain.settings.sgd.momentum == 0.0
    assert example["theory_key"](plain) == example["theory_key"](heavy)
    a, b = Problem.from_config(plain), Problem.from_config(heavy)
    times = np.linspace(0.0, plain.settings.integrate.T, 7)
    assert np.isclose(a.kappa, b.kappa, rtol=1e-12)
    assert np.allclose([a.kappa_profile(t) for t in times], [b.kappa_profile(t) for t in times], rtol=1e-12)
    keys = {example["theory_key"](c) for c in configs.values()}
    assert len(keys) == len(configs) - len(example["SCHEDULES"])
