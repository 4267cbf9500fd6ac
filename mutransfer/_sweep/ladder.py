"""The model-size ladder (``ladder: [4, 8, 16]``): the proxies' best, promoted rung by rung towards the target.

Rung 0 is the proxy search itself (mutransfer._sweep.proxies, at the ladder's first
size). For each later size, the best ``ladder_keep`` fraction of the previous rung's
trials (ranked like the winner: trials that ran the full budget by final test error,
then the rest; at least one) is promoted: the same searched hyperparameters, rescaled by
the μP rule from the previous size to this one (operators.transfer; under μP the models
apply c(K) and the width multipliers themselves, so the master values carry over and
the record states the effective factors), trained again for ``budget.epochs`` at the new
size with the same training seed. Every trial of a rung runs the full budget (no ASHA:
the rung is the promotion). The last rung's best goes to the target
(mutransfer._sweep.rescale.transfer_phase rescales it from the last rung's size).

Each rung ≥ 1 is a nested search (mutransfer._sweep.nested) over ``<study dir>/rungs/r<n>``
on Ray Tune, its trials child runs of an MLflow run of kind ``ladder_rung`` (tag
``mutransfer.rung``), itself a child of the study's parent run; rung 0's trials carry
``mutransfer.rung = 0``. A finished rung is kept in ``state.json`` (``ladder``), so a
resumed study re-runs no finished rung, and the rung in progress continues from its own
trials' JSON files and checkpoints. Returns what the sweep made with its record (``made.records["ladder"]``,
:class:`LadderResults`) and ``made.final_search`` (the last rung, which the transfer and top-k draw from).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field, replace

from mutransfer._study.ladder import LadderSize, keep_count, rung_study, step_study, target_size
from mutransfer._study_folder.records import TrialRecord
from mutransfer._sweep.baseline import trials_cost
from mutransfer._sweep.context import FinalSearch, ProxyResults, ranked
from mutransfer._sweep.holds import hold_if_asked
from mutransfer._sweep.nested import Search, run_search
from mutransfer._sweep.proxies import RUNG_TAG
from mutransfer._sweep.rescale import transfer
from mutransfer._sweep.session import Made, Session
from mutransfer._tracking.runs import log_batch

#: the ladder's slot in ``Made.records`` (mutransfer._sweep.strategies.ladder)
NAME = "ladder"


@dataclass
class RungResult:
    """One rung: its size, its trials, which of them go on (``promoted``), where they came from, and its cost.

    ``parents``: this rung's trial key -> the previous rung's trial it was promoted from (rung ≥ 1).
    ``lr_factor``: the μP factor of the effective LR from the previous size (operators.transfer).
    ``cost``: device_seconds, trainer_device_seconds, overhead_device_seconds, flops, trials, epochs.
    """

    rung: int
    K: int | None
    width: int
    trials: list[TrialRecord]
    promoted: list[str]
    parents: dict[str, str] = field(default_factory=dict)
    lr_factor: float | None = None
    cost: dict = field(default_factory=dict)
    seconds: float = 0.0
    run_id: str | None = None

    @property
    def size(self) -> LadderSize:
        return LadderSize(self.K, self.width)

    @property
    def best(self) -> TrialRecord:
        return ranked(self.trials)[0]

    def as_dict(self) -> dict:
        return dict(dataclasses.asdict(self), trials=[t.as_dict() for t in self.trials])

    @classmethod
    def from_dict(cls, d: dict) -> RungResult:
        return cls(**dict(d, trials=[TrialRecord.from_dict(t) for t in d["trials"]]))

    def summary(self) -> dict:
        """The rung as the report shows it: size, trials, kept, best error, cost, and each trial's lineage."""
        best = self.best
        return {
            "rung": self.rung,
            "K": self.K,
            "width": self.width,
            "model": self.size.text(),
            "trials": len(self.trials),
            "kept": len(self.promoted),
            "promoted": list(self.promoted),
            "best_trial_id": best.trial_id,
            "best_error": best.val_error,
            "best_config": best.config,
            "lr_factor_from_previous": self.lr_factor,
            "cost": dict(self.cost),
            "seconds": self.seconds,
            "mlflow_run_id": self.run_id,
            "table": [
                {
                    "trial_id": t.trial_id,
                    "from": self.parents.get(t.trial_id),
                    "config": t.config,
                    "val_error": t.val_error,
                    "status": t.status,
                    "epochs": t.epochs,
                    "device_seconds": t.device_seconds,
                }
                for t in self.trials
            ],
        }


