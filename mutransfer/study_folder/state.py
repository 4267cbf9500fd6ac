"""The per-study directory: ``<runs>/<study name>/``.

Layout::

    study.yaml          the resolved study (overrides applied) this directory belongs to
    state.json          phase (proxies|target|done), MLflow ids, search_window, proxy records, report
    trials/<key>/       one proxy trial (key t0000, t0001, … in hand-out order, mutransfer.sweep.plan):
                        config.json (its configuration), outcome.json (how it ended), the trainer
                        checkpoint, history.json (its EpochRecords), done.json, executions.jsonl
    costs.jsonl         one JSON line per training run (mutransfer.sweep._ledger), appended by the executor
    tune/run-<n>/       the Ray Tune experiment of the n-th session (written by Tune, never read back)
    target/             Ray Train run of the target: checkpoint_manager_snapshot.json (JSON, read
                        by Ray Train on a re-run) and checkpoint folders (checkpoint.pt, read with
                        weights_only=True; summary.json)
    faults/             markers of the fault-injection hook (MUTRANSFER_FAIL_TRIALS)
    report.json/.txt    the transfer report, once the study is done

Resuming reads JSON and ``weights_only`` checkpoints only: no file of this folder is
unpickled, so a file planted in it cannot run code. state.json is rewritten atomically
(temp file + rename), so a killed driver leaves either the old or the new state, never
a torn file; so are config.json and outcome.json.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mutransfer.atomic import atomic_path
from mutransfer.errors import UserInputError

DEFAULT_RUNS_DIR = "mutransfer-runs"
STATE_VERSION = 1


class StudyDir:
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).absolute()

    @classmethod
    def for_study(cls, name: str, runs_dir: str | os.PathLike | None = None) -> StudyDir:
        return cls(Path(runs_dir or DEFAULT_RUNS_DIR) / name)

    # ---- paths ---------------------------------------------------------------------
    @property
    def study_file(self) -> Path:
        return self.root / "study.yaml"

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def tune_dir(self) -> Path:
        return self.root / "tune"

    @property
    def trials_dir(self) -> Path:
        return self.root / "trials"

    @property
    def faults_dir(self) -> Path:
        return self.root / "faults"

    def trial_dir(self, trial_id: str) -> Path:
        return self.trials_dir / trial_id

    def exists(self) -> bool:
        return self.root.exists()

    # ---- state ---------------------------------------------------------------------
    def read_state(self) -> dict:
        if not self.state_file.exists():
            return {}
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            raise UserInputError(
                f"study directory {self.root}: state.json is unreadable; delete the directory or pass a new --name"
            ) from None

    def write_state(self, state: dict) -> None:
        state = dict(state, version=STATE_VERSION)
        write_atomic(self.state_file, json.dumps(state, indent=2, default=str))

    def update_state(self, **changes) -> dict:
        state = self.read_state()
        state.update(changes)
        self.write_state(state)
        return state


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
