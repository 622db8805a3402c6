"""Loss specification: built-ins and the restricted expression parser."""

import numpy as np
import pytest
import sympy

from momentgen.core.errors import UnsupportedLoss
from momentgen.setting.losses import ACTIVATIONS, builtin, parse_expression


def G(i, j, k):
    return sympy.Symbol(f"G_{i}_{j}_{k}", real=True)


def act(name, argument):
    h = ACTIVATIONS[name]
    return h.subs(sympy.Symbol("x", real=True), argument)


def test_mse_readout_for_one_token_is_h_itself():
    """For L = 1 the readout is h(G): the loss evaluated at points equals (h(a) − h(b))² with h
    written here with the math module (h1 = x, h2 = (x² − 1)/√2, h3 = (x³ − 3x)/√6, tanh, erf,
    softplus = log(1 + eˣ))."""
    import math

    formulas = {
        "h1": lambda x: x,
        "h2": lambda x: (x * x - 1) / math.sqrt(2),
        "h3": lambda x: (x**3 - 3 * x) / math.sqrt(6),
        "tanh": math.tanh,
        "erf": math.erf,
        "softplus": lambda x: math.log1p(math.exp(x)),
    }
    assert set(formulas) == set(ACTIVATIONS)
    for name, h in formulas.items():
        loss = builtin("mse", L=1, K=2, activation=name)
        for a, b in ((0.3, -1.2), (1.7, 0.4), (-0.9, -2.5)):
            value = float(loss.expr.subs({G(1, 1, 1): a, G(1, 1, 2): b}))
            assert value == pytest.approx((h(a) - h(b)) ** 2, rel=1e-13, abs=1e-15)


def test_mse_readout_averages_over_token_pairs():
    loss = builtin("mse", L=2, K=3, activation="h1", student=[1, 3], teacher=[2])
    y = lambda k: sum(G(i, j, k) for i in (1, 2) for j in (1, 2)) / 2  # noqa: E731
    assert sympy.expand(loss.expr - (y(1) + y(3) - y(2)) ** 2) == 0
    assert len(loss.variables) == 12 and loss.is_polynomial


def test_softmax_mse_matches_its_definition():
    loss = builtin("softmax-mse", L=2, K=2)
    point = {G(i, j, k): 0.1 * i - 0.3 * j + 0.7 * k * (i == j) for i in (1, 2) for j in (1, 2) for k in (1, 2)}

    def softmax_row(k, i):
        z = [point[G(i, j, k)] for j in (1, 2)]
        total = sum(sympy.exp(v) for v in z)
        return [sympy.exp(v) / total for v in z]

    expected = sum((a - b) ** 2 for i in (1, 2) for a, b in zip(softmax_row(1, i), softmax_row(2, i)))
    assert float(loss.expr.subs(point)) == pytest.approx(float(expected), rel=1e-14)
    assert not loss.is_polynomial


def test_expression_parser_builds_the_same_sympy_expression():
    loss = parse_expression("(tanh(G[1,2,1]) - h3(G[2,1,2]))**2 / 2 + 0.25 * exp(-G[1,1,1]) * pi", 2, 2)
    expected = (sympy.tanh(G(1, 2, 1)) - act("h3", G(2, 1, 2))) ** 2 / 2
    expected += sympy.Rational(1, 4) * sympy.exp(-G(1, 1, 1)) * sympy.pi
    assert sympy.expand(loss.expr - expected) == 0


@pytest.mark.parametrize(
    "text,needle",
    [
        ('__import__("os").system("echo hacked")', "Attribute"),
        ("G[1,1,1].conjugate()", "Attribute"),
        ("G.__class__", "Attribute"),
        ("open('/etc/passwd')", "'open'"),
        ("eval('1')", "'eval'"),
        ("lambda: G[1,1,1]", "Lambda"),
        ("[G[1,1,1]]", "List"),
        ("G[1,1,1] if G[1,1,2] else 0", "IfExp"),
        ("x + G[1,1,1]", "unknown name 'x'"),
        ("G[1,1,3]", "out of range"),
        ("G[1,1]", "three integer indices"),
        ("G[1,1,1.5]", "three integer indices"),
        ("G[1,1,1] ** G[1,1,2]", "powers"),
        ("G[1,1,1] ** 1000", "powers"),
        ("exp(G[1,1,1], 2)", "exactly one argument"),
        ("exp(x=G[1,1,1])", "keywords"),
        ("'a' * 3", "not a number"),
        ("1 + 2", "does not depend"),
        ("G[1,1,1] +", "cannot parse"),
        ("(" * 200 + "G[1,1,1]" + ")" * 200, "nested"),
        ("-" * 3000 + "G[1,1,1]", "recursion"),
        ("G[1,1,1] // 2", "FloorDiv"),
        ("G[1,1,1] @ G[1,1,2]", "MatMult"),
        ("G[1,1,1] + " * 2000 + "1", "characters long"),
    ],
)
def test_hostile_or_malformed_expressions_are_rejected(text, needle):
    with pytest.raises(UnsupportedLoss, match=needle.replace("(", r"\(").replace("[", r"\[")):
        parse_expression(text, 1, 2)


