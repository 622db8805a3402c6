"""The configurations of the paper's figures, shipped with the package (``momentgen.examples``).

>>> from momentgen import examples
>>> examples.names()[:2]
['fig1_tied_softmax', 'fig2_direct_h2']
>>> examples.config("fig4_linear").model.kind
'tied'
"""

from ..setting.config import load_config
from ..setting.shipped import FOLDER, config_path, names

__all__ = ["names", "config_path", "config", "FOLDER"]


def config(name, **overrides):
    """The shipped configuration ``name`` as a validated `momentgen.setting.config.Config` (with ``overrides``)."""
    return load_config(config_path(name), **overrides)
