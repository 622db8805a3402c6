"""Benchmark: deriving the hierarchy (words + sparse program), against a sympy baseline.

Prints, for each target case, the wall time (budget: 5 s on the 2-core CI machine),
words per second, nnz, and the ratio to a baseline measured in the same run: the
"textbook" derivation that writes each word as a sympy non-commutative product,
substitutes every trainable letter by its derivative expression, expands, and
canonicalises each resulting monomial. It also prints peak memory per term for growing
degrees (memory should be linear in nnz), and the size guard's `estimate` against the measured
peak (tracemalloc) for every kind, with and without the finite-learning-rate term (budget: within 2×).

Run: ``make bench`` (or ``python benchmarks/bench_hierarchy.py``).
"""

import tracemalloc

import sympy
from common import pick, timed

from momentgen.compiler.hierarchy import Model, build, coefficient_symbols, estimate
from momentgen.models.words import canonical_codes, enumerate_words, parse

BUDGET_S = 5.0


def sympy_baseline(model, degree):
    """Derive dμ/dt for every word of degree ≤ M with sympy non-commutative algebra.

    Each letter is a non-commutative symbol and its velocity the sympy expression of the
    model's substitution rules; a word's derivative is expanded and each monomial
    canonicalised. Returns the number of words and word → {(scalar, target): count}.
    """
    alphabet = model.alphabet
    Z = sympy.symbols(" ".join(f"Z{c}" for c in range(alphabet.size)), commutative=False, seq=True)
    rules = model.definition.rules(model)
    symbols, slots = coefficient_symbols(model, rules)
    scalars = [sympy.Symbol(s.name) * s.factor for s in symbols]
    trainable = model.is_trainable_letter()
    velocity = {c: scalars[-1] * Z[c] for c in range(alphabet.size) if trainable[c]}  # weight decay
    for rule, slot in zip(rules, slots):
        velocity[rule.letter] += scalars[slot] * sympy.Mul(*[Z[c] for c in rule.replacement])
    words = enumerate_words(model.kind, model.K, degree)
    program = {}
    for text in words:
        letters = [Z[c] for c in parse(text, model.kind, model.K)]
        derivative = 0
        for i, letter in enumerate(letters):
            if Z.index(letter) in velocity:
                derivative += sympy.Mul(*letters[:i]) * velocity[Z.index(letter)] * sympy.Mul(*letters[i + 1 :])
        terms = {}
        for term in sympy.expand(derivative).as_ordered_terms():
            scalar, product = term.args_cnc()
            codes = tuple(Z.index(f) for f in _flatten_powers(product))
            if len(codes) <= degree:
                key = (sympy.Mul(*scalar), canonical_codes(codes, model.kind))
                terms[key] = terms.get(key, 0) + 1
        program[text] = terms
    return len(words), program


def _flatten_powers(factors):
    for f in factors:
        if isinstance(f, sympy.Pow):
            yield from [f.base] * int(f.exp)
        else:
            yield f


def main():
    tied = Model("tied", 2, [1])
    untied = Model("untied", 2, [1])  # student (1) + teacher (2): 8 letters

    print("case                              words      nnz  dropped-terms   time   budget  words/s  vs baseline")
    for label, model, degree, baseline_degree in [
        (f"tied K=2 all words M={pick(20, 8)}", tied, pick(20, 8), pick(8, 4)),
        (f"untied K=2 all words M={pick(6, 3)}", untied, pick(6, 3), pick(3, 2)),
    ]:
        (n_base, _), t_base = timed(sympy_baseline, model, baseline_degree)
        base_rate = n_base / t_base
        build(model, 4, "all")  # warm imports and caches
        program, seconds = timed(build, model, degree, "all")
        rate = len(program.words) / seconds
        verdict = "ok" if seconds <= BUDGET_S else "OVER"
        print(
            f"{label:32s} {len(program.words):7d} {program.nnz:8d} {len(program.dropped_symbol):13d} "
            f"{seconds:6.2f}s {verdict:>6s} {rate:8.0f}  {rate / base_rate:8.0f}x"
        )
        small, t_small = timed(build, model, baseline_degree, "all")
        print(
            f"    baseline (sympy, same model, M={baseline_degree}): {n_base} words in {t_base:.2f} s = "
            f"{base_rate:.0f} words/s; momentgen at that degree: {len(small.words) / t_small:.0f} words/s "
            f"({len(small.words) / t_small / base_rate:.0f}x)"
        )

    print("\nmemory (tracemalloc peak) per term, tied K=2 all words:")
    for degree in pick((14, 16, 18, 20), (8,)):
        tracemalloc.start()
        program = build(tied, degree, "all")
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        total = program.nnz + len(program.dropped_symbol)
        print(
            f"  M={degree}: {total:8d} terms (incl. dropped), peak {peak / 2**20:7.1f} MiB, {peak / total:6.0f} B/term"
        )

    print("\nsize estimate vs measured peak (tracemalloc), every word:")
    cases = [("tied", 2, d, n) for d in pick((16, 18, 20), (10,)) for n in (False, True)]
    cases += pick(
        [("untied", 2, 6, False), ("untied", 2, 5, True), ("direct", 2, 10, True), ("symmetric", 2, 12, True)],
        [("untied", 2, 4, True), ("direct", 2, 6, True)],
    )
    for kind, K, degree, noise in cases:
        model = Model(kind, K, [1])
        predicted = estimate(model, degree, "all", noise=noise)["bytes"]
        tracemalloc.start()
        build(model, degree, "all", noise=noise, max_bytes=64 * 2**30)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        ratio = predicted / peak
        print(
            f"  {kind} K={K} M={degree}{' + finite-lr' if noise else ''}: estimate {predicted / 2**20:8.1f} MiB, "
            f"peak {peak / 2**20:8.1f} MiB, ratio {ratio:4.2f} (budget 0.5-2: {'ok' if 0.5 <= ratio <= 2 else 'OVER'})"
        )


if __name__ == "__main__":
    main()
