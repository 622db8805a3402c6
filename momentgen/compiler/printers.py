"""Printers of a derived hierarchy (`momentgen.compiler.hierarchy.Program`): text, LaTeX and a graph.

Kept apart from the program as sympy keeps its printers apart from its expressions: the program is data
(words, terms, coefficient symbols); these functions only read it. `Program.why`, `.summary`,
`.to_latex` and `.graph` are the documented entry points and call them.
"""

import numpy as np

from ..core.errors import ModelError
from ..models.words import parse

__all__ = ["why", "summary", "latex", "graph"]


def why(program, word):
    """The chain of substitutions that brought ``word`` into the state, as text lines.

    The first line is the word, the last the root (an observable or an order
    parameter the coefficients need).
    """
    i = program.index(word)
    lines = []
    while program.parent[i] >= 0:
        p = program.parent[i]
        via = program.symbols[program.via[i]].name
        lines.append(f"{program.words[i]}  <- term of d/dt mu({program.words[p]}) via {via}")
        i = p
    lines.append(f"{program.words[i]}  <- {program.reason[i]}")
    return lines


def summary(program):
    """A few lines: words per degree, nnz, dropped words and coefficient symbols."""
    m = program.model
    per = ", ".join(f"{w}: {n}" for w, n in program.words_per_degree().items())
    noise = [f"finite-learning-rate terms (quadratic): {len(program.noise_symbol)}"] if program.has_noise else []
    return "\n".join(
        [
            f"{m.kind} model, K = {m.K}, trainable {list(m.trainable)}"
            + (", data covariance letter Sigma" if m.sigma else "")
            + f", degree M = {program.degree}, "
            f"time {m.time_scale}",
            f"state words: {len(program.packed)} (per degree {per})",
            f"terms (nnz): {program.nnz}",
            f"dropped by the zero closure: {len(program.dropped_packed)} words of degree > {program.degree} "
            f"in {len(program.dropped_symbol)} terms of {len(set(program.term_rows('dropped')))} state words",
            *noise,
            "coefficient symbols: " + ", ".join(s.name for s in program.symbols),
        ]
    )


def latex(program, words=None, limit=None):
    """The derived equations of ``words`` (default: the state words, at most ``limit``) as a LaTeX
    ``align*`` block in the paper's notation: ``\\dot\\mu_{S_1 S_2} = −Γ_{12} μ_{…} + …``, the
    coefficients by name (their values come from Φ at the state), the finite-learning-rate term's quadratic
    terms ``c (w μ_a μ_b + …)`` when the program carries them (``μ_∅ = 1`` is left out), terms dropped by the
    zero closure marked, on the model's time axis: every term `Program.evaluate` sums is printed."""
    if words is None:  # the words that move
        moving = np.diff(program.indptr) + np.diff(program.noise_indptr if program.has_noise else program.indptr)
        rows = [i for i in range(len(program.packed)) if moving[i] > 0]
    else:
        rows = [program.index(w) for w in words]
    rows = rows[:limit] if limit else rows
    texts = program.words
    lines = [
        f"% {program.model.kind} model, degree M = {program.degree}, time {program.model.time_scale}",
        r"\begin{align*}",
    ]
    for i in rows:
        terms = _latex_terms(program, i, texts)
        dropped = np.diff(program.dropped_indptr)[i]
        tail = rf" + \underbrace{{\dots}}_{{{dropped}\ \mathrm{{dropped}}}}" if dropped else ""
        lines.append(rf"\dot\mu_{{{_latex_word(texts[i], program.model)}}} &= {terms or '0'}{tail} \\")
    lines.append(r"\end{align*}")
    return "\n".join(lines)


