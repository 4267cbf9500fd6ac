"""Top-k to the target (``search.top_k``, ``sweep --top-k N``): the N best proxies each trained at the target.

With ``top_k = N > 1`` the target phase (mutransfer._sweep.train_target) hands over to
:func:`train_top_k`: the N best proxy trials (:func:`candidates`, the ranking of
``pick_best``: completed trials by validation error, then pruned or diverged ones that
reported an error) are each rescaled by the μP rules (:func:`carry`, the one place a
candidate is transferred) and trained at the target with Ray Train, one after another,
each in ``<study dir>/targets/<trial key>/`` and under its own MLflow target run
(tags ``mutransfer.topk_rank``, ``mutransfer.proxy_trial``; the winner
``mutransfer.topk_winner = true``). The winner is the lowest target *validation* error (the test
error is reported, never compared); it
becomes ``made.trained`` (read as ``made.target``, ``made.target_run_id``) and ``made.transfer`` (the candidates:
``made.records["top_k"]``, :class:`TopK`), so the model, the
verification, the direct baseline and the report work on it as on a top-1 target.

Resume: each finished candidate is kept in ``state.json`` (``topk_targets``) as soon as
it finishes and its MLflow run id (``topk_run_ids``) before it starts, so a driver killed
during candidate 2 of 3 does not train candidate 1 again, and candidate 2 continues from
its own Ray Train checkpoint. Costs: every candidate's device-seconds and FLOPs count on
μTransfer's side (:func:`count_in_compute`, and mutransfer._sweep.baseline).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from mutransfer._study_folder.portable import resolved_path, stored_path
from mutransfer._study_folder.records import TrialRecord
from mutransfer._study_folder.state import REBUILD_HINT
from mutransfer._sweep.context import FinalSearch, SweepError, TrainedTarget, TransferResult, ranked
from mutransfer._sweep.cost import add_to_mutransfer, target_cost
from mutransfer._sweep.holds import hold_if_asked
from mutransfer._sweep.rescale import transfer
from mutransfer._sweep.session import Made, Session
from mutransfer._sweep.target import TargetOutcome
from mutransfer._sweep.train_target import TargetFit

#: the candidates' storage folders, under the study directory (top-1 keeps ``target/``)
TARGETS_DIR = "targets"
RANK_TAG = "mutransfer.topk_rank"
PROXY_TRIAL_TAG = "mutransfer.proxy_trial"
WINNER_TAG = "mutransfer.topk_winner"
#: hold point (mutransfer._sweep.holds) before each candidate after the first that is still to train
HOLD_POINT = "topk_next_candidate"
#: top-k's slot in ``Made.records`` (mutransfer._sweep.strategies.top_k)
NAME = "top_k"


@dataclass
class Candidate:
    """One proxy configuration carried to the target: its rank among the proxies and what the target made of it.

    Errors are relative L2 (proxy: validation; target: validation, which picks the winner, and test); ``device_seconds`` is Ray Train's wall time × the devices it held,
    ``trainer_device_seconds`` the trainer's own seconds × devices, ``flops`` the training FLOPs at the target.
    """

    rank: int
    trial_id: str  # the proxy trial's key (t0003)
    #: the proxy trial's validation error (its rank among the proxies)
    proxy_val_error: float | None
    hp: dict  # the transferred hyperparameters the target trained with
    record: dict  # the transfer record (mutransfer._sweep.rescale.transfer)
    #: what the target's training made of it
    outcome: TargetOutcome = field(repr=False)
    target_test_error: float | None = None
    #: the target's validation error: what the winner is chosen by (the test error is only reported)
    target_val_error: float | None = None
    status: str = ""
    epochs: int = 0
    device_seconds: float = 0.0
    trainer_seconds: float = 0.0
    trainer_device_seconds: float = 0.0
    flops: float | None = None
    mlflow_run_id: str | None = None
    winner: bool = False

    def row(self) -> dict:
        """The report's table row (JSON-ready)."""
        keys = (
            "rank",
            "trial_id",
            "proxy_val_error",
            "target_val_error",
            "target_test_error",
            "status",
            "epochs",
            "device_seconds",
            "trainer_seconds",
            "trainer_device_seconds",
            "flops",
            "mlflow_run_id",
            "winner",
            "hp",
        )
        return dict({k: getattr(self, k) for k in keys}, lr=self.hp.get("lr"))

    def as_dict(self, root: Path) -> dict:
        """For state.json: the row, the transfer record and the outcome (its checkpoint relative to ``root``)."""

        outcome = dict(self.outcome.as_dict(), checkpoint_dir=stored_path(self.outcome.checkpoint_dir, root))
        return dict(self.row(), record=self.record, outcome=outcome)

    @classmethod
    def from_dict(cls, d: dict, root: Path) -> Candidate:
        names = {f.name for f in dataclasses.fields(cls)}
        if "proxy_val_error" not in d:  # kept before validation splits: the proxy's error was its test error
            d = dict(d, proxy_val_error=d.get("proxy_test_error"))
        outcome = TargetOutcome.from_dict(d["outcome"])
        outcome.checkpoint_dir = resolved_path(outcome.checkpoint_dir, root)
        return cls(**{k: v for k, v in d.items() if k in names and k != "outcome"}, outcome=outcome)


