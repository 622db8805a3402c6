"""The randomized verify campaign (tests/campaign.py), behind the ``slow`` marker: every drawn
configuration must get the verdict ``agree`` (``make verify-campaign`` writes the table).
"""

import pytest

from tests.campaign import COUNT, draw, run_one

#: Documented limits: drawn configurations whose verdict is known to be ``disagree``, with the reason.
LIMITS = {
    14: "direct, L = 2, K = 3, mse(tanh), κ = 0.0075: finite-d gap 0.0023 on μ(S1 S1ᵀ) is 1.9× the tolerance "
    "— the κ → 0 curve's O(κ) residual, as on draw 15 (1.2× without the term, 0.1× with it); the curve "
    "with the term needs Φ's noise moments of this 12-variable loss, over 15 minutes to calibrate (issue 31)",
}  # was {4: mse(tanh), untied, L = 2: the sparse rule for Φ in > 4 dimensions missed rtol = 1e-8};


@pytest.mark.slow
@pytest.mark.parametrize(
    "index",
    [
        pytest.param(i, marks=pytest.mark.xfail(strict=True, reason=LIMITS[i])) if i in LIMITS else i
        for i in range(COUNT)
    ],
)
def test_verify_agrees_on_drawn_configurations(index, tmp_path):
    row = run_one(draw(index, tmp_path))
    assert row["verdict"] == "agree", f"{row['config']}: {row['message']}"
