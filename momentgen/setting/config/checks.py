"""The rules of a configuration that involve several keys, and the checks of what its keys point at (files,
schedules, sizes), each a one-line `ConfigError` naming the table and key."""

import numpy as np

from ... import models
from ...core.errors import WordError
from ...models import Model
from ...models.words import parse
from ..inits import InitSpec
from ..matrices import matrix_bytes, read_vectors
from ..schedules import Schedule, kappa_of
from .schema import _SCHEMA, MAX_ALIGNED_C, ConfigError, _check_schedule_keys


def _check_file_means(inits, means):
    """An explicit `mean` of a from-file init must be the file's own Tr(Σ M_k)/√d (Σ = I for isotropic tokens)."""
    for k, spec in sorted(inits.items()):
        file_mean = means[k - 1]
        if (
            spec.kind == "from-file"
            and spec.mean is not None
            and not np.isclose(spec.mean, file_mean, rtol=1e-9, atol=1e-9)
        ):
            raise ConfigError(
                f"[init.{k}] mean = {spec.mean:.6g} contradicts the file {spec.path!r}, whose "
                f"Tr(Sigma M_{k})/√d = {file_mean:.6g}: drop `mean` (the file's value is used) or fix the file"
            )


def _check_together(raw, given, where):
    """The rules that involve several keys."""
    _check_indices(raw, where)
    _check_loss_keys(raw["loss"], where)
    _check_inits(raw, where)
    _check_data(raw, where)
    sgd_given = {key.split(".", 1)[1] for key in given if key.startswith("sgd.")}
    _check_schedule_keys(raw["sgd"], sgd_given, where + "[sgd] ")
    _check_momentum(raw["sgd"], where)
    _check_grid(raw["integrate"], where)
    if raw["integrate"]["finite_lr"]:
        _check_finite_lr(raw, given, where)
    truncation = raw["truncation"]
    _check_observables(raw, where)
    if truncation["closure"] == "matrix-model":
        _check_matrix_model_size(raw, where)
    if truncation["closure"] == "quadrature" and truncation["degree"] < 3:
        raise ConfigError(
            f"{where}[truncation] the quadrature closure needs degree M ≥ 3 (order n = ⌊(M − 1)/2⌋ ≥ 1), "
            f"got {truncation['degree']}"
        )


def _check_grid(integrate, where):
    """A log grid's first time lies inside (0, T); ``log_first`` belongs to a log grid."""
    first = integrate["log_first"]
    if first is not None and integrate["grid"] != "log":
        raise ConfigError(f'{where}[integrate] `log_first` applies to grid = "log" only: remove it or set grid = "log"')
    if first is not None and not first < integrate["T"]:
        raise ConfigError(f"{where}[integrate] log_first = {first:g} must be below T = {integrate['T']:g}")


def _check_momentum(sgd, where):
    """Nesterov's look-ahead needs a momentum to look ahead with."""
    if sgd["nesterov"] and sgd["momentum"] == 0:
        raise ConfigError(f"{where}[sgd] nesterov = true needs momentum > 0 (with momentum 0 it is plain SGD)")


def _check_observables(raw, where):
    """Every listed observable is a word of this kind over indices 1..K (the file and key named)."""
    observables = raw["truncation"]["observables"]
    for word in [] if observables == "all" else observables:
        try:
            m = raw["model"]
            parse(word, Model(m["kind"], m["K"], m["trainable"], raw["data"]["covariance"] != "isotropic"))
        except WordError as error:
            raise ConfigError(f"{where}[truncation] `observables`: {word!r}: {error}") from None


def _check_indices(raw, where):
    """C matches L; every index list names indices 1..K."""
    model = raw["model"]
    K, L = model["K"], model["L"]
    if model["C"] is not None and np.shape(model["C"]) != (L, L):
        raise ConfigError(
            f"{where}[model] `C` has shape {np.shape(model['C'])}; with L = {L} tokens it must be {L} × {L}"
        )
    for table, key in (("model", "trainable"), ("loss", "student"), ("loss", "teacher")):
        bad = [k for k in raw[table][key] or () if not 1 <= k <= K]
        if bad:
            raise ConfigError(f"{where}[{table}] `{key}` indices {bad} are out of range 1..{K} (1-based)")


