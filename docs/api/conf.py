"""Sphinx configuration of momentgen's API reference (`make docs`; CI builds it with warnings as errors)."""

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import momentgen  # noqa: E402
from momentgen.config.schema import SECTIONS  # noqa: E402

project = "momentgen"
version = release = momentgen.__version__
extensions = ["sphinx.ext.autodoc", "numpydoc"]
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
autodoc_typehints = "none"
default_role = "literal"  # `name` in a docstring is code, as in the package's own prose
html_theme = "alabaster"
exclude_patterns = ["_build"]


def _config_keys():
    """``config_keys.rst``: every table and key of a configuration with its default (read off the schema)."""
    lines = [
        "Configuration keys",
        "==================",
        "",
        "Every key of a TOML configuration, its type and its default (``momentgen.config.schema``).",
        "",
    ]
    for table, cls in SECTIONS.items():
        title = "[init.k]" if table == "init" else f"[{table}]"
        lines += [
            title,
            "-" * len(title),
            "",
            ".. list-table::",
            "   :header-rows: 1",
            "",
            "   * - key",
            "     - type",
            "     - default",
        ]
        for field in cls.__dataclass_fields__.values():
            default = field.metadata.get("default")
            shown = "required" if repr(default).startswith("<") else repr(default)
            kind = getattr(field.type, "__name__", str(field.type))
            lines += [f"   * - ``{field.name}``", f"     - ``{kind}``", f"     - ``{shown}``"]
        lines.append("")
    (pathlib.Path(__file__).parent / "config_keys.rst").write_text("\n".join(lines))


_config_keys()
