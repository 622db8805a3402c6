"""Where the theory meets its references on purpose: exact d = ∞ solutions (`oracles`), theory beside SGD
(`comparison`, `evolution` for spectra) and the verdict (`verification`, planned by `verification_plan`)."""
