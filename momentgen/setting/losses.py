"""Per-sample losses ℓ(G) as sympy expressions in the pre-activations ``G[i, j, k]``.

Indexing (1-based, as in the paper): ``G[i, j, k]`` is the pre-activation of tokens ``i``
and ``j`` (``1..L``) under index ``k`` (``1..K``), i.e. ``x_iᵀ S_k x_j / √d`` (centred for
tied and direct; MATH.md §1). Internally the ``L·L·K`` variables are flattened in the
order ``a = ((i−1)·L + (j−1))·K + (k−1)`` (`Loss.variables`).

Built-ins, addressable by name from config files (`builtin`):

* ``mse``: teacher–student squared error ``ℓ = (ŷ_student − ŷ_teacher)²`` with the readout
  ``ŷ_k = (1/L) Σ_{i,j} h(G[i, j, k])`` summed over the student (resp. teacher) indices;
  for ``L = 1`` this is ``(h(G_student) − h(G_teacher))²``. Activations ``h``: ``h1 = x``,
  ``h2 = (x²−1)/√2``, ``h3 = (x³−3x)/√6``, ``tanh``, ``erf``, ``softplus`` (``relu`` is refused:
  its second derivative is a Dirac mass, which Price's theorem cannot integrate).
* ``softmax-mse``: ``ℓ = ‖softmax_row(G_student) − softmax_row(G_teacher)‖²_F`` over the
  ``L × L`` attention matrix (row-wise softmax over ``j``).

Label noise (MATH.md §13; ``noise = σ``): the teacher's output gains ``σ ξ``, ``ξ ~ N(0, 1)`` independent of the
tokens, one draw per sequence and per output (``mse``: one output; the softmax losses: one per entry of the
``L × L`` attention matrix), so ``mse`` becomes ``(ŷ_student − ŷ_teacher − σξ)²``. An expression reads the noise
``σξ`` as the name ``xi`` (``"(G[1,1,1] - G[1,1,2] - xi)**2"``); it must enter polynomially (degree ≤
``LIMITS["noise degree"]``), as additive label noise does. The noise variables are the symbols ``xi_o``
(`Loss.noise_variables`, standard Gaussians; σ is in ``expr``), and a noisy loss is a polynomial in them,
``ℓ = Σ_α c_α(G) ξ^α`` (`Loss.expansion`). What the theory needs of it are Gaussian expectations over ξ, done here
exactly: `Loss.expected` (``E_ξ ℓ``: Φ and Γ are its potential's), `Loss.noise_parts` (noiseless losses whose
gradient outer products add up to ``E_ξ[∇ℓ∇ℓᵀ]``: the SGD-noise moments of §9 are theirs, summed) and
`Loss.clean` (``ℓ`` at ξ = 0: the loss against the noiseless teacher, whose risk is the *excess* risk).

Custom losses are expression strings (`parse_expression`), e.g.
``"(G[1,1,1] - G[1,1,2])**2"``, read by a restricted parser: only ``G[i, j, k]`` with
integer indices, numbers, ``+ - * / **``, the constants ``pi`` and ``E``, and the
functions in `FUNCTIONS`. Nothing in the string is ever evaluated as Python. What a
loss may cost is capped before anything is expanded (`LIMITS`): nesting depth, the size of
numbers, and the total polynomial degree (the Wick expansion of Φ grows like the number of
moments of that degree); and a loss must be finite with finite first and second derivatives
on the real line (no ``1/G``, ``log(G²)``): otherwise its Gaussian expectation need not exist.
"""

import ast
import math
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np
import sympy

from ..core.errors import UnsupportedLoss

__all__ = ["Loss", "ACTIVATIONS", "BUILTINS", "FUNCTIONS", "LIMITS", "builtin", "parse_expression"]