def _check_loss_keys(loss, where):
    """Exactly one of builtin/expression, and the keys each kind of loss reads (heads, activation)."""
    if (loss["builtin"] is None) == (loss["expression"] is None):
        raise ConfigError(f"{where}[loss] needs exactly one of `builtin` or `expression`")
    if loss["activation"] is not None and loss["builtin"] != "mse":
        used = "an expression" if loss["expression"] else f"builtin = {loss['builtin']!r}"
        raise ConfigError(
            f'{where}[loss] `activation` applies to builtin = "mse" only; {used} does not use it: remove it'
        )
    if loss["expression"] is not None and (loss["student"], loss["teacher"]) != ([1], [2]):
        raise ConfigError(
            f"{where}[loss] `student` and `teacher` apply to built-in losses only: an expression "
            "names its indices itself in G[i, j, k]"
        )
    _check_heads(loss, where)
    if loss["builtin"] == "mse" and loss["activation"] is None:
        loss["activation"] = "h1"


def _check_heads(loss, where):
    """``heads`` belongs to the multi-head loss, which needs it (and then sets student/teacher from it)."""
    if loss["heads"] is not None:
        if loss["builtin"] != "multihead-softmax-mse":
            raise ConfigError(f'{where}[loss] `heads` applies to builtin = "multihead-softmax-mse" only')
        if [loss["student"], loss["teacher"]] not in ([[1], [2]], loss["heads"]):
            raise ConfigError(f"{where}[loss] give either `heads` or `student`/`teacher`, not both")
        loss["student"], loss["teacher"] = loss["heads"]
    elif loss["builtin"] == "multihead-softmax-mse" and (loss["student"], loss["teacher"]) == ([1], [2]):
        raise ConfigError(f"{where}[loss] multihead-softmax-mse needs `heads`, e.g. heads = [[1, 2], [3, 4]]")


#: The keys each init kind reads (every kind reads `kind` and `mean`); any other key given is refused.
_INIT_READS = {
    "gaussian": ("width_ratio", "scale", "scale_U", "scale_V"),
    "identity": ("c",),
    "aligned": ("c", "exponent"),
    "from-file": ("path",),
}


def _check_inits(raw, where):
    """Each init's keys fit its kind (no key it does not read, set away from its default) and the model kind (PSD
    identity, a path for from-file, no mean when centred)."""
    definition = models.get(raw["model"]["kind"])
    defaults = {key: default for key, (default, _) in _SCHEMA["init"].items()}
    for k, table in raw["init"].items():
        reads = (*_INIT_READS[table["kind"]], "kind", "mean")
        stray = [key for key, value in table.items() if key not in reads and value != defaults[key]]
        if stray:
            raise ConfigError(
                f'{where}[init.{k}] `{stray[0]}` is not read by kind = "{table["kind"]}" (it reads '
                f"{', '.join(_INIT_READS[table['kind']])}): remove it"
            )
        if table["kind"] in ("identity", "aligned") and definition.positive_letters and table["c"] < 0:
            raise ConfigError(
                f"{where}[init.{k}] {table['kind']} `c` = {table['c']} < 0: the letters of the "
                f"{raw['model']['kind']} model are positive semi-definite, so c I must be (c ≥ 0)"
            )
        if table["kind"] == "from-file" and table["path"] is None:
            raise ConfigError(f'{where}[init.{k}] kind = "from-file" needs `path` (an .npz of finite-d matrices)')
        if table["mean"] is not None and definition.centred:
            raise ConfigError(
                f"{where}[init.{k}] `mean` is the pre-activation mean Tr(Sigma M_k)/√d of a model with a "
                f"mean; the {raw['model']['kind']} model's pre-activations are centred: remove it"
            )


