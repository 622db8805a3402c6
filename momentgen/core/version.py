"""momentgen's version: one literal, read by the package, setup.cfg and every provenance record."""

__version__ = "0.2.0"
