"""The compiler, theory side: canonical words → the sparse hierarchy program (`hierarchy`, `program`, `printers`)
→ Φ and its derivatives from the loss (`potential`, with the pre-activation mean as `slaved_mean`) → the d = ∞
initial moments (`initial`) → one compiled numba kernel over the program's arrays (`kernel`, `truncation`) →
importable generated modules (`emit`). Imports `core`, `laws`, `models`, `setting`."""