def _check_data(raw, where):
    """[data]: the keys its covariance reads (no other), an aligned init only with a Σ, and the kinds and terms Σ is
    derived for."""
    data, kind = raw["data"], raw["model"]["kind"]
    reads = {"isotropic": (), "power-law": ("exponent",), "from-file": ("path",)}[data["covariance"]]
    defaults = {key: default for key, (default, _) in _SCHEMA["data"].items()}
    stray = [key for key in ("exponent", "path") if data[key] != defaults[key] and key not in reads]
    if stray:
        raise ConfigError(f'{where}[data] `{stray[0]}` is not read by covariance = "{data["covariance"]}": remove it')
    if data["covariance"] == "from-file" and data["path"] is None:
        raise ConfigError(
            f'{where}[data] covariance = "from-file" needs `path` (an .npz with `eigenvalues` or `Sigma`)'
        )
    aligned = [k for k, table in raw["init"].items() if table["kind"] == "aligned"]
    if aligned and data["covariance"] == "isotropic":
        raise ConfigError(
            f'{where}[init.{aligned[0]}] kind = "aligned" is S = c Σ^b for a data covariance Σ: set [data] covariance '
            '(with isotropic data use kind = "identity")'
        )
    refused = models.get(kind).aligned_refused
    if aligned and refused:
        raise ConfigError(f'{where}[init.{aligned[0]}] kind = "aligned" for the {kind} model: {refused}')
    for k in aligned:
        _check_aligned(raw, k, where)


def _check_aligned(raw, k, where):
    """An aligned init c Σ^b: |c| below `MAX_ALIGNED_C`, and for a power-law Σ of exponent a and b < 0 a finite
    teacher: its norm τ(S²) = c² τ(Σ^{2b}) needs 1 + 2ab > 0, and the zero closure, which starts from the exact
    moments of every word of degree ≤ M (τ(Σ^{Mb}) among them), needs 1 + aMb > 0."""
    table, data = raw["init"][k], raw["data"]
    if abs(table["c"]) >= MAX_ALIGNED_C:
        raise ConfigError(
            f"{where}[init.{k}] aligned `c` = {table['c']:g}: |c| must be below {MAX_ALIGNED_C:g} (the risk grows as "
            "c² and the flow becomes too stiff); rescale the teacher"
        )
    a, b = data["exponent"], table["exponent"]
    deepest = raw["truncation"]["degree"] if raw["truncation"]["closure"] == "zero" else 2
    if data["covariance"] == "power-law" and b < 0 and not 1 + a * deepest * b > 0:
        raise ConfigError(
            f"{where}[init.{k}] aligned `exponent` b = {b:g}: the run reads tau(Sigma^{deepest * b:g}), which "
            f"diverges for the power law of exponent a = {a:g} (it needs 1 + a·{deepest}·b > 0): take b > "
            f"{-1 / (a * deepest):.3g}"
        )


def _check_matrix_model_size(raw, where):
    """The matrix-model closure's n × n matrices (two processes for an ensemble) fit ``max_memory_gb``."""
    truncation = raw["truncation"]
    model = Model(raw["model"]["kind"], raw["model"]["K"], raw["model"]["trainable"])
    inits = {int(k): InitSpec(**table) for k, table in raw["init"].items()}
    processes = 2 if truncation["draws"] > 1 else 1
    memory = processes * matrix_bytes(model, truncation["size"], inits)
    limit = truncation["max_memory_gb"] * 2**30
    if memory > limit:
        raise ConfigError(
            f"{where}[truncation] the matrix-model closure at size {truncation['size']} needs about "
            f"{memory / 2**30:.3g} GiB; the limit is max_memory_gb = {truncation['max_memory_gb']:g}: lower size "
            "or raise the limit"
        )


def _check_finite_lr(raw, given, where):
    """``finite_lr = true`` takes κ = lr·d/batch from an explicit [sgd] table, and κ must be < 1."""
    missing = [key for key in ("d", "lr", "batch") if f"sgd.{key}" not in given]
    if missing:
        raise ConfigError(
            f"{where}[integrate] finite_lr = true takes kappa = lr·d/batch from [sgd]: set "
            + ", ".join(f"[sgd] {key}" for key in missing)
        )
    sgd = raw["sgd"]
    kappa = kappa_of(sgd["lr"], sgd["d"], sgd["batch"], sgd["momentum"])
    if kappa >= 1:
        momentum = f"/(1 − {sgd['momentum']:g})" if sgd["momentum"] else ""
        raise ConfigError(
            f"{where}[integrate] finite_lr: kappa = lr·d/batch{' /(1 − momentum)' if momentum else ''} = "
            f"{sgd['lr']:g}·{sgd['d']}/{sgd['batch']}{momentum} = {kappa:.3g} ≥ 1 is outside the expansion in kappa "
            "the term is the first order of; lower lr or raise batch"
        )
    definition = models.get(raw["model"]["kind"])
    if definition.noise_scale is None:
        raise ConfigError(f"{where}[integrate] finite_lr: the {raw['model']['kind']} model has no such term")