def candidates(search: FinalSearch, n: int) -> list[TrialRecord]:
    """The ``n`` best trials of ``search`` (the last ladder rung, else the proxies; fewer when fewer reported an
    error)."""
    return ranked(search.trials)[:n]


def carry(search: FinalSearch, done: TransferResult | None, trial: TrialRecord) -> TransferResult:
    """A candidate's hyperparameters rescaled to the target by the μP rules (the one place top-k transfers); the
    transfer phase's result (``done``) is reused for the trial it was computed from, not computed again."""
    if done is not None and done.source_key == search.key(trial):
        return done
    record, hp = transfer(search.study, trial)  # from the last rung's size with a ladder
    return TransferResult(record, hp, source=trial, source_key=search.key(trial))


@dataclass
class TopK:
    """Top-k's record (``Made.records["top_k"]``): the candidates, best proxy first, the winner marked."""

    candidates: list[Candidate]
    root: Path  # the study directory: candidates' checkpoints are kept relative to it

    def as_dict(self) -> dict:
        """As ``state.json`` keeps it (key ``topk_targets``)."""
        return {"topk_targets": [c.as_dict(self.root) for c in self.candidates]}

    @classmethod
    def from_state(cls, state: dict, root: Path) -> TopK:
        return cls([Candidate.from_dict(d, root) for d in state.get("topk_targets") or []], root)

    def rows(self) -> list[dict]:
        """The report's table (``top_k``)."""
        return [c.row() for c in self.candidates]

    def others(self) -> list[Candidate]:
        """The candidates other than the winner (the winner is the report's target)."""
        return [c for c in self.candidates if not c.winner]


def choose_winner(cands: list[Candidate]) -> Candidate:
    """The lowest finite target **validation** error (a diverged or NaN target never wins unless all are); ties go
    to the better rank. The test error is never compared (a study made before validation splits has no
    validation error and compares test errors, as it did)."""

    def key(c: Candidate):
        e = c.target_val_error if c.target_val_error is not None else c.target_test_error
        finite = e is not None and math.isfinite(e) and c.status != "diverged"
        return (not finite, e if finite else 0.0, c.rank)

    return min(cands, key=key)


#: fit(session, the training, remember_run) -> (its outcome, its MLflow run id): mutransfer._sweep.train_target.fit_target
Fit = Callable[[Session, TargetFit, Callable[[str], None]], tuple[TargetOutcome, str]]


