"""The interface of a search strategy: what the sweep asks of a ladder, top-k, a warm start, a verification, a baseline.

A strategy is an object with a ``name`` (its slot in ``Made.records``, mutransfer._sweep.session) and a
``report_key`` (its key in the report JSON), and hooks the sweep's machinery calls in
a loop over the registered strategies (mutransfer._sweep.strategies):

- :meth:`Strategy.active`: whether this study and its options ask for it (a :class:`Prepared` study);
- :meth:`Strategy.prepare`: at the end of ``prepare``, before any compute: checks, and a record known up front,
  returned;
- :meth:`Strategy.phases`: its phase functions and where they run (:class:`Placement`: after a core phase of
  mutransfer._sweep.runner, or instead of one); a phase is ``phase(session, made) -> made``: it reads the open
  study (:class:`Session`) and what earlier steps made (:class:`Made`), and returns what it made, its record among
  them (``made.with_record(name, record)``);
- :meth:`Strategy.section`: its report value; :meth:`Strategy.text_lines`: its lines of the text report;
  :meth:`Strategy.verdict`: its finding in words for the summary (and ``suggestion``: what it would add, when it
  did not run);
  :meth:`Strategy.html_section`: its section of the HTML page;
- its trainings' cost needs no code: every training its phase runs goes through the study's executor, which books
  it under the strategy's ``name`` (mutransfer._sweep._ledger), and the report counts those bookings on μTransfer's
  side of the μTransfer-vs-direct ratios unless ``cost_side`` says they are a ``"check"`` (a verification) or the
  ``"direct"`` side (the direct baseline);
- :meth:`Strategy.count_cost` and :meth:`Strategy.extra_costs`: a strategy that reports its trainings in its own
  words (the ladder's rungs, top-k's candidates) counts them itself instead;
- :meth:`Strategy.metrics`: what it logs on the MLflow parent run with the report;
- :meth:`Strategy.gain_source` and :meth:`Strategy.refine_gain`: how it changes the proxy → target gain.

Every hook but ``active`` has a default that does nothing, so a strategy writes only what it has.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

from mutransfer._study_folder.records import TrialRecord
from mutransfer._sweep.context import StrategyRecord
from mutransfer._sweep.session import Made, Prepared, Session

#: a step of the sweep: the open study and what earlier steps made in, what it made out
Phase = Callable[[Session, Made], Made]


class Placement(NamedTuple):
    """Where a strategy's ``phase`` runs: ``after`` (or ``instead`` of) the core phase named ``anchor``
    (mutransfer._sweep.runner.CORE_PHASES: run_proxies, transfer_phase, coord_check_gate, train_target,
    log_model_phase, write_report). Several strategies after one anchor run in the registry's order."""

    anchor: str
    phase: Phase
    where: str = "after"


class CostShare(NamedTuple):
    """Training seconds a strategy adds to the report's critical path: ``search`` runs beside the proxies
    (divided by their concurrency), ``target`` after the target, one training after another."""

    search: float = 0.0
    target: float = 0.0


class ExtraCosts(NamedTuple):
    """Cost records (device_seconds, trainer_device_seconds, overhead_device_seconds, flops) of the trainings a
    strategy adds to μTransfer's side: ``search`` before the target (a ladder's rungs), ``target`` after it."""

    search: tuple[dict, ...] = ()
    target: tuple[dict, ...] = ()


def number(value, fmt: str = ".4g") -> str:
    """A number for the text report: '-' for None, 'nan' for a non-finite float."""
    if value is None:
        return "-"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan"
    return format(value, fmt) if isinstance(value, (int, float)) else str(value)


