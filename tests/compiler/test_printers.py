"""The printers of a program (`momentgen.compiler.printers`): `why`, the diagnostics and graph, and the LaTeX
that reads back as the program's numbers.
"""

import numpy as np
import pytest

import momentgen as mg
from momentgen.compiler.hierarchy import Model, build


def test_latex_prints_the_tied_equations_of_the_spec():
    """dμ(S1)/dt for the tied model is −2Γ11 μ(S1 S1) − 2Γ12 μ(S1 S2) − (γ/2) μ(S1) (the flow
    dS1/dt = −Σ_l Γ1l (S1 S_l + S_l S1) − (γ/2) S1, traced by hand)."""
    program = mg.build(mg.Model("tied", 2, [1]), 4, ["S1"])
    line = program.to_latex(["S1"]).splitlines()[2]
    assert line == (
        r"\dot\mu_{S_{1}} &= \Gamma_{11}\left(-2\,\mu_{S_{1} S_{1}}\right) + "
        r"\Gamma_{12}\left(-2\,\mu_{S_{1} S_{2}}\right) + \gamma\left(-0.5\,\mu_{S_{1}}\right) \\"
    )


def test_why_explains_every_step():
    program = build(Model("tied", 2, [1]), 6, ["S1 S2"])
    word = "S1 S2 S2 S2 S2 S2"
    lines = program.why(word)
    assert lines[0].startswith(word) and lines[-1].endswith("observable")
    i = program.index(word)
    while program.parent[i] >= 0:  # each word is a target of its parent's derivative
        p = program.parent[i]
        assert i in program.target[program.indptr[p] : program.indptr[p + 1]]
        i = p
    assert "q_11" in program.why("S1 S1")[-1]


def test_diagnostics_and_graph():
    program = build(Model("tied", 2, [1]), 5, ["S1 S2"])
    assert sum(program.words_per_degree().values()) == len(program.words)
    assert program.nnz == len(program.target)
    text = program.summary()
    assert "state words" in text and "dropped" in text and "Gamma[1,2]" in text
    g = program.graph()
    state_edges = {(program.words[r], program.words[t]) for r, t in zip(program.term_rows(), program.target)}
    dropped_edges = {
        (program.words[r], program.dropped_words[t])
        for r, t in zip(program.term_rows("dropped"), program.dropped_target)
    }
    assert set(g.edges) == state_edges | dropped_edges
    assert sum(program.dropped_in().values()) == len(program.dropped_target)
    assert all(len(w.split()) == 6 for w in program.dropped_words)


def _from_latex(program, text):
    """The right-hand sides of a `Program.to_latex` block read back as numbers: {row: function(mu, c)}, parsed with
    plain string rules (words from their LaTeX spelling, coefficients by their printed names) — independent of the
    program's arrays, which `Program.evaluate` reads."""
    import re

    from momentgen.compiler import printers

    names = {printers._latex_symbol(s, program.model.definition): k for k, s in enumerate(program.symbols)}
    braced = r"\{((?:[^{}]|\{[^{}]*\})*)\}"  # one level of nested braces: S_{1} S_{2}^{\top}

    def word(latex):
        letters = []
        for letter in latex.split():
            if letter == r"\Sigma":
                letters.append("Sigma")
                continue
            base, index = re.fullmatch(r"([A-Za-z]+)_\{(\d+)\}(?:\^\{\\top\})?", letter).groups()
            letters.append(f"{base}{index}" + ("^T" if letter.endswith(r"^{\top}") else ""))
        return program.index(" ".join(letters))

    rows = {}
    for line in text.splitlines():
        match = re.fullmatch(r"\\dot\\mu_" + braced + r" &= (.+) \\\\", line)
        if not match:
            continue
        rhs = re.sub(r" \+ \\underbrace\{\\dots\}_\{\d+\\ \\mathrm\{dropped\}\}", "", match.group(2))
        for latex, k in sorted(names.items(), key=lambda item: -len(item[0])):
            rhs = rhs.replace(latex + r"\left(", f"c[{k}]*(")
        rhs = re.sub(r"\\mu_" + braced, lambda m: f"m[{word(m.group(1))}]*", rhs)
        rhs = rhs.replace(r"\right)", ")").replace(r"\,", "*")
        rhs = re.sub(r"\*\s*(?=[)+-]|$)", " ", rhs)  # a product's trailing * before ), + or −
        rows[word(match.group(1))] = eval("lambda m, c: " + rhs)  # noqa: S307 - the test's own string
    return rows


@pytest.mark.parametrize(
    "kind, K, trainable, sigma, degree",
    [
        ("tied", 1, (1,), False, 3),
        ("tied", 2, (1,), False, 4),
        ("untied", 2, (1,), False, 3),
        ("tied", 2, (1,), True, 4),
    ],
)
def test_the_latex_of_a_finite_lr_program_carries_every_term(kind, K, trainable, sigma, degree):
    """Issue 40: `to_latex` printed no finite-learning-rate term (tied K = 1, M = 3: `summary` counts 10, the LaTeX
    showed none). Read back as numbers (`_from_latex`, string rules only), every printed equation equals
    `Program.evaluate` at random moments and coefficients (zero closure) to rounding (measured ≤ 4e-15; 1e-12);
    and the graph has an edge for each word a quadratic term reads."""
    from momentgen.models import Model

    program = build(Model(kind, K, trainable, sigma=sigma), degree, "all", noise=True)
    assert program.has_noise and len(program.noise_symbol)
    rng = np.random.default_rng(0)
    mu, c = rng.standard_normal(len(program.packed)), rng.standard_normal(len(program.symbols))
    exact = program.evaluate(mu, c)
    printed = _from_latex(program, program.to_latex())
    moving = {i for i in range(len(program.packed)) if exact[i] != 0}
    assert moving <= set(printed)
    for row, rhs in printed.items():
        assert rhs(mu, c) == pytest.approx(exact[row], abs=1e-12 * max(1.0, abs(exact[row])))
    graph = program.graph()
    rows = program.term_rows("noise")
    for r, left, right in zip(rows, program.noise_left, program.noise_right):
        for k in (left, right):
            if k >= 0:
                assert graph.has_edge(program.words[r], program.words[k])