_x = sympy.Symbol("x", real=True)
ACTIVATIONS = {
    "h1": _x,
    "h2": (_x**2 - 1) / sympy.sqrt(2),
    "h3": (_x**3 - 3 * _x) / sympy.sqrt(6),
    "tanh": sympy.tanh(_x),
    "erf": sympy.erf(_x),
    "softplus": sympy.log(1 + sympy.exp(_x)),
}
_REFUSED = {  # functions whose second derivative is not an ordinary function: Price's theorem needs one
    "relu": "relu's second derivative is a Dirac mass at 0; use softplus (a smooth relu), tanh or erf",
    "abs": "abs's second derivative is a Dirac mass at 0; use a smooth alternative such as sqrt(1 + x**2)",
}


def _substitution(h):
    """The function z ↦ h(z) for an activation written in x."""
    return lambda z: h.subs(_x, z)


#: Functions a custom expression may call, and the sympy function each one means.
FUNCTIONS = {
    "exp": sympy.exp,
    "log": sympy.log,
    "sqrt": sympy.sqrt,
    "tanh": sympy.tanh,
    "erf": sympy.erf,
    "sin": sympy.sin,
    "cos": sympy.cos,
    "cosh": sympy.cosh,
    "sinh": sympy.sinh,
    "sigmoid": lambda z: 1 / (1 + sympy.exp(-z)),
    "softplus": lambda z: sympy.log(1 + sympy.exp(z)),
    **{name: _substitution(h) for name, h in ACTIVATIONS.items() if name.startswith("h")},
}
_CONSTANTS = {"pi": sympy.pi, "E": sympy.E}

#: What a loss may cost, checked before anything is expanded or compiled.
LIMITS = {
    "characters": 5000,  # length of an expression string
    "depth": 40,  # nesting of operations and calls
    "power": 12,  # |exponent| of a single power
    "number": 1e6,  # |a number| (and 1/|a number|) anywhere in the expression
    "degree": 16,  # total polynomial degree in G of the loss
    "moments": 2_000_000,  # Gaussian moments the Wick expansion of a polynomial loss needs
    "noise degree": 4,  # the degree of a loss in its label noise xi
}


@dataclass(frozen=True)
class Loss:
    """A per-sample loss ℓ(G) on ``L`` tokens and ``K`` indices.

    ``expr`` is a sympy expression in the real symbols `variables` (``G_i_j_k``); ``name``
    is a short label for summaries and provenance.
    """

    expr: sympy.Expr
    L: int
    K: int
    name: str
    noise: float = 0.0
    expansion: tuple = ()  # ((α, c_α), …): ℓ = Σ c_α(G) ξ^α over `noise_variables` (α a tuple); () noiseless

    @cached_property
    def variables(self):
        """The ``L·L·K`` symbols ``G_i_j_k`` in flattened order (see module docstring)."""
        return variables(self.L, self.K)

    @cached_property
    def is_polynomial(self):
        return bool(self.expr.is_polynomial(*self.variables))

    @property
    def noisy(self):
        """True when the loss carries label noise (σ > 0 and a noise variable in it)."""
        return bool(self.expansion)

    @cached_property
    def noise_variables(self):
        """The standard Gaussian noise variables ``xi_o`` the loss reads (SGD draws them per sample)."""
        return noise_variables(len(self.expansion[0][0])) if self.noisy else []

    @cached_property
    def expected(self):
        """``E_ξ ℓ``, a noiseless `Loss` of G (Φ, Γ and the risk with the noise are its potential's)."""
        if not self.noisy:
            return self
        mean = sum((c * _moment(alpha) for alpha, c in self.expansion), sympy.Integer(0))
        return Loss(mean, self.L, self.K, self.name)

    @cached_property
    def clean(self):
        """``ℓ`` at ξ = 0: the loss against the noiseless teacher (its risk is the excess risk)."""
        if not self.noisy:
            return self
        zero = tuple(0 for _ in self.noise_variables)
        return Loss(dict(self.expansion).get(zero, sympy.Integer(0)), self.L, self.K, self.name + " (noiseless)")

    @cached_property
    def noise_offset(self):
        """``E_ξ ℓ − ℓ|_{ξ=0}`` when it is a constant (additive label noise: σ² per output for mse), else None."""
        if not self.noisy:
            return 0.0
        rest = sympy.expand(self.expected.expr - self.clean.expr)
        return float(rest) if not (rest.free_symbols & set(self.variables)) else None

    @cached_property
    def noise_parts(self):
        """Noiseless losses ``ℓ_j`` with ``Σ_j ∇ℓ_j ∇ℓ_jᵀ = E_ξ[∇ℓ ∇ℓᵀ]`` (∇ over G): with ``ℓ = Σ_α c_α ξ^α`` the
        right side is ``Σ_αβ ∇c_α ∇c_βᵀ M_αβ``, ``M_αβ = E[ξ^{α+β}]`` (PSD); a factor ``M = Σ_j u_j u_jᵀ`` gives
        ``ℓ_j = Σ_α u_jα c_α`` (exact square roots when M is diagonal, as for additive noise)."""
        if not self.noisy:
            return [self]
        moving = [(alpha, c) for alpha, c in self.expansion if c.free_symbols & set(self.variables)]
        M = [[_moment(tuple(a + b for a, b in zip(alpha, beta))) for beta, _ in moving] for alpha, _ in moving]
        if all(M[i][j] == 0 for i in range(len(M)) for j in range(len(M)) if i != j):
            factors = [[sympy.sqrt(M[i][i]) if i == j else 0 for i in range(len(M))] for j in range(len(M))]
        else:
            values, vectors = np.linalg.eigh(np.array(M, dtype=float))
            factors = [list(np.sqrt(v) * vectors[:, j]) for j, v in enumerate(values) if v > 1e-12 * values.max()]
        parts = []
        for j, u in enumerate(factors):
            expr = sum((sympy.nsimplify(w) * c for w, (_, c) in zip(u, moving) if w != 0), sympy.Integer(0))
            if expr != 0:
                parts.append(Loss(expr, self.L, self.K, f"{self.name} (noise part {j + 1})"))
        return parts