def train_top_k(session: Session, made: Made, fit: Fit) -> Made:
    """Train each candidate at the target (``fit``: mutransfer._sweep.train_target.fit_target), pick the winner;
    ``made`` with top-k's record, and the winner as its target (``made.trained``) and transfer (``made.transfer``)."""

    root, n = session.study_dir.root, session.study.search.top_k
    search = made.final(session.study)
    picked = candidates(search, n)
    if len(picked) < n:
        session.say(
            f"top-k: only {len(picked)} trial(s) reported an error; carrying {len(picked)} to the target, not {n}"
        )
    done = {d["trial_id"]: Candidate.from_dict(d, root) for d in session.state.get("topk_targets") or []}
    run_ids = dict(session.state.get("topk_run_ids") or {})
    shape = tuple(session.data.train_x.shape[1:])
    out: list[Candidate] = []
    for rank, trial in enumerate(picked, 1):
        key = search.key(trial)  # r<n>-tNNNN for a ladder's last rung (rung keys restart at t0000)
        if key in done:  # trained in an earlier session: not again
            out.append(done[key])
            continue
        if rank > 1:
            hold_if_asked(root, HOLD_POINT)  # fault tests only (MUTRANSFER_HOLD_AT)
        transfer = carry(search, made.made_transfer, trial)

        def remember(run_id: str, key: str = key) -> None:
            run_ids[key] = run_id
            session.update_state(topk_run_ids=dict(run_ids))

        tags = {
            RANK_TAG: str(rank),
            PROXY_TRIAL_TAG: key,
            "mlflow.runName": f"{session.study.name} target (top-k rank {rank}, proxy trial {key})",
        }
        job = TargetFit(
            transfer,
            key,
            root / TARGETS_DIR / key,
            run_ids.get(key),
            tags,
            f"target {rank}/{len(picked)} (proxy trial {key})",
        )
        outcome, run_id = fit(session, job, remember)
        cost = target_cost(session.study, outcome, shape)
        out.append(
            Candidate(
                rank,
                key,
                trial.val_error,
                transfer.hp,
                transfer.record,
                outcome,
                target_test_error=outcome.test_error,
                target_val_error=outcome.val_error,
                status=outcome.status,
                epochs=outcome.epochs,
                device_seconds=cost["device_seconds"],
                trainer_seconds=outcome.trainer_seconds,
                trainer_device_seconds=cost["trainer_device_seconds"],
                flops=cost["flops"],
                mlflow_run_id=run_id,
            )
        )
        session.update_state(topk_targets=[c.as_dict(root) for c in out])  # kept as soon as it finished
    return _crown(session, made, out)


def _crown(session: Session, made: Made, cands: list[Candidate]) -> Made:
    """Mark the winner (state, MLflow tags) and hand it to the phases after the target."""
    winner = choose_winner(cands)
    for c in cands:
        c.winner = c is winner
        if c.mlflow_run_id is not None:
            session.tracker.set_tags(c.mlflow_run_id, {WINNER_TAG: "true" if c.winner else "false"})
    root = session.study_dir.root
    if winner.mlflow_run_id is None:  # every candidate is trained in a run; a record without one is damaged
        raise SweepError(f"top-k: the winner, proxy trial {winner.trial_id}, names no MLflow run; {REBUILD_HINT}")
    stored = winner.as_dict(root)["outcome"]
    session.update_state(
        topk_targets=[c.as_dict(root) for c in cands], target_run_id=winner.mlflow_run_id, target_outcome=stored
    )
    session.say(
        f"top-k: the winner is proxy trial {winner.trial_id} (rank {winner.rank}), "
        f"target test error {winner.target_test_error:.4g}"
    )
    return replace(
        made.with_record(NAME, TopK(cands, root)),
        trained=TrainedTarget(winner.outcome, winner.mlflow_run_id),
        made_transfer=TransferResult(winner.record, winner.hp, None, winner.trial_id),
    )


