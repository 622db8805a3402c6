"""The mathematics of matrix laws, before any model: truncated GNS representations (`representation`),
edge-adapted quadrature rules of a letter's law (`edge`), and states whose every matrix is diagonal in one basis
(`commuting`). Imports `momentgen.core` only."""