@dataclass
class LadderResults:
    """Every rung, proxy first, and the ladder's keep fraction."""

    rungs: list[RungResult]
    keep: float

    @property
    def last(self) -> RungResult:
        return self.rungs[-1]

    def summaries(self) -> list[dict]:
        return [r.summary() for r in self.rungs]

    def extra_cost(self) -> list[dict]:
        """The cost of the rungs above the proxies (rung 0's is the proxy search's, counted as such)."""
        return [r.cost for r in self.rungs[1:]]

    def as_dict(self) -> dict:
        """The rungs above the proxies as ``state.json`` keeps them (key ``ladder``; rung 0 is the proxy search)."""
        return {"ladder": [r.as_dict() for r in self.rungs[1:]], "keep": self.keep}

    def final_search(self, study) -> FinalSearch:
        """The last rung as the search the target draws from: its trials, transferred from its size to the target."""
        last = self.last
        prefix = "" if last.rung == 0 else f"r{last.rung}-"  # rung keys restart at t0000
        return FinalSearch(last.trials, last.best, step_study(study, last.size, target_size(study)), prefix)


def _promote(trials: list[TrialRecord], study, last: bool) -> list[str]:
    """The keys a rung passes on: its best ``ladder_keep`` to the next rung; from the last rung, its best
    ``search.top_k`` to the target."""
    order = ranked(trials)
    n = study.search.top_k if last else keep_count(len(trials), study.ladder_keep, len(order))
    return [t.trial_id for t in order[:n]]


def rung_zero(session: Session, proxies: ProxyResults, size: LadderSize, last: bool) -> RungResult:
    """The proxy search (``proxies``) as the ladder's first rung."""

    trials = proxies.trials
    cost = trials_cost(session.study, trials, at_target=False, input_shape=tuple(session.data.train_x.shape[1:]))
    return RungResult(
        0,
        size.K,
        size.width,
        trials,
        _promote(trials, session.study, last),
        cost=cost,
        seconds=proxies.seconds,
        run_id=session.parent_id,
    )


def climb_ladder(session: Session, made: Made) -> Made:
    """With ``ladder``: run (or continue) the rungs above the proxies; ``made`` with its record and
    ``made.final_search``."""
    study = session.study
    sizes = study.ladder_sizes()
    if not sizes:
        return made
    stored = {int(d["rung"]): RungResult.from_dict(d) for d in session.state.get("ladder") or []}
    rungs = [rung_zero(session, made.proxies, sizes[0], last=len(sizes) == 1)]
    if len(stored) < len(sizes) - 1:
        session.say(
            "ladder: " + " -> ".join(s.text() for s in sizes) + f" -> target {target_size(study).text()}, "
            f"keeping the best {study.ladder_keep:g} of each rung"
        )
    for r, size in enumerate(sizes[1:], start=1):
        rung = stored.get(r)
        if rung is None:
            hold_if_asked(session.study_dir.root, f"rung_{r}")  # fault tests only (MUTRANSFER_HOLD_AT)
            rung = run_rung(session, r, size, rungs[-1], last=r == len(sizes) - 1)
            session.update_state(ladder=[x.as_dict() for x in rungs[1:]] + [rung.as_dict()])
        rungs.append(rung)
    ladder = LadderResults(rungs, study.ladder_keep)
    return replace(made.with_record(NAME, ladder), final_search=ladder.final_search(study))