def _latex_terms(program, i, texts):
    """One row's terms, grouped by coefficient: ``−Γ_{12} (μ_a + 2 μ_b)``, then the quadratic ones
    ``Γ^{(2)}_{12} (μ_a μ_b + …)``."""
    groups = {}
    for j in range(program.indptr[i], program.indptr[i + 1]):
        symbol = program.symbols[program.symbol[j]]
        weight = symbol.factor * program.multiplicity[j]
        groups.setdefault(program.symbol[j], []).append(
            (weight, _latex_moment(texts[program.target[j]], program.model))
        )
    linear = _latex_groups(program, groups)
    groups = {}
    if program.has_noise:
        for j in range(program.noise_indptr[i], program.noise_indptr[i + 1]):
            symbol = program.symbols[program.noise_symbol[j]]
            weight = symbol.factor * program.noise_multiplicity[j]
            pair = (program.noise_left[j], program.noise_right[j])
            product = "".join(_latex_moment(texts[k], program.model) for k in pair if k >= 0)
            groups.setdefault(program.noise_symbol[j], []).append((weight, product or "1"))
    return " + ".join(part for part in (linear, _latex_groups(program, groups)) if part)


def _latex_moment(text, model):
    return f"\\mu_{{{_latex_word(text, model)}}}"


def _latex_groups(program, groups):
    """``{symbol index: [(weight, factor)]}`` as ``c (w a + …) + …``."""
    parts = []
    for s, entries in groups.items():
        inner = " + ".join(f"{_latex_number(w)}{factor}" for w, factor in entries).replace("+ -", "- ")
        parts.append(rf"{_latex_symbol(program.symbols[s], program.model.definition)}\left({inner}\right)")
    return " + ".join(parts)


def graph(program):
    """The dependency graph as a ``networkx.DiGraph``: word → words its derivative uses.

    Nodes are canonical word texts with attributes ``degree`` and ``dropped`` (True
    for words cut by the zero closure); edges carry the coefficient ``symbols`` — a quadratic term of the
    finite-learning-rate term links its row to both of its words.
    Built on demand: about a microsecond per term. Needs networkx (an optional dependency:
    ``pip install momentgen[graph]``).
    """
    try:
        import networkx as nx  # noqa: PLC0415 - optional: only this diagnostic needs it
    except ImportError:
        raise ModelError("Program.graph() needs networkx: pip install 'momentgen[graph]'") from None
    g = nx.DiGraph()
    g.add_nodes_from((w, {"degree": len(w.split()), "dropped": False}) for w in program.words)
    g.add_nodes_from((w, {"degree": len(w.split()), "dropped": True}) for w in program.dropped_words)
    parts = [
        (program.term_rows(), program.target, program.symbol, program.words),
        (program.term_rows("dropped"), program.dropped_target, program.dropped_symbol, program.dropped_words),
    ]
    if program.has_noise:
        rows = program.term_rows("noise")
        for side in (program.noise_left, program.noise_right):  # −1: the empty word μ_∅ = 1, no edge
            kept = side >= 0
            parts.append((rows[kept], side[kept], program.noise_symbol[kept], program.words))
    for rows, targets, syms, names in parts:
        for r, t, s in zip(rows, targets, syms):
            edge = g.get_edge_data(program.words[r], names[t])
            if edge is None:
                g.add_edge(program.words[r], names[t], symbols={program.symbols[s].name})
            else:
                edge["symbols"].add(program.symbols[s].name)
    return g


def _latex_word(text, model):
    r"""``S1 S2^T`` → ``S_{1} S_{2}^{\top}``: each letter as its kind declares it (`Alphabet.latex`)."""
    return " ".join(model.alphabet.latex(code) for code in parse(text, model))


def _latex_number(value):
    if value == 1:
        return ""
    if value == -1:
        return "-"
    return f"{value:g}\\,"


def _latex_symbol(symbol, definition):
    r"""``Gamma[1,2]`` → ``\Gamma_{12}``: the family's LaTeX as its kind declares it (`Family.latex`)."""
    base = definition.family(symbol.family).latex or rf"\mathrm{{{symbol.family}}}"
    if symbol.k is None:
        return base
    return base + "_{" + (f"{symbol.k}" if symbol.l is None else f"{symbol.k}{symbol.l}") + "}"