def noise_variables(count):
    """The standard Gaussian label-noise symbols ``xi_1 … xi_count``."""
    return [sympy.Symbol(f"xi_{o}", real=True) for o in range(1, count + 1)]


def _moment(alpha):
    """``E[Π ξ_o^{α_o}]`` of independent standard Gaussians: ``Π (α_o − 1)!!`` when every α_o is even, else 0."""
    out = 1
    for a in alpha:
        if a % 2:
            return 0
        out *= math.prod(range(a - 1, 0, -2))
    return out


def _with_noise(residuals, sigma):
    """``Σ_o (r_o − σ ξ_o)²`` and its expansion in the ξ_o: c_0 = Σ r_o², c_{e_o} = −2σ r_o, c_{2e_o} = σ²."""
    count = len(residuals)
    xi = noise_variables(count)
    sigma = sympy.nsimplify(sigma)
    expr = sum(((r - sigma * x) ** 2 for r, x in zip(residuals, xi)), sympy.Integer(0))
    unit = [tuple(int(o == p) for p in range(count)) for o in range(count)]
    expansion = [(tuple([0] * count), sum((r**2 for r in residuals), sympy.Integer(0)))]
    expansion += [(e, -2 * sigma * r) for e, r in zip(unit, residuals)]
    expansion += [(tuple(2 * a for a in e), sigma**2) for e in unit]
    return expr, tuple(expansion)


def variables(L, K):
    return [
        sympy.Symbol(f"G_{i}_{j}_{k}", real=True)
        for i in range(1, L + 1)
        for j in range(1, L + 1)
        for k in range(1, K + 1)
    ]


