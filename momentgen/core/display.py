"""How results leave Python: a short HTML summary for Jupyter and labelled arrays (xarray).

`summary_html` is what a `Result`, a `Verification` and a `Comparison` show in a notebook (``_repr_html_``):
a title, a few lines (status, window, estimate) and one small table — every string escaped, so a message that
carries a file name or a hostile configuration value is shown, never interpreted. `to_dataset` turns a result's
columns into an `xarray.Dataset` with dimension ``t`` (the kind's time axis; nominal under a schedule); xarray is
an optional dependency (``pip install 'momentgen[xarray]'``).
"""

import html

import numpy as np

from .errors import MomentgenError

__all__ = ["summary_html", "to_dataset", "require_xarray"]

#: Rows a summary's table shows at most (a notebook cell is a glance, not the data: `to_pandas()` has it all).
MAX_ROWS = 8


def summary_html(title, lines, header=(), rows=()):
    """A short HTML block: ``title``, ``lines`` as (label, value) pairs, and a table of ``header`` and at most
    `MAX_ROWS` of ``rows`` (the count of the rest said). Every piece of text is escaped."""
    parts = [f"<div><strong>{_text(title)}</strong><ul>"]
    parts += [f"<li>{_text(label)}: {_text(value)}</li>" for label, value in lines]
    parts.append("</ul>")
    rows = list(rows)
    if header and rows:
        parts.append("<table><tr>" + "".join(f"<th>{_text(h)}</th>" for h in header) + "</tr>")
        for row in rows[:MAX_ROWS]:
            parts.append("<tr>" + "".join(f"<td>{_text(cell)}</td>" for cell in row) + "</tr>")
        parts.append("</table>")
        if len(rows) > MAX_ROWS:
            parts.append(f"<p>… {len(rows) - MAX_ROWS} more rows: <code>to_pandas()</code> has them all</p>")
    parts.append("</div>")
    return "".join(parts)


def _text(value):
    """A cell as escaped text: numbers to 4 significant digits, None as a dash, long text cut."""
    if value is None:
        return "—"
    if isinstance(value, (float, np.floating)):
        return html.escape(f"{value:.4g}")
    text = str(value)
    return html.escape(text if len(text) <= 300 else text[:300] + "…")


def require_xarray():
    """The xarray module, or a one-line `MomentgenError` saying how to install it."""
    try:
        import xarray  # noqa: PLC0415 - optional: only the labelled-array exports need it
    except ImportError:
        raise MomentgenError("labelled arrays need xarray: pip install 'momentgen[xarray]'") from None
    return xarray


def to_dataset(t, columns, attrs):
    """An `xarray.Dataset`: dimension ``t``, one variable per column (``{name: values over t}``), ``attrs``
    (entries that are None are left out: netCDF attributes are numbers or text)."""
    xarray = require_xarray()
    variables = {name: ("t", np.asarray(values, dtype=float)) for name, values in columns.items()}
    kept = {key: int(value) if isinstance(value, bool) else value for key, value in attrs.items() if value is not None}
    return xarray.Dataset(variables, coords={"t": np.asarray(t, dtype=float)}, attrs=kept)
