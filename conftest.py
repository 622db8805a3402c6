"""Doctests see the package as `mg` (like networkx's `nx`)."""

import pytest

import momentgen


@pytest.fixture(autouse=True)
def _doctest_namespace(doctest_namespace):
    doctest_namespace["mg"] = momentgen