def run_rung(session: Session, r: int, size: LadderSize, previous: RungResult, last: bool) -> RungResult:
    """Train ``previous``'s promoted trials at ``size`` (a nested Tune search over preset configurations)."""

    study = session.study
    by_key = {t.trial_id: t for t in previous.trials}
    parents = [by_key[k] for k in previous.promoted]
    record, _ = transfer(step_study(study, previous.size, size), parents[0])
    search = Search(
        session.study_dir.root / "rungs" / f"r{r}",
        rung_study(study, size),
        kind="ladder_rung",
        run_name=f"{study.name} rung {r} ({size.text()})",
        preset=tuple(dict(p.config) for p in parents),
        label=f"rung {r}",
        trial_tags={RUNG_TAG: str(r)},
        params={
            "rung": r,
            "K": size.K,
            "width": size.width,
            "promoted_from": ",".join(previous.promoted),
            "transfer.lr_factor": record["lr_factor"],
        },
    )
    session.say(
        f"rung {r}: the best {len(parents)} of rung {r - 1} ({previous.size.text()}) at {size.text()}, "
        f"effective LR x{record['lr_factor']:.3g} by muP ..."
    )
    found = run_search(session, search)
    trials = found.trials
    cost = trials_cost(search.study, trials, at_target=True, input_shape=tuple(session.data.train_x.shape[1:]))
    rung = RungResult(
        r,
        size.K,
        size.width,
        trials,
        _promote(trials, study, last),
        parents={t.trial_id: p.trial_id for t, p in zip(trials, parents)},
        lr_factor=record["lr_factor"],
        cost=cost,
        seconds=found.seconds,
        run_id=found.run_id,
    )
    now, logged = (
        int(time.time() * 1000),
        session.tracker.client.get_run(found.run_id).data.metrics,
    )  # a resumed rung logs once
    log_batch(
        session.tracker.client,
        found.run_id,
        metrics=[
            (name, value, now, 0)
            for name, value in (
                ("best_error", rung.best.val_error),
                ("kept", len(rung.promoted)),
                ("device_seconds", cost["device_seconds"]),
                ("flops", cost["flops"]),
            )
            if value is not None and name not in logged
        ],
        tags={"mutransfer.status": "done"},
    )
    session.tracker.set_status(found.run_id, "FINISHED")
    return rung


def rung_lines(rungs: list[dict] | None) -> list[str]:
    """The report's ladder table (from :meth:`RungResult.summary`)."""
    if not rungs:
        return []

    def g(v, fmt=".4g"):
        return "-" if v is None else format(v, fmt)

    lines = [
        "",
        "model-size ladder (rung 0 = the proxies; each rung's best go on, rescaled by muP):",
        f"  {'rung':<5}{'size':<16}{'trials':>7}{'kept':>6}{'best error':>12}{'best trial':>12}{'LR factor':>11}"
        f"{'device-s':>10}{'FLOPs':>10}",
    ]
    for r in rungs:
        c = r.get("cost") or {}
        lines.append(
            f"  {r['rung']:<5}{r['model']:<16}{r['trials']:>7}{r['kept']:>6}{g(r['best_error']):>12}"
            f"{r['best_trial_id']:>12}{g(r['lr_factor_from_previous'], '.3g'):>11}"
            f"{g(c.get('device_seconds'), '.1f'):>10}{g(c.get('flops'), '.3g'):>10}"
        )
    last = rungs[-1]
    origin = next((row["from"] for row in last.get("table", []) if row["trial_id"] == last["best_trial_id"]), None)
    came = f", promoted from rung {last['rung'] - 1}'s {origin}" if origin else ""
    lines.append(
        f"  the target trains rung {last['rung']}'s best ({last['best_trial_id']}{came})"
        if len(last["promoted"]) < 2
        else f"  the target trains rung {last['rung']}'s best {len(last['promoted'])} ({', '.join(last['promoted'])}; --top-k)"
    )
    return lines


def rung_metrics(rungs: list[dict] | None) -> list[tuple[str, float]]:
    """The MLflow parent run's metrics of a ladder: rung<r>_{best_error,trials,kept,device_seconds,flops}."""
    out = []
    for r in rungs or []:
        c = r.get("cost") or {}
        for name, value in (
            ("best_error", r["best_error"]),
            ("trials", r["trials"]),
            ("kept", r["kept"]),
            ("device_seconds", c.get("device_seconds")),
            ("flops", c.get("flops")),
        ):
            if value is not None:
                out.append((f"rung{r['rung']}_{name}", float(value)))
    return out