@pytest.mark.parametrize(
    "call,needle",
    [
        (lambda: builtin("hinge"), "unknown built-in loss"),
        (lambda: builtin("mse", activation="swish"), "unknown activation"),
        (lambda: builtin("mse", K=2, teacher=[3]), "teacher indices"),
        (lambda: builtin("mse", L=0), "L must be"),
        (lambda: builtin("softmax-mse", L=2, K=2, temperature=2), "bad options"),
    ],
)
def test_bad_builtin_options(call, needle):
    with pytest.raises(UnsupportedLoss, match=needle):
        call()


def test_multihead_softmax_mse_is_the_sum_of_per_head_softmaxes():
    """At random pre-activations the loss equals numpy's ‖Σ_h softmax(G_h) − Σ_h' softmax(G_h')‖²
    (rows softmaxed per head, heads 1, 2 vs 3, 4), computed independently of sympy."""
    loss = builtin("multihead-softmax-mse", L=2, K=4, student=[1, 2], teacher=[3, 4])
    G = np.random.default_rng(3).standard_normal((2, 2, 4))

    def attention(heads):
        return sum(np.exp(G[:, :, h - 1]) / np.exp(G[:, :, h - 1]).sum(1, keepdims=True) for h in heads)

    expected = np.sum((attention([1, 2]) - attention([3, 4])) ** 2)
    values = dict(zip(loss.variables, G.ravel()))
    assert float(loss.expr.subs(values)) == pytest.approx(expected, rel=1e-12)
    assert isinstance(loss.expr, sympy.Expr)


def test_multihead_heads_key_is_checked():
    from momentgen.setting.config import ConfigError, parse_config

    base = {
        "model": {"kind": "tied", "L": 2, "K": 4, "trainable": [1, 2]},
        "init": {str(k): {} for k in range(1, 5)},
        "truncation": {"degree": 3},
        "integrate": {"T": 0.1},
    }
    ok = parse_config({**base, "loss": {"builtin": "multihead-softmax-mse", "heads": [[1, 2], [3, 4]]}})
    assert ok.settings.loss.student == (1, 2) and ok.replace(integrate={"T": 0.2}).settings.loss.teacher == (3, 4)
    with pytest.raises(ConfigError, match="needs `heads`"):
        parse_config({**base, "loss": {"builtin": "multihead-softmax-mse"}})
    with pytest.raises(ConfigError, match="applies to builtin"):
        parse_config({**base, "loss": {"builtin": "softmax-mse", "heads": [[1, 2], [3, 4]]}})
    with pytest.raises(ConfigError, match="heads"):
        parse_config({**base, "loss": {"builtin": "multihead-softmax-mse", "heads": [[1, 2]]}})


def test_the_singularity_check_is_made_once_per_loss_and_still_refuses_on_every_parse():
    """The symbolic derivatives of the singularity check are almost all of a loss's parse time (softmax-mse at L = 3:
    1.7 s), so their verdict is kept per expression: a second parse of the same loss reuses it (a cache hit, the
    derivatives not taken again), and a singular loss is refused again, with the same message, on every parse."""
    from momentgen.setting import losses

    builtin("softmax-mse", L=2, K=2)
    hits = losses._singularity.cache_info().hits
    again = builtin("softmax-mse", L=2, K=2)
    assert losses._singularity.cache_info().hits == hits + 1
    assert again.expr == builtin("softmax-mse", L=2, K=2).expr
    messages = []
    for _ in range(2):
        with pytest.raises(UnsupportedLoss, match="the loss contains log") as refused:
            parse_expression("G[1,1,1]**3 * log(G[1,1,1]**2)", 1, 2)
        messages.append(str(refused.value))
    assert messages[0] == messages[1]