def _check_sizes(L, K):
    for name, value in (("L", L), ("K", K)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UnsupportedLoss(f"{name} must be a positive integer, got {value!r}")


def _indices(indices, K, role):
    indices = [indices] if isinstance(indices, int) else list(indices)
    bad = [k for k in indices if not isinstance(k, int) or not 1 <= k <= K]
    if not indices or bad:
        raise UnsupportedLoss(f"{role} indices must be a non-empty list in 1..{K} (1-based), got {indices!r}")
    return indices


def _mse(L, K, activation="h1", student=(1,), teacher=(2,)):
    if activation in _REFUSED:
        raise UnsupportedLoss(f"activation {activation!r} is refused: {_REFUSED[activation]}")
    if activation not in ACTIVATIONS:
        raise UnsupportedLoss(f"unknown activation {activation!r}: choose one of {', '.join(ACTIVATIONS)}")
    G = _grid(L, K)
    h = ACTIVATIONS[activation]

    def readout(indices):
        return sum(h.subs(_x, G[i][j][k - 1]) for k in indices for i in range(L) for j in range(L)) / L

    return [readout(_indices(student, K, "student")) - readout(_indices(teacher, K, "teacher"))], f"mse({activation})"


def _softmax_mse(L, K, student=(1,), teacher=(2,)):
    G = _grid(L, K)

    def attention(indices):
        rows = []
        for i in range(L):
            logits = [sum(G[i][j][k - 1] for k in indices) for j in range(L)]
            total = sum(sympy.exp(z) for z in logits)
            rows.append([sympy.exp(z) / total for z in logits])
        return rows

    a, b = attention(_indices(student, K, "student")), attention(_indices(teacher, K, "teacher"))
    return [a[i][j] - b[i][j] for i in range(L) for j in range(L)], "softmax-mse"


def _multihead_softmax_mse(L, K, student=(1, 2), teacher=(3, 4)):
    """Each listed index is one attention head with its own row softmax; a model's attention is the
    sum of its heads' (student heads vs teacher heads), compared entrywise."""
    G = _grid(L, K)

    def attention(indices):
        out = [[0] * L for _ in range(L)]
        for k in indices:
            for i in range(L):
                total = sum(sympy.exp(G[i][j][k - 1]) for j in range(L))
                for j in range(L):
                    out[i][j] += sympy.exp(G[i][j][k - 1]) / total
        return out

    a, b = attention(_indices(student, K, "student")), attention(_indices(teacher, K, "teacher"))
    return [a[i][j] - b[i][j] for i in range(L) for j in range(L)], "multihead-softmax-mse"


def _grid(L, K):
    flat = variables(L, K)
    return [[[flat[(i * L + j) * K + k] for k in range(K)] for j in range(L)] for i in range(L)]


BUILTINS = {"mse": _mse, "softmax-mse": _softmax_mse, "multihead-softmax-mse": _multihead_softmax_mse}


def builtin(name, L=1, K=2, noise=0.0, **options):
    """A built-in loss by name (``mse``, ``softmax-mse``, ``multihead-softmax-mse``) with its options: the sum of
    its squared residuals, each with label noise ``noise`` (σ) when it is > 0.

    >>> builtin("mse", L=1, K=2, activation="h1").expr
    (G_1_1_1 - G_1_1_2)**2
    >>> builtin("mse", L=1, K=2, activation="h1", noise=0.5).expected.expr
    (G_1_1_1 - G_1_1_2)**2 + 1/4
    """
    _check_sizes(L, K)
    noise = _noise_level(noise)
    if name not in BUILTINS:
        raise UnsupportedLoss(
            f"unknown built-in loss {name!r}: choose one of {', '.join(BUILTINS)} or give an expression"
        )
    if name in ("softmax-mse", "multihead-softmax-mse") and L == 1:
        raise UnsupportedLoss(
            f"{name} needs L ≥ 2 tokens: a softmax over one token is 1, so the loss is "
            "identically 0 (use mse for L = 1)"
        )
    try:
        residuals, label = BUILTINS[name](L, K, **options)
    except TypeError as error:
        raise UnsupportedLoss(f"bad options for loss {name!r}: {error}") from None
    if not noise:
        return _checked(Loss(sum((r**2 for r in residuals), sympy.Integer(0)), L, K, label))
    expr, expansion = _with_noise(residuals, noise)
    return _checked(Loss(expr, L, K, f"{label}, noise {noise:g}", noise, expansion))


def _noise_level(noise):
    if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not 0 <= noise < math.inf:
        raise UnsupportedLoss(f"label noise must be a finite number ≥ 0, got {noise!r}")
    return float(noise)


def parse_expression(text, L, K, noise=0.0):
    """A `Loss` from an expression string, read by a restricted parser (never ``eval``); the name ``xi`` is the
    label noise ``σξ`` (σ = ``noise``; 0 when there is none).

    >>> parse_expression("(G[1,1,1] - G[1,1,2])**2", 1, 2).expr
    (G_1_1_1 - G_1_1_2)**2
    """
    _check_sizes(L, K)
    noise = _noise_level(noise)
    if not isinstance(text, str):
        raise UnsupportedLoss(f"a loss expression is a string, got {type(text).__name__}")
    if len(text) > LIMITS["characters"]:
        raise UnsupportedLoss(f"loss expression is {len(text)} characters long; the limit is {LIMITS['characters']}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
        raise UnsupportedLoss(f"cannot parse loss expression {_short(text)}: {error}") from None
    depth = _depth(tree.body)
    if depth > LIMITS["depth"]:
        raise UnsupportedLoss(f"loss expression {_short(text)} is nested {depth} deep; the limit is {LIMITS['depth']}")
    translator = _Translator(L, K, noise)
    expr = translator.visit(tree.body)
    if not isinstance(expr, sympy.Expr) or not (expr.free_symbols & set(variables(L, K))):
        raise UnsupportedLoss(f"loss expression {_short(text)} does not depend on any G[i, j, k]")
    if noise and not translator.reads_noise:
        raise UnsupportedLoss(
            f"[loss] noise = {noise:g} with the expression {_short(text)}, which does not say where the noise enters: "
            "write it as `xi` (σξ), e.g. (G[1,1,1] - G[1,1,2] - xi)**2"
        )
    name = text.strip() + (f", noise {noise:g}" if noise else "")
    return _checked(Loss(expr, L, K, name, noise, _expansion_in_noise(expr, text)))


def _expansion_in_noise(expr, text):
    """``((α,), c_α) …`` of an expression in its one noise variable ``xi_1`` (() without it); a loss that is not a
    polynomial of degree ≤ ``LIMITS["noise degree"]`` in it is refused."""
    (xi,) = noise_variables(1)
    if xi not in expr.free_symbols:
        return ()
    try:
        poly = sympy.Poly(expr, xi)
    except sympy.PolynomialError:
        poly = None
    if poly is None or any(xi in c.free_symbols for c in poly.coeffs()) or poly.degree() > LIMITS["noise degree"]:
        raise UnsupportedLoss(
            f"loss expression {_short(text)}: the label noise xi must enter as a polynomial of degree ≤ "
            f"{LIMITS['noise degree']} (additive noise, e.g. (G[1,1,1] - G[1,1,2] - xi)**2)"
        )
    return tuple(((a,), c) for (a,), c in poly.as_dict().items())


def _depth(node):
    """Nesting depth of an expression tree, iteratively (no recursion to exhaust)."""
    deepest, stack = 0, [(node, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


def _checked(loss):
    """Refuse a loss whose cost or whose Gaussian expectation cannot be bounded (see `LIMITS`), or that
    is not a real, finite function (a complex or infinite constant, a kink whose second derivative is a
    Dirac mass) — at parse time, so every command refuses the same losses."""
    _check_real(loss)
    degree = _degree_bound(loss.expr, set(loss.variables))
    if degree > LIMITS["degree"]:
        raise UnsupportedLoss(
            f"loss {_short(loss.name)} has polynomial degree up to {degree} in G; the limit is "
            f"{LIMITS['degree']} (its Wick expansion would not finish)"
        )
    if loss.is_polynomial:
        moments = math.comb(len(loss.expr.free_symbols) + degree, degree)
        if moments > LIMITS["moments"]:
            raise UnsupportedLoss(
                f"loss {_short(loss.name)} needs about {moments:.2g} Gaussian moments of degree "
                f"≤ {degree} in {len(loss.expr.free_symbols)} variables (limit "
                f"{LIMITS['moments']:.0e}): lower the degree or use fewer variables"
            )
    singular = _singularity(loss.expr)
    if singular is not None:
        order, bad = singular
        what = ("the loss", "its gradient", "its second derivatives")[order]
        raise UnsupportedLoss(
            f"loss {_short(loss.name)} is singular on the real line: {what} contains {bad}, "
            "which is infinite (or undefined) where its argument is 0 — its Gaussian "
            "expectation need not exist; use a loss that is smooth for every real G"
        )
    return loss


_KINKS = (sympy.Abs, sympy.sign, sympy.Heaviside, sympy.Max, sympy.Min, sympy.floor, sympy.ceiling)


def _check_real(loss):
    """A loss is a real function of real G, smooth enough for Price's theorem."""
    if loss.expr.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
        raise UnsupportedLoss(f"loss {_short(loss.name)} contains an infinite or undefined constant (e.g. log(0))")
    for node in sympy.preorder_traversal(loss.expr):
        if node.is_number and node.is_real is False:
            raise UnsupportedLoss(
                f"loss {_short(loss.name)} contains the complex number {node} (e.g. sqrt(-1), log(-1), (-1)**0.5): "
                "a loss must be real"
            )
        if isinstance(node, _KINKS):
            raise UnsupportedLoss(
                f"loss {_short(loss.name)} contains {node}, whose second derivative is not an ordinary function "
                "(a Dirac mass): use a smooth alternative such as sqrt(1 + x**2)"
            )


@lru_cache(maxsize=256)
def _singularity(expr):
    """(0, 1 or 2, the singular part) of the first of ℓ = ``expr``, its gradient and its second derivatives that is
    singular on the real line (`_singular_part`), or None. Cached by expression: the symbolic derivatives are almost
    all of a loss's parse time (softmax-mse at L = 3: 1.7 s), and every configuration that names the loss parses it."""
    for order, part in enumerate(_derivatives(expr)):
        bad = _singular_part(part)
        if bad is not None:
            return order, bad
    return None


def _derivatives(expr):
    """ℓ, and the distinct first and second derivatives' terms (as sums), for the singularity check."""
    used = sorted(expr.free_symbols, key=str)
    first = [sympy.diff(expr, v) for v in used]
    second = [sympy.diff(g, v) for g in first for v in used]
    return expr, sympy.Add(*first), sympy.Add(*second)


def _singular_part(expr):
    """A sub-expression that is not finite for every real G — a negative power of a base that can
    vanish, a log of an argument that can vanish or be negative, a fractional power of an argument
    that can be negative — or None."""
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.Pow) and node.exp.is_number:
            if node.exp.is_negative and not node.base.is_positive:
                return node
            if not node.exp.is_integer and not node.base.is_nonnegative:
                return node
        if isinstance(node, sympy.log) and not node.args[0].is_positive:
            return node
    return None


def _degree_bound(expr, symbols):
    """An upper bound of the total polynomial degree of ``expr`` in ``symbols`` (non-polynomial
    functions count their argument's degree); iterative over the tree."""
    order, stack = [], [expr]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(node.args)
    degree = {}
    for node in reversed(order):
        if node in symbols:
            degree[node] = 1
        elif not node.args or node.is_number:
            degree[node] = 0
        elif isinstance(node, sympy.Pow) and node.exp.is_number:
            degree[node] = degree[node.base] * max(1, int(abs(node.exp)))
        elif isinstance(node, sympy.Mul):
            degree[node] = sum(degree[a] for a in node.args)
        else:
            degree[node] = max(degree[a] for a in node.args)
    return degree[expr]


def _short(text, limit=60):
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"… ({len(text)} characters)"


_DIGITS = math.log10(LIMITS["number"])


def _bounded(value):
    """``value`` unless it is a number outside [1/LIMITS["number"], LIMITS["number"]] in size."""
    if value.is_number and value != 0:
        size = abs(complex(value.evalf(20)))
        if not 1 / LIMITS["number"] <= size <= LIMITS["number"]:
            raise UnsupportedLoss(
                f"the number {value.evalf(6)} is out of range: numbers in a loss must lie between "
                f"{1 / LIMITS['number']:g} and {LIMITS['number']:g} in size"
            )
    return value


class _Translator(ast.NodeVisitor):
    """Turns an allowed Python expression tree into sympy; anything else is refused."""

    _BINARY = {
        ast.Add: lambda a, b: a + b,
        ast.Sub: lambda a, b: a - b,
        ast.Mult: lambda a, b: a * b,
        ast.Div: lambda a, b: a / b,
        ast.Pow: lambda a, b: a**b,
    }
    _UNARY = {ast.UAdd: lambda a: a, ast.USub: lambda a: -a}

    def __init__(self, L, K, noise=0.0):
        self.L, self.K, self.G = L, K, _grid(L, K)
        self.noise, self.reads_noise = noise, False

    def generic_visit(self, node):
        raise UnsupportedLoss(
            f"{type(node).__name__} is not allowed in a loss expression (column {getattr(node, 'col_offset', '?')}): "
            f"use G[i, j, k], numbers, + - * / **, pi, E and the functions {', '.join(sorted(FUNCTIONS))}"
        )

    def visit_BinOp(self, node):
        op = self._BINARY.get(type(node.op))
        if op is None:
            return self.generic_visit(node.op)
        left, right = self.visit(node.left), self.visit(node.right)
        if isinstance(node.op, ast.Pow):
            if not right.is_number or abs(float(right)) > LIMITS["power"]:
                raise UnsupportedLoss(f"powers must be numbers of size at most {LIMITS['power']}, got {right}")
            if left.is_number and left != 0 and abs(float(right) * math.log10(abs(complex(left)))) > _DIGITS:
                raise UnsupportedLoss(
                    f"the number {left}**{right} is out of range: numbers in a loss must lie "
                    f"between {1 / LIMITS['number']:g} and {LIMITS['number']:g} in size"
                )
        return _bounded(op(left, right))

    def visit_UnaryOp(self, node):
        op = self._UNARY.get(type(node.op))
        return self.generic_visit(node.op) if op is None else op(self.visit(node.operand))

    def visit_Constant(self, node):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise UnsupportedLoss(f"constant {node.value!r} is not a number")
        if not math.isfinite(node.value):
            raise UnsupportedLoss(f"constant {node.value!r} is not finite")
        return _bounded(sympy.nsimplify(node.value) if isinstance(node.value, float) else sympy.Integer(node.value))

    def visit_Name(self, node):
        if node.id == "xi":  # the label noise σξ ([loss] noise = σ; 0 without noise)
            self.reads_noise = True
            return sympy.nsimplify(self.noise) * noise_variables(1)[0] if self.noise else sympy.Integer(0)
        if node.id not in _CONSTANTS:
            raise UnsupportedLoss(f"unknown name {node.id!r} in loss expression: only G[i, j, k], xi, pi and E")
        return _CONSTANTS[node.id]

    def visit_Call(self, node):
        if not isinstance(node.func, ast.Name):
            raise UnsupportedLoss(
                f"only plain function calls are allowed, not {type(node.func).__name__} "
                f"(column {node.col_offset}): use one of {', '.join(sorted(FUNCTIONS))}"
            )
        if node.func.id in _REFUSED:
            raise UnsupportedLoss(f"function {node.func.id!r} is refused: {_REFUSED[node.func.id]}")
        if node.func.id not in FUNCTIONS or node.keywords:
            raise UnsupportedLoss(
                f"function {node.func.id!r} is not allowed (or takes no keywords): "
                f"use one of {', '.join(sorted(FUNCTIONS))}"
            )
        if len(node.args) != 1:
            raise UnsupportedLoss(f"{node.func.id}() takes exactly one argument")
        return FUNCTIONS[node.func.id](self.visit(node.args[0]))

    def visit_Subscript(self, node):
        if not (isinstance(node.value, ast.Name) and node.value.id == "G"):
            return self.generic_visit(node)
        index = node.slice
        parts = index.elts if isinstance(index, ast.Tuple) else [index]
        values = [p.value for p in parts if isinstance(p, ast.Constant) and type(p.value) is int]
        if len(parts) != 3 or len(values) != 3:
            raise UnsupportedLoss("write pre-activations as G[i, j, k] with three integer indices")
        i, j, k = values
        if not (1 <= i <= self.L and 1 <= j <= self.L and 1 <= k <= self.K):
            raise UnsupportedLoss(f"G[{i}, {j}, {k}] is out of range: i, j in 1..{self.L}, k in 1..{self.K} (1-based)")
        return self.G[i - 1][j - 1][k - 1]
