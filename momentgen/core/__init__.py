"""Plumbing that knows nothing of attention models: the error types, files written atomically, progress lines,
parallel tasks, sympy → numba compilation, the one stepping loop and its trajectory, the figure style, the HTML and
xarray display, the result store. Imports nothing else of momentgen."""
