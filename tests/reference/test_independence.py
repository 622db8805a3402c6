"""The references stay independent of the theory (`momentgen.reference`)."""

import subprocess
import sys


def test_reference_side_imports_no_theory():
    """SGD and the matrix flow are the independent references: importing them loads nothing of the compiler (the
    hierarchy, the potential, the truncation, the initial moments), the dynamics (closures, integration, the risk),
    the evidence or the interface — only `core`, `laws`, `models` and `setting`."""
    code = "import sys, momentgen.reference; print(' '.join(m for m in sys.modules if m.startswith('momentgen')))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "momentgen.reference.online_sgd" in loaded and "momentgen.reference.finite_flow" in loaded
    allowed = ("core", "laws", "models", "setting", "reference")
    theory = [m for m in loaded if m.count(".") >= 1 and m.split(".")[1] not in allowed]
    assert not theory, theory