def count_in_compute(compute: dict, rows: list[dict]) -> None:
    """Add the top-k totals to the report's ``compute`` and count the candidates other than the winner (the
    winner is the report's target, already counted) on μTransfer's side of the cost ratios and the critical path."""
    sequential = count_top_k(compute, rows)
    if compute.get("trainer_seconds_critical_path") is not None:  # the candidates train one after another
        compute["trainer_seconds_critical_path"] += sequential
        wall = compute.get("sweep_wall_seconds")
        if wall:
            compute["overhead_share"] = max(0.0, 1.0 - compute["trainer_seconds_critical_path"] / wall)


def count_top_k(compute: dict, rows: list[dict]) -> float:
    """:func:`count_in_compute` but the critical path: returns the other candidates' trainer seconds, which run
    one after another after the target (the report adds them to its critical path)."""

    others = [r for r in rows if not r["winner"]]
    flops = [r["flops"] for r in rows]
    compute["top_k_targets"] = len(rows)
    compute["top_k_device_seconds"] = sum(r["device_seconds"] for r in rows)
    compute["top_k_trainer_device_seconds"] = sum(r["trainer_device_seconds"] for r in rows)
    compute["top_k_flops"] = None if None in flops else sum(flops)
    extra_flops = None if any(r["flops"] is None for r in others) else sum(r["flops"] for r in others)
    add_to_mutransfer(compute, extra_flops, sum(r["trainer_device_seconds"] for r in others))
    return sum(r["trainer_seconds"] for r in others)


def winner_proxy(trials: list[TrialRecord], rows: list[dict], default: TrialRecord | None) -> TrialRecord | None:
    """The proxy trial whose configuration won at the target (``default`` when no row is marked the winner)."""
    key = next((r["trial_id"] for r in rows if r["winner"]), None)
    return next((t for t in trials if t.trial_id == key), default)


def topk_metrics(rows: list[dict] | None, timestamp_ms: int) -> list[tuple]:
    """The parent run's top-k metrics: ``topk_<rank>_target_error`` (test), ``topk_<rank>_target_val_error`` and
    ``topk_winner_rank``."""
    if not rows:
        return []
    out = [
        (f"topk_{r['rank']}_target{suffix}_error", r[key], timestamp_ms, 0)
        for r in rows
        for suffix, key in (("", "target_test_error"), ("_val", "target_val_error"))
        if r.get(key) is not None
    ]
    return out + [("topk_winner_rank", r["rank"], timestamp_ms, 0) for r in rows if r["winner"]]


def topk_lines(rows: list[dict] | None, compute: dict) -> list[str]:
    """The text report's top-k table."""
    if not rows:
        return []

    def g(v, fmt=".4g"):
        return "-" if v is None else format(v, fmt)

    win = next((r for r in rows if r["winner"]), None)
    lines = [
        "",
        f"top-k: the {len(rows)} best proxy configurations trained at the target; the winner has the "
        f"lowest target validation error"
        + (f": proxy trial {win['trial_id']} (rank {win['rank']}), the target and transfer table above" if win else ""),
        f"  {'rank':>4}  {'proxy trial':<11}  {'proxy val':>11}  {'transferred lr':>14}  {'target val':>12}  "
        f"{'target test':>12}  {'device-s':>8}",
    ]
    for r in rows:
        lines.append(
            f"  {r['rank']:>4}  {r['trial_id']:<11}  {g(r.get('proxy_val_error', r.get('proxy_test_error'))):>11}  "
            f"{g(r['lr'], '.3g'):>14}  {g(r.get('target_val_error')):>12}  {g(r['target_test_error']):>12}  "
            f"{g(r['device_seconds'], '.1f'):>8}" + ("  winner" if r["winner"] else "")
        )
    lines.append(
        f"  all {len(rows)} target trainings: {g(compute.get('top_k_device_seconds'), '.1f')} device-s, "
        f"{g(compute.get('top_k_flops'), '.3g')} FLOPs (counted in muTransfer's cost)"
    )
    return lines
