"""The dynamics, theory side: integrating the hierarchy with an honest validity horizon (`integrate`), a run's
`problem`, the closures (`closure_base`, `closures`, `riccati`, `ensemble`), the risk along a curve (`risk`) and
the `Result` every closure returns (`results`). Imports the compiler and everything below it."""
