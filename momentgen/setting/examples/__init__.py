"""The configurations of the paper's figures, shipped with the package.

>>> from momentgen import examples
>>> examples.names()[:2]
['fig1_tied_softmax', 'fig2_direct_h2']
>>> examples.config("fig4_linear").model.kind
'tied'
"""

import pathlib

__all__ = ["names", "config_path", "config"]

FOLDER = pathlib.Path(__file__).with_name("configs")


def names():
    """The shipped configurations' names (file stems), sorted."""
    return sorted(path.stem for path in FOLDER.glob("*.toml"))


def config_path(name):
    """The path of the shipped configuration ``name`` (e.g. ``"fig4_linear"``)."""
    path = FOLDER / f"{name}.toml"
    if not path.is_file():
        from ..config import ConfigError  # noqa: PLC0415 - config imports this module lazily

        raise ConfigError(f"no configuration file {name!r} and no shipped example of that name: {', '.join(names())}")
    return path


def config(name, **overrides):
    """The shipped configuration ``name`` as a validated `momentgen.config.Config` (with ``overrides``)."""
    from ..config import load_config  # noqa: PLC0415 - config imports this module lazily

    return load_config(config_path(name), **overrides)
