"""The configurations of the paper's figures, shipped with the package as TOML files (``configs/``): their names
and paths. Imports nothing of the configuration code (which looks names up here); the public face, with
``config(name)``, is `momentgen.examples` (`momentgen.interface.examples`)."""

import pathlib

from ...core.errors import ConfigError

__all__ = ["FOLDER", "names", "config_path"]

FOLDER = pathlib.Path(__file__).with_name("configs")


def names():
    """The shipped configurations' names (file stems), sorted."""
    return sorted(path.stem for path in FOLDER.glob("*.toml"))


def config_path(name):
    """The path of the shipped configuration ``name`` (e.g. ``"fig4_linear"``)."""
    path = FOLDER / f"{name}.toml"
    if not path.is_file():
        raise ConfigError(f"no configuration file {name!r} and no shipped example of that name: {', '.join(names())}")
    return path
