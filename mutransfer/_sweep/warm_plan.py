"""A warm start's trials: the source study's best configurations, rescaled by μP and fitted to this study.

``sweep --warm-start STUDY`` (mutransfer._sweep.warm_start reads STUDY) makes the N best
completed trials of STUDY (N = ``--warm-start-top``, default max(1, num_trials // 4)) this
study's first trials, ``t0000`` … ``t{N-1}``, in the order of their source error: the
plan hands them out instead of sampling (Optuna's enqueue), and TPE is told their results
like any other trial's.

Rescaling: the source's trials ran at its proxy size (K_s, width w_s), this study's at
(K, w). :func:`operators.transfer.transfer` is called with a ``Scaling`` from (K_s, w_s)
to (K, w). Under μP in K the model applies c(K) itself, so the *master* LR and init scale
carry over unchanged and the record states the *effective* factors (spectral LR ×
√(log K_s / log K), the init variance likewise). A width change between two studies is
copied unchanged (each study's proxy is its own width-μP base model), with a note.

Fitting: a value outside this study's range is clipped into it (one note line); a trial
whose ``choice`` value is not among this study's, or that lacks a searched name, is left out
(one note line each). The result, :class:`WarmStart`, is kept in ``state.json`` on the
first session, so a resumed study hands out the same trials without reading the source again.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mutransfer._study.models import merge_hyperparameters
from mutransfer._study.search_space import SIZE_KEYS
from mutransfer._sweep.plan import total_trials, trial_key
from mutransfer._sweep.session import Session
from mutransfer._sweep.warm_start import SourceStudy, load_source
from mutransfer._tracking.runs import log_batch
from mutransfer.errors import UserInputError
from operators.transfer import Scaling, transfer

#: the parent run's tag (the source study) and each warm trial's child-run tag (its source trial)
WARM_TAG = "mutransfer.warm_start"
#: a warm-started trial's MLflow tag: the source trial it came from
WARM_TAG_FROM = "mutransfer.warm_start_from"
WARM_FROM_TAG = "mutransfer.warm_start_from"
#: the warm start's slot in ``Made.records``, its ``state.json`` and report key
NAME = "warm_start"


@dataclass
class WarmTrial:
    """One warm trial: its key here, the source trial and error, the configuration it runs, the rescale record."""

    key: str
    source_trial: str
    source_error: float
    config: dict
    rescale: dict  # lr_factor, init_variance_factor, the transfer's quantities and notes

    def provenance(self, warm: WarmStart) -> dict:
        """A warm trial's provenance: its journal entry's user attribute ``mutransfer.seed``
        (``trials/<key>/warm_start.json`` in a study folder written before the journal held it)."""
        return {
            "source_study": warm.source,
            "source_location": warm.location,
            "source_trial": self.source_trial,
            "source_error": self.source_error,
            "source_size": warm.source_size,
            "size": warm.size,
            "config": self.config,
            "rescale": self.rescale,
        }


@dataclass
class WarmStart:
    """The warm start of a study (``state.json`` key ``warm_start``)."""

    spec: str  # --warm-start as given
    source: str  # the source study's name
    location: str  # its folder, or the tracking URI it was read from
    problem: str
    operator: str
    source_size: dict  # {"K": K_s or None, "width": w_s}
    size: dict  # this study's proxy size
    requested: int
    trials: list[WarmTrial] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_state(cls, state: dict) -> WarmStart | None:
        """The warm start ``state.json`` keeps (key ``warm_start``), or None for a cold study."""
        stored = state.get(NAME)
        return cls.from_dict(stored) if stored else None

    @classmethod
    def from_dict(cls, d: dict) -> WarmStart:
        return cls(**dict(d, trials=[WarmTrial(**t) for t in d.get("trials") or []], notes=list(d.get("notes") or [])))

    def plan_entries(self) -> list[tuple[dict, dict]]:
        """(configuration, provenance) of each warm trial in key order, for mutransfer._sweep.plan.SearchPlan."""
        return [(dict(t.config), t.provenance(self)) for t in self.trials]

    def sources(self) -> dict[str, str]:
        """Key here -> source trial key (the child runs' tag)."""
        return {t.key: t.source_trial for t in self.trials}


# --------------------------------------------------------------------------- resolving (prepare)


def resolve_warm_start(options, study, tracking_uri: str, state: dict) -> WarmStart | None:
    """The study's warm start from the options (a new study) or from ``state`` (a resumed one); refusals as one line."""
    spec = options.warm_start
    if spec is None:
        if options.warm_start_top is not None or options.warm_start_any:
            flag = "--warm-start-top" if options.warm_start_top is not None else "--warm-start-any"
            raise UserInputError(
                f"{flag} needs --warm-start STUDY (the study whose trials seed this one); add it or drop {flag}"
            )
        stored = state.get("warm_start") if options.resume else None
        return WarmStart.from_dict(stored) if stored else None
    if study.search.algorithm == "grid":
        raise UserInputError(
            "--warm-start: search.algorithm grid runs every combination in a fixed order and cannot be "
            "seeded; use search.algorithm tpe or random, or drop --warm-start"
        )
    if options.resume:
        stored = state.get("warm_start")
        if stored:
            _check_same_source(spec, stored, options)
            return WarmStart.from_dict(stored)
        if state.get("search_window") is not None or state.get("phase") not in (None, "proxies"):
            raise UserInputError(
                f"--warm-start {spec}: study {study.name!r} started without a warm start and its search "
                "has begun; resume it without --warm-start, or start a new study with --name NEW"
            )
    source = load_source(
        spec, runs_dir=options.runs_dir, tracking_uri=tracking_uri, factory_dir=study.operator.factory_dir
    )
    notes = _check_kind(spec, study, source, options.warm_start_any)
    return build_warm_start(spec, study, source, options.warm_start_top, notes)


def _check_same_source(spec: str, stored: dict, options) -> None:
    same = spec in (stored["spec"], stored["source"]) or str(Path(spec).expanduser().absolute()) == stored["location"]
    if not same:
        raise UserInputError(
            f"--warm-start {spec}: this study started warm from {stored['source']!r} "
            f"({stored['location']}); resume with --warm-start {stored['spec']} or without the flag"
        )
    if options.warm_start_top is not None and options.warm_start_top != stored["requested"]:
        raise UserInputError(
            f"--warm-start-top {options.warm_start_top}: this study started with "
            f"--warm-start-top {stored['requested']}; drop the flag to resume"
        )


def _check_kind(spec: str, study, source: SourceStudy, any_kind: bool) -> list[str]:
    """Refuse a source of another problem or operator (a note with ``--warm-start-any``)."""
    notes = []
    for what, here, there in (
        ("problem", study.problem.name, source.problem),
        ("operator", study.operator.type, source.operator),
    ):
        if here == there:
            continue
        if not any_kind:
            verb = "solved" if what == "problem" else "used"
            raise UserInputError(
                f"--warm-start {spec}: study {source.name!r} {verb} {what} {there}, this study {what} "
                f"{here}; pick a study of the same {what}, or pass --warm-start-any to seed from it anyway"
            )
        notes.append(f"--warm-start-any: the source's {what} is {there}, this study's {here}")
    return notes


def build_warm_start(spec: str, study, source: SourceStudy, top: int | None, notes: list[str]) -> WarmStart:
    """Pick the source's ``top`` best completed trials, rescale them and fit them to ``study``'s search space."""

    requested = int(top) if top is not None else max(1, study.search.num_trials // 4)
    best = source.best(min(requested, total_trials(study)))
    if not best:
        raise UserInputError(
            f"--warm-start {spec}: study {source.name!r} ({source.location}) has no completed trial with "
            "a finite error; finish it (--resume) or pick another study"
        )
    clipped: list[str] = []
    out_of_choice: list[str] = []
    missing: list[str] = []
    trials: list[WarmTrial] = []
    size = {"K": study.proxy_modes, "width": int(study.operator.width)}
    for t in best:
        config = _fit(study, t, clipped, out_of_choice, missing)
        if config is None:
            continue
        record = rescale_record(study, source, config)
        assert t.val_error is not None  # SourceStudy.best keeps the usable trials: a finite error each
        trials.append(WarmTrial(trial_key(len(trials)), t.key, float(t.val_error), config, record))
    if clipped:
        notes.append("clipped into this study's search space: " + ", ".join(clipped))
    if out_of_choice:
        notes.append("left out (a value not among this study's choices): " + ", ".join(out_of_choice))
    if missing:
        notes.append("left out (the source did not search it): " + ", ".join(missing))
    if not trials:
        raise UserInputError(
            f"--warm-start {spec}: none of the {len(best)} best trials of {source.name!r} fits this "
            f"study's search space ({'; '.join(notes[-2:])}); widen search_space or drop --warm-start"
        )
    notes.append(_rescale_note(source, size, trials[0].rescale))
    return WarmStart(
        spec,
        source.name,
        source.location,
        source.problem,
        source.operator,
        {"K": source.proxy_K, "width": source.proxy_width},
        size,
        requested,
        trials,
        notes,
    )


def _fit(study, trial, clipped: list, out_of_choice: list, missing: list) -> dict | None:
    """The trial's configuration in ``study``'s search space (values clipped into ranges), or None (noted)."""
    config = {}
    for name, dist in study.search_space.items():
        if name not in trial.config or trial.config[name] is None:
            missing.append(f"{trial.key} ({name})")
            return None
        value = trial.config[name]
        if dist.type == "choice":
            match = [v for v in dist.values if v == value]
            if not match:
                out_of_choice.append(f"{trial.key} {name}={value} (choices {list(dist.values)})")
                return None
            config[name] = match[0]
            continue
        try:
            value = float(value)
        except (TypeError, ValueError):
            value = math.nan
        if not math.isfinite(value):  # a hand-made folder or a stray MLflow param: not a value to start from
            missing.append(f"{trial.key} ({name}={trial.config[name]!r} is not a finite number)")
            return None
        fitted = min(max(value, float(dist.low)), float(dist.high))
        if dist.type == "int":
            fitted = int(round(fitted))
        if fitted != value:
            clipped.append(f"{trial.key} {name} {value:.4g} -> {fitted:.4g}")
        config[name] = fitted
    return config


def source_scaling(study, source: SourceStudy):
    """The ``Scaling`` from the source's proxy size to this study's proxy size (width copied: standard rule)."""

    modes = study.proxy_modes is not None and source.proxy_K is not None
    return Scaling(
        dim=study.dim,
        proxy_modes=source.proxy_K if modes else None,
        target_modes=study.proxy_K if modes else None,
        parametrization=study.parametrization,
        proxy_width=source.proxy_width,
        target_width=int(study.operator.width),
        width_parametrization="standard",
        attention_scaled=study.family.attention_scaled,
    )


def rescale_record(study, source: SourceStudy, config: dict) -> dict:
    """operators.transfer.transfer of one warm configuration from the source's proxy size to this study's."""

    hp = merge_hyperparameters(study, config)
    unchanged = {  # numbers only (a searched schedule is a name) and no size (the source's sizes are the scaling's)
        k: v for k, v in config.items() if k not in ("lr", "init_scale", *SIZE_KEYS) and not isinstance(v, str)
    }
    record = transfer(
        source_scaling(study, source),
        hp["lr"],
        init_scale=study.family.own_hyperparameters(hp).get("init_scale"),
        unchanged=unchanged,
    )
    return {
        "lr_factor": record.lr_factor,
        "init_variance_factor": record.init_variance_factor,
        "quantities": record.as_dict()["quantities"],
        "notes": list(record.notes),
    }


def _rescale_note(source: SourceStudy, size: dict, rescale: dict) -> str:
    text = (
        f"rescaled by muP from {source.size_text()} to K={size['K']} width {size['width']}"
        if size["K"] is not None
        else f"from width {source.proxy_width} to width {size['width']}"
    )
    text += (
        f": the master hyperparameters carry over unchanged (the models apply their multipliers); effective spectral "
        f"LR x {rescale['lr_factor']:.4g}, init variance x {rescale['init_variance_factor']:.4g}"
    )
    if source.proxy_width is not None and source.proxy_width != size["width"]:
        text += (
            "; the proxy width differs and each study's proxy is its own width base model: copied unchanged, "
            "the optimum may drift with width"
        )
    return text


# --------------------------------------------------------------------------- the search (proxies) and the report


def start_warm(session: Session) -> list[tuple[dict, dict]]:
    """Keep the warm start in state.json (first session), tag the parent run, say what seeds the search.

    Returns the plan's warm entries (none for a cold study; a nested search never asks: mutransfer._sweep.proxies).
    """
    warm = session.record(NAME, WarmStart)
    if warm is None:
        return []
    if not session.state.get("warm_start"):
        session.update_state(warm_start=warm.as_dict())
    if session.parent_id:
        logged = session.tracker.client.get_run(session.parent_id).data.metrics
        metrics = (
            []
            if "warm_start_trials" in logged
            else [("warm_start_trials", len(warm.trials), int(time.time() * 1000), 0)]
        )
        log_batch(session.tracker.client, session.parent_id, metrics=metrics, tags={WARM_TAG: warm.source})
    keys = ", ".join(f"{t.key}<-{t.source_trial}" for t in warm.trials)
    session.say(f"warm start: {len(warm.trials)} trial(s) from study {warm.source!r} ({keys})")
    for note in warm.notes:
        session.say(f"note: warm start: {note}")
    return warm.plan_entries()


def warm_start_section(warm: WarmStart | None, trials: list) -> dict | None:
    """The report's ``warm_start``: the source, N, and per warm trial its source trial and the errors there and here."""
    if warm is None:
        return None
    here = {t.trial_id: t for t in trials}
    rows = []
    for t in warm.trials:
        record = here.get(t.key)
        rows.append(
            {
                "trial_id": t.key,
                "source_trial": t.source_trial,
                "source_error": t.source_error,
                "val_error": record.val_error if record else None,
                "status": record.status if record else None,
                "config": t.config,
                "lr_factor": t.rescale["lr_factor"],
            }
        )
    return {
        "source": warm.source,
        "location": warm.location,
        "requested": warm.requested,
        "trials": len(warm.trials),
        "source_size": warm.source_size,
        "size": warm.size,
        "from_source": rows,
        "notes": warm.notes,
    }
