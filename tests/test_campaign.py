"""The randomized verify campaign (tests/campaign.py), behind the ``slow`` marker: every drawn
configuration must get the verdict ``agree`` (``make verify-campaign`` writes the table)."""

import pytest

from .campaign import COUNT, draw, run_one


@pytest.mark.slow
@pytest.mark.parametrize("index", range(COUNT))
def test_verify_agrees_on_drawn_configurations(index, tmp_path):
    row = run_one(draw(index, tmp_path))
    assert row["verdict"] == "agree", f"{row['config']}: {row['message']}"
