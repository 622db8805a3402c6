"""The finite-d matrix flow: the population gradient flow of the SGD matrices (MATH.md §3–§5, §7).

Noise-free and untruncated, between SGD and the hierarchy; its coefficients come from the source the caller passes
(the theory's potential, see `momentgen.compiler.truncation.CoefficientSource`), so this module imports nothing of
the theory. Times on the kind's axis (tied ``t``, the others ``τ``).
"""

from ..setting.data import ISOTROPIC
from ..setting.flow import run as run_flow
from .online_sgd import SimulationResult, word_codes

__all__ = ["matrix_flow"]


def matrix_flow(model, factors, source, *, times, words, rtol=1e-9, atol=1e-11, data=ISOTROPIC):
    """Integrate the population gradient flow of finite-d factors; measure ``words`` at ``times``
    (on the kind's axis, ``model.time_scale``: tied t = 4nη/d, others τ = nη/d).

    ``source`` supplies the coefficients from the matrices' own order parameters (see
    `momentgen.setting.flow`; the theory's is `momentgen.compiler.truncation.CoefficientSource`, which for a kind with
    a mean uses the slaved m*(q) and the trace-conserving β′ of MATH.md §4). Deterministic and free
    of truncation: the finite-d reference between SGD and the hierarchy. A state the source
    cannot pass ends the run early (``status``). ``data``: the tokens' covariance Σ (a fixed letter).
    """
    texts, codes = word_codes(model, words)
    d = model.definition.matrices.dimension(factors[0])
    run = run_flow(
        model,
        factors,
        source,
        times=times,
        codes=codes,
        texts=texts,
        rtol=rtol,
        atol=atol,
        sigma=data.letter(model, d),
    )
    return SimulationResult(run.t, run.status, run.message, series=run.series, d=d, info={"nfev": run.info["nfev"]})
