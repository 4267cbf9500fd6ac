"""Where a study's wall time went that was not training: each fixed overhead measured on its own.

A study's wall time splits into (seconds, this session's clock):

- ``setup``: before the first proxy: loading the data, starting Ray, the MLflow parent run;
- ``trial_startup``: per proxy trial, its span (from Tune's ``on_trial_start`` to its end, on
  the driver's clock) minus its trainer time, summed over trials and divided by the trials
  run at a time. Tune calls ``on_trial_start`` once the trial's actor runs, so this holds
  what follows and what the trainer's clock leaves out (building the model and the optimizer,
  the per-epoch checkpoints, ``history.json`` and reports to Tune): 0.33-0.40 s per trial on
  the default study (docs/results/table1_v3_quick_cheap_3seeds.json);
- ``proxy_scheduling``: the rest of the proxy phase: the trial actors' start (a new Python
  process, imports), Tune's driver loop, the searcher, idle slots;
- ``target_startup``: the target's wall time on Ray, from the order to train, minus its trainer
  time (one CPU worker: its actor's imports and model; several workers or a GPU: Ray Train's worker group, the
  process group, checkpoints reported to Ray Train, shutting down);
  a target started while the last proxies trained (``target.start_early``) had started
  ``target_head_start`` seconds before its order: that part ran beside the proxies and is not
  counted again;
- ``other``: the wall time outside those three phases: the transfer, the coordinate-check
  gate, a ladder's rungs, top-k's other candidates, ``--verify`` and ``--baseline`` trainings,
  the report and the MLflow model (and the setup of earlier sessions of a resumed study);

and the trainer time on the critical path. ``fixed_share`` = (setup + trial start-up +
scheduling + target start-up) / wall: the overhead the issue "Proxies that pay" asks to keep
at ≤ 10 % of the default study's wall time.
"""

from __future__ import annotations

from collections.abc import Sequence

from mutransfer._study_folder.records import TrialRecord


def overheads(
    trials: Sequence[TrialRecord],
    *,
    concurrency: int,
    setup_seconds: float | None,
    proxy_phase_seconds: float | None,
    target_wall_seconds: float | None,
    target_trainer_seconds: float | None,
    wall_seconds: float | None,
    target_head_start_seconds: float = 0.0,
) -> dict[str, float] | None:
    """The overheads above, in seconds, with ``fixed_seconds`` and ``fixed_share``; None without the phase times."""
    if not wall_seconds or setup_seconds is None or proxy_phase_seconds is None:
        return None
    lanes = max(1, concurrency)
    seen = [t for t in trials if t.span_seconds]  # trials whose start the driver saw
    startup = sum(max(0.0, t.span_seconds - t.trainer_seconds) for t in seen)
    trials_wall = sum(max(t.span_seconds, t.wall_seconds) for t in trials)
    out = {
        "setup_seconds": setup_seconds,
        "trial_startup_seconds": startup / lanes,
        "trial_startup_mean_seconds": startup / max(1, len(seen)),
        "proxy_scheduling_seconds": max(0.0, proxy_phase_seconds - trials_wall / lanes),
        "target_startup_seconds": max(0.0, (target_wall_seconds or 0.0) - (target_trainer_seconds or 0.0)),
        "target_head_start_seconds": target_head_start_seconds,
        "other_seconds": max(0.0, wall_seconds - setup_seconds - proxy_phase_seconds - (target_wall_seconds or 0.0)),
    }
    fixed = sum(
        out[k] for k in ("setup_seconds", "trial_startup_seconds", "proxy_scheduling_seconds", "target_startup_seconds")
    )
    out["fixed_seconds"] = fixed
    out["fixed_share"] = fixed / wall_seconds
    return out


def describe(o: dict[str, float]) -> str:
    """One line of the text report: each overhead in seconds and the fixed part's share of the wall time."""
    return (
        f"fixed overhead {o['fixed_seconds']:.1f} s = {100 * o['fixed_share']:.0f}% of the wall time: setup "
        f"{o['setup_seconds']:.1f} s (data, MLflow, Ray where it starts), proxy phase outside the trainers "
        f"{o['trial_startup_seconds'] + o['proxy_scheduling_seconds']:.1f} s (the trials' start and scheduling), "
        f"target start-up {o['target_startup_seconds']:.1f} s (outside its trainer: its start, checkpoints"
        f"{_head_start(o)}); "
        f"other phases {o['other_seconds']:.1f} s"
    )


def _head_start(o: dict[str, float]) -> str:
    head = o.get("target_head_start_seconds") or 0.0
    return f", after {head:.1f} s started beside the last proxies" if head > 0 else ""