def _schedule(table, base):
    """The `Schedule` of a schedule's settings (`SgdSettings`, or its ``batch_schedule``: None is constant)."""
    if table is None:
        return Schedule("constant")
    if table.schedule == "from-file":
        path = base / table.path
        arrays = read_vectors(path, ("u", "f"), "schedule table")
        return Schedule(table.schedule, table=_checked_table(arrays["u"], arrays["f"], path))
    if table.schedule == "table":  # checked by the schema (`schema._schedule_table`)
        return Schedule(table.schedule, table=(tuple(table.table["u"]), tuple(table.table["f"])))
    warmup = getattr(table, "warmup", 0.0)  # a batch schedule has none
    return Schedule(
        table.schedule,
        milestones=table.milestones,
        warmup=warmup,
        final=table.final,
        factor=table.factor,
        decay=table.decay,
        exponent=table.exponent,
    )


#: the largest multiplier a schedule may reach (a step schedule's factor ** milestones beyond it is a typo)
MAX_MULTIPLIER = 1e6


def _check_schedules(config, where):
    """The schedule files read now; each multiplier finite and at most `MAX_MULTIPLIER`; the batch at least one
    sample all along (SGD cannot draw a fraction of one: the theory would run at another κ); with ``finite_lr``
    the peak κ < 1."""
    lr, batch = config.schedules()
    for name, schedule in (("[sgd] schedule", lr), ("[sgd] batch_schedule", batch)):
        with np.errstate(over="ignore"):
            largest = float(np.max(schedule(schedule.knots)))
        if not largest <= MAX_MULTIPLIER:
            raise ConfigError(
                f"{where}{name} reaches the multiplier {largest:.3g} (factor ** milestones); the limit is "
                f"{MAX_MULTIPLIER:g}: use a factor closer to 1 or fewer milestones"
            )
    if np.min(batch(batch.knots)) <= 0:
        raise ConfigError(f"{where}[sgd] batch_schedule reaches a batch of 0: give it a positive `final`/`f`")
    smallest = config.settings.sgd.batch * float(np.min(batch(batch.knots)))
    if smallest < 1:
        raise ConfigError(
            f"{where}[sgd] batch_schedule takes the batch down to {smallest:.3g} samples (batch × its smallest "
            "multiplier); SGD needs at least one sample per step: raise `final`/`factor`/`f` or the batch"
        )
    change = config.time_change()
    if change is not None and config.kappa * change.peak_kappa_factor >= 1:
        raise ConfigError(
            f"{where}[integrate] finite_lr: the schedule's peak kappa = lr·d/batch·max(f/b) = "
            f"{config.kappa * change.peak_kappa_factor:.3g} ≥ 1 is outside the expansion in kappa; lower lr"
        )


def _checked_table(u, f, path):
    """A from-file schedule: ``u`` increasing from 0 to 1, ``f`` ≥ 0 of the same length, not all 0."""
    if len(u) != len(f):
        raise ConfigError(f"{path}: arrays u and f must have the same length, got {len(u)} and {len(f)}")
    if u[0] != 0 or u[-1] != 1 or np.any(np.diff(u) <= 0):
        raise ConfigError(f"{path}: u must increase strictly from 0 to 1 (fractions of the run)")
    if np.any(f < 0) or not np.any(f > 0):
        raise ConfigError(f"{path}: f must be multipliers ≥ 0, not all 0")
    return tuple(u.tolist()), tuple(f.tolist())


def _check_loss(config):
    """The loss builds, and it depends on a trainable index (else nothing would learn)."""
    loss = config.loss()
    trainable = set(config.model.trainable)
    used = loss.expr.free_symbols & set(loss.variables)  # G_i_j_k (not the label noise xi_o)
    if not any(int(str(v).rsplit("_", 1)[1]) in trainable for v in used):
        raise ConfigError(
            f"loss {loss.name!r} does not depend on a trainable index {sorted(trainable)}: "
            "its gradient is 0 and nothing would move; check [loss] student/teacher and [model] trainable"
        )
