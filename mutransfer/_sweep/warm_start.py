"""An earlier study's finished proxy trials, read back as typed records (``sweep --warm-start STUDY``).

``STUDY`` is found in this order:

1. a study folder: a path holding ``study.yaml`` and its trials in ``optuna.journal``, as a sweep writes them
   (mutransfer._sweep.plan), or in ``trials/<key>/config.json`` + ``outcome.json`` (a folder of format 1);
2. ``<runs dir>/<STUDY>/`` when it holds ``study.yaml``;
3. the tracking store: the study's MLflow parent run (tags ``mutransfer.kind = study``,
   ``mutransfer.study = STUDY``; the newest one if there are several), its parameters
   (problem, operator, sizes, ``search.space``) and its ``proxy_trial`` child runs
   (params ``hp.<name>``, metric ``final_val_error`` — ``final_test_error`` before validation splits —, tag ``mutransfer.status``).

Nothing is created: a sqlite store that does not exist is not opened. Everything read is
JSON, YAML (``safe_load``) or MLflow's own records; no file is unpickled.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from mutransfer._study_folder.portable import read_study_file
from mutransfer._study_folder.state import JOURNAL_FILE, StudyDir
from mutransfer._sweep._migrate import CONFIG_FILE, OUTCOME_FILE
from mutransfer._sweep._outcome import Outcome, trial_key
from mutransfer._sweep._trial_journal import read_journal
from mutransfer._tracking._sqlite_file import sqlite_path
from mutransfer._tracking.runs import KIND_TAG, STATUS_TAG, STUDY_TAG, SUPERSEDED_TAG, TRIAL_ID_TAG, Tracker
from mutransfer.errors import UserInputError


@dataclass(frozen=True)
class SourceTrial:
    """One trial of the source study: its key, its searched configuration, its last validation error (a study made
    before validation splits: its test error), its status."""

    key: str
    config: dict
    val_error: float | None
    status: str  # completed | pruned | diverged | failed

    @property
    def usable(self) -> bool:
        """It ran the full budget and reported a finite error."""
        return self.status == "completed" and self.val_error is not None and math.isfinite(self.val_error)


@dataclass(frozen=True)
class SourceStudy:
    """The source study: what it solved, at which proxy size its trials ran, and its trials.

    ``proxy_K``: Fourier modes of its proxies (None for operators without modes);
    ``proxy_width``: their width. ``location``: the folder or the tracking URI it was read from.
    """

    name: str
    problem: str
    operator: str
    parametrization: str | None
    proxy_K: int | None
    proxy_width: int | None
    location: str
    kind: str  # folder | tracking
    trials: tuple[SourceTrial, ...]

    def best(self, n: int) -> list[SourceTrial]:
        """The ``n`` completed trials with the lowest validation error (ties: the earlier key)."""
        return sorted((t for t in self.trials if t.usable), key=lambda t: (t.val_error, t.key))[: max(0, n)]

    def size_text(self) -> str:
        parts = [f"K={self.proxy_K}"] if self.proxy_K is not None else []
        if self.proxy_width is not None:
            parts.append(f"width {self.proxy_width}")
        return " ".join(parts) or "-"


def load_source(spec: str, *, runs_dir: str | None, tracking_uri: str, factory_dir: str | None = None) -> SourceStudy:
    """The study named or located by ``spec`` (see the module docstring); UserInputError naming where it looked.
    ``factory_dir``: where this study's own factory was found (beside its --study file): a source folder naming a
    factory may import it from there too, as from the working directory."""

    if not spec.strip():
        raise UserInputError("--warm-start: empty; give a study folder or a study name")
    path = Path(spec).expanduser()
    if (path / "study.yaml").is_file():
        return read_folder(path, factory_dir)
    by_name = StudyDir.for_study(spec, runs_dir).root if _plain_name(spec) else None
    if by_name is not None and (by_name / "study.yaml").is_file():
        return read_folder(by_name, factory_dir)
    found = read_tracking(spec, tracking_uri) if _plain_name(spec) else None
    if found is not None:
        return found
    places = [f"no folder {path.absolute()} with a study.yaml"]
    if by_name is not None:
        places.append(f"none at {by_name}")
        places.append(f"no study {spec!r} in the tracking store {tracking_uri}")
    raise UserInputError(
        f"--warm-start {spec}: no such study ({'; '.join(places)}); pass a study folder, a study name of --runs-dir, "
        "or the --tracking-uri of the store that holds it"
    )


def _plain_name(spec: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", spec))  # fullmatch: "$" would let "name\n" through


# --------------------------------------------------------------------------- a study folder


def read_folder(root: Path, factory_dir: str | None = None) -> SourceStudy:
    """A study folder's study (study.yaml) and its trials (its Optuna journal, or for a folder written before the
    journal held them in full, trials/<key>/config.json + outcome.json); a factory it names is imported from
    ``factory_dir`` (this study's) or the working directory."""

    sdir = StudyDir(root)
    search = (Path(factory_dir), Path.cwd()) if factory_dir else ()
    try:
        study = read_study_file(sdir, search)
    except UserInputError as exc:
        raise UserInputError(f"--warm-start {root}: its study.yaml does not read ({exc})") from None
    trials = []
    held = read_journal(sdir.root / JOURNAL_FILE, study.name)
    if held is not None:  # its Optuna journal holds every trial in full (mutransfer._sweep._trial_journal)
        for index, h in sorted(held.items()):
            if h.status is not None:  # handed out but not finished: nothing to learn from it
                result = Outcome(h.status, dict(h.metrics), h.error)
                trials.append(SourceTrial(trial_key(index), dict(h.config), result.value, result.status))
    directories = sorted(sdir.trials_dir.iterdir()) if held is None and sdir.trials_dir.is_dir() else []
    for directory in directories:  # a study folder written before its journal held them: its trial files
        config, outcome = _json(directory / CONFIG_FILE), _json(directory / OUTCOME_FILE)
        if not isinstance(config, dict) or not isinstance(outcome, dict) or "status" not in outcome:
            continue  # handed out but not finished: nothing to learn from it
        result = Outcome.from_dict(outcome)
        trials.append(SourceTrial(directory.name, config, result.value, result.status))
    return SourceStudy(
        name=study.name,
        problem=study.problem.name,
        operator=study.operator.type,
        parametrization=study.scaling()["parametrization"],
        proxy_K=study.proxy_modes,
        proxy_width=int(study.operator.width),
        location=str(sdir.root),
        kind="folder",
        trials=tuple(trials),
    )


def _json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None


# --------------------------------------------------------------------------- the tracking store


def read_tracking(name: str, uri: str) -> SourceStudy | None:
    """The study ``name`` from its MLflow parent run and proxy_trial child runs; None when the store has none."""

    path = sqlite_path(uri)
    if path is not None and not path.is_file():
        return None  # opening it would create it
    tracker = Tracker(uri)
    experiments = [e.experiment_id for e in tracker.client.search_experiments()]
    if not experiments:
        return None
    parents = tracker.client.search_runs(
        experiments,
        filter_string=f"tags.`{KIND_TAG}` = 'study' and tags.`{STUDY_TAG}` = '{name}'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    if not parents:
        return None
    parent = parents[0]
    p = parent.data.params
    space = _param(p.get("search.space"))
    searched = list(space) if isinstance(space, dict) else []
    trials = []
    for run in tracker.children(parent.info.experiment_id, parent.info.run_id, "proxy_trial"):
        tags = run.data.tags
        if tags.get(SUPERSEDED_TAG) == "true" or TRIAL_ID_TAG not in tags:
            continue
        config = {k: _param(run.data.params[f"hp.{k}"]) for k in searched if f"hp.{k}" in run.data.params}
        error = run.data.metrics.get("final_val_error", run.data.metrics.get("final_test_error"))  # older: test
        trials.append(
            SourceTrial(
                tags[TRIAL_ID_TAG], config, None if error is None else float(error), tags.get(STATUS_TAG, "failed")
            )
        )
    trials.sort(key=lambda t: t.key)
    return SourceStudy(
        name=name,
        problem=str(p.get("problem")),
        operator=str(p.get("operator")),
        parametrization=_param(p.get("parametrization")),
        proxy_K=_int(p.get("proxy_K")),
        proxy_width=_int(p.get("proxy_width")),
        location=uri,
        kind="tracking",
        trials=tuple(trials),
    )


def _param(text):
    """An MLflow param back to its value: JSON where it parses ("0.01", "20", "{...}"), "None" -> None, else the text."""
    if text is None or text == "None":
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _int(text) -> int | None:
    value = _param(text)
    return int(value) if isinstance(value, (int, float)) else None