class Strategy(ABC):
    """A search strategy plugged into the sweep (see the module docstring for the hooks)."""

    #: its slot in ``Made.records``
    name: str = ""
    #: its key in the report JSON (always present: None when the strategy did not run)
    report_key: str = ""
    #: the CLI flag that asks for it when a study starts (a completed study cannot grow it), or None
    flag: str | None = None
    #: where its lines go in the text report: after the best proxy ("search") or after the target ("result")
    text_place: str = "result"
    #: what it would add, for the summary's "next" lines when it did not run (None: nothing to suggest)
    suggestion: str | None = None
    #: where its booked trainings count: on μTransfer's side of the ratios to direct tuning ("mutransfer"), or
    #: outside them: a check of the transfer ("check") or the direct side itself ("direct")
    cost_side: Literal["mutransfer", "check", "direct"] = "mutransfer"

    def cost_hint(self, report: dict) -> str | None:
        """What running it would cost, said beside its suggestion, from this study's report (None: not known)."""
        return None

    @abstractmethod
    def active(self, study: Prepared) -> bool:
        """Whether this study (``study.study``) and its options (``study.options``, ``study.state`` on resume) ask for
        it."""

    def prepare(self, study: Prepared) -> StrategyRecord | None:
        """Called at the end of ``prepare`` for every registered strategy: refuse bad options (UserInputError), or
        return a record known before any compute (None by default)."""
        return None

    def phases(self) -> tuple[Placement, ...]:
        """Its phases and where they run."""
        return ()

    def seed_trials(self, session: Session) -> list[tuple[dict, dict]]:
        """(configuration, provenance) of the first trials of the study's own search, handed out in place of samples
        (a warm start); the provenance goes to each trial's journal entry (user attribute ``mutransfer.seed``). None by
        default."""
        return []

    def trial_tags(self, study: Prepared) -> dict[str, dict[str, str]]:
        """Extra MLflow tags of the study's own search's trials, by trial key (a warm start: each warm trial's
        source)."""
        return {}

    def section(self, made: Made) -> Any:
        """Its report value (JSON-ready), None when it has no record."""
        return None

    def count_cost(self, compute: dict, section: Any) -> CostShare | None:
        """Add its trainings to the report's ``compute`` (μTransfer's side of the ratios) in its own words; what they
        add to the critical path. None (the default): its booked trainings are counted (``cost_side``)."""
        return None

    def extra_costs(self, session: Session, made: Made) -> ExtraCosts:
        """Its trainings as measured cost records (the direct baseline's μTransfer side)."""
        return ExtraCosts()

    def gain_source(
        self, section: Any, sections: dict, trials: list[TrialRecord], best: TrialRecord | None
    ) -> TrialRecord | None:
        """The proxy trial the target is compared with (``best``: the best proxy, or what an earlier strategy chose)."""
        return best

    def refine_gain(self, gain: dict, section: Any, best: TrialRecord) -> None:  # noqa: B027 - optional hook
        """Add to the report's ``proxy_to_target`` (e.g. the target's seed spread)."""

    def text_lines(self, section: Any, report: dict) -> list[str]:
        """Its lines of the text report (none without a section)."""
        return []

    def verdict(self, section: Any, report: dict) -> str | None:
        """Its finding in words for the summary's verdict (one sentence), None when it has none."""
        return None

    def html_section(self, section: Any) -> str:
        """Its section of the HTML page (mutransfer._reporting.html), "" for none; ``section`` is its report value,
        or its ``state.json`` record while the study runs."""
        return ""

    def metrics(self, section: Any, timestamp_ms: int) -> list[tuple]:
        """Metrics logged on the MLflow parent run with the report: (name, value, timestamp, step)."""
        return []


def run_phase(strategy: Strategy, phase: Phase) -> Phase:
    """``phase`` as the sweep runs it: only when ``strategy`` is active, its trainings booked under its name. A resumed
    study runs it again: a phase keeps what it made once with mutransfer._sweep._memo.remembered, and reads it back
    instead of making it again."""

    def step(session: Session, made: Made) -> Made:
        if not strategy.active(session):
            return made
        with session.executor.tagged(strategy.name):  # its trainings are booked as its own (mutransfer._sweep._ledger)
            return phase(session, made)

    step.__name__ = phase.__name__  # the hold points (mutransfer._sweep.holds) keep the phase's name
    return step
