"""What both descriptions read — the theory and the references alike: a run's configuration (`config`, the shipped
configurations `shipped`, the one validation of the API's and the CLI's `arguments`), its data covariance Σ
(`data`), inits, losses and schedules, the finite-d matrices of its letters and their trace moments (`matrices`),
their spectra (`spectra`), and the matrix-ODE engine both the flow closures and the finite-d matrix flow run on
(`flow`). Imports `core`, `laws` and `models`; nothing of the theory."""
