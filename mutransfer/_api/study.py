"""The Python API's study: :func:`create_study`, :func:`load_study` and :class:`Study`, shaped after Optuna's.

A :class:`Study` runs the same phases as ``mutransfer sweep`` (mutransfer._sweep.runner.sweep_steps), one step at a
time: :meth:`Study.optimize` the proxy search, :meth:`Study.transfer` the μP rescaling, :meth:`Study.train_target`
the target, :meth:`Study.report` the rest. Between calls it holds the study's lock, its executor's session (Ray, for
the Ray executor) and the MLflow parent run; :meth:`Study.close` (or ``with``) releases them, and a study closed
before its end continues where it stopped when it is loaded again.
"""

from __future__ import annotations

import atexit
import contextlib
import weakref
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import optuna

from mutransfer._api._arguments import checked_arguments
from mutransfer._api._callbacks import UserCallbacks
from mutransfer._api._enqueue import Params, enqueue, holds_trials
from mutransfer._api._pruner import loaded_pruner, with_pruner
from mutransfer._api.results import Report, TargetResult, TransferRecord, TrialResult
from mutransfer._api.spec import CommandLine, StudySpec
from mutransfer._api.strategies import Strategy, with_strategies
from mutransfer._study.inputs import check_storage
from mutransfer._study_folder.portable import read_study_file
from mutransfer._study_folder.records import MODEL_DIR
from mutransfer._study_folder.state import StudyDir
from mutransfer._sweep._journal_file import JOURNAL_FILE, journal_storage
from mutransfer._sweep.context import ProxyResults, SweepOptions
from mutransfer._sweep.pareto import pareto_front
from mutransfer._sweep.runner import COMPLETE, sweep_steps
from mutransfer._sweep.session import Made, Prepared
from mutransfer._sweep.target import TargetOutcome
from mutransfer.errors import UserInputError
from mutransfer.serving._artifact import read_model_dir

if TYPE_CHECKING:
    import pandas as pd

#: what each step of the API runs up to (the phases of mutransfer._sweep.runner)
_OPTIMIZE, _TRANSFER, _TARGET, _REPORT = "run_proxies", "transfer_phase", "log_model_phase", "write_report"
_ORDER = (_OPTIMIZE, _TRANSFER, _TARGET, _REPORT)

Executor = Literal["ray", "inprocess", "population", "ray-population"]
TrialCallbackFn = Callable[["Study", TrialResult], None]


class Study:
    """A μTransfer study: a proxy search, the transfer of its winner, the target trained once, a report.

    Made by :func:`create_study` or :func:`load_study`, never directly. Its folder is ``<storage>/<name>`` (the one
    ``mutransfer sweep``, ``report``, ``trials``, ``evaluate`` and ``predict`` read), its runs are in the study's MLflow
    store.

    Example:
        >>> import mutransfer as mt
        >>> spec = mt.StudySpec.default().replace({"name": "demo", "budget.epochs": 2, "target.epochs": 2})
        >>> study = mt.create_study(spec, storage="mutransfer-runs", executor="inprocess")  # doctest: +SKIP
        >>> study.optimize(n_trials=4)  # doctest: +SKIP
        >>> study.best_params  # doctest: +SKIP
        {'lr': 0.0041..., 'batch_size': 10}
    """

    def __init__(self, spec: StudySpec, options: SweepOptions, *, _token: object = None, _command: bool = False):
        if _token is not _TOKEN:
            raise TypeError("make a study with mutransfer.create_study(...) or mutransfer.load_study(...)")
        self._spec, self._options = spec, options
        #: ``mutransfer sweep``'s study (:func:`_command_study`): its options are the command's, kept as given
        self._command = _command
        self._steps: Generator[tuple[str, Prepared, Made], None, None] | None = None
        #: the study and what its steps made, as the last step left them
        self._at: tuple[Prepared, Made] | None = None
        self._reached: set[str] = set()
        _OPEN.add(self)  # closed at the interpreter's exit if it is still open then (_close_open_studies)

    # ---- the steps ----------------------------------------------------------------------------
    def optimize(self, n_trials: int | None = None, callbacks: Sequence[TrialCallbackFn] = ()) -> None:
        """Run (or continue) the proxy search.

        Args:
            n_trials: the search's number of trials (the spec's ``search.num_trials`` when None). A study resumed
                later continues up to the same number; another number is refused in one line.
            callbacks: functions ``callback(study, trial)`` called after each trial ends, with a :class:`TrialResult`.

        Example:
            >>> study.optimize(n_trials=8)  # doctest: +SKIP
        """
        if n_trials is not None and (not isinstance(n_trials, int) or n_trials < 1):
            raise UserInputError(f"n_trials {n_trials!r}: a whole number of trials, at least 1 (e.g. n_trials=8)")
        started = self._steps is not None or (self.study_dir / "study.yaml").is_file()  # this session's, or loaded
        if n_trials is not None and started and n_trials != self._spec.study.search.num_trials:
            raise UserInputError(
                f"n_trials {n_trials}: this study searches {self._spec.study.search.num_trials} trials; "
                "drop n_trials, or create a study with another name"
            )
        if n_trials is not None:
            self._spec = self._spec.replace({"search.num_trials": n_trials})
        self._options.trial_callbacks = (UserCallbacks(self, callbacks),) if callbacks else ()
        self._advance(_OPTIMIZE)

    def enqueue_trial(self, params: Params, *, skip_if_exists: bool = False) -> None:
        """Run a trial with these values next (Optuna's ``enqueue_trial``): the search hands it out before sampling,
        the names not given sampled; it counts among ``search.num_trials`` and is told to the sampler as any other.

        Args:
            params: searched hyperparameters and their values, e.g. ``{"lr": 1e-3, "batch_size": 10}``; a name not
                searched or a value outside the search space is refused in one line.
            skip_if_exists: do nothing if a trial with these values is already in the study.

        Example:
            >>> study.enqueue_trial({"lr": 1e-3})  # doctest: +SKIP
        """
        self._options.enqueued = enqueue(
            self._spec, self.study_dir, params, self._options.enqueued, skip_if_exists=skip_if_exists
        )

    def transfer(self) -> TransferRecord:
        """The best proxy's hyperparameters rescaled to the target by the μP rules (runs the search first if needed).

        Returns:
            A :class:`TransferRecord` with the proxy's and the target's hyperparameters, and the rules applied.

        Example:
            >>> study.transfer().target["lr"]  # doctest: +SKIP
        """
        prepared, made = self._advance(_TRANSFER)
        if made.made_transfer is not None:
            t = made.made_transfer
            return TransferRecord(
                proxy=dict(t.source.hp) if t.source is not None else {},
                target=dict(t.hp),
                rules=dict(t.record),
                source=t.source_key,
            )
        report = self._report_data(prepared, made)
        best = report.get("best_proxy") or {}
        return TransferRecord(
            proxy=dict(best.get("hp") or {}),
            target=dict(report.get("target_hyperparameters") or {}),
            rules=dict(report.get("transfer") or {}),
            source=best.get("trial_id"),
        )

    def train_target(self) -> TargetResult:
        """Train the target once at the transferred hyperparameters (after the search and the transfer, if needed).

        Returns:
            A :class:`TargetResult` with the trained ``model`` (an ``nn.Module``), its ``history`` and ``test_error``.

        Example:
            >>> target = study.train_target()  # doctest: +SKIP
            >>> prediction = target.model(x)  # doctest: +SKIP
        """
        prepared, _ = self._advance(_TARGET)
        outcome = TargetOutcome.from_dict(prepared.state["target_outcome"])
        model_dir = prepared.study_dir.root / MODEL_DIR
        model, card = read_model_dir(model_dir)
        return TargetResult(
            model=model,
            history=outcome.history,
            test_error=float(outcome.test_error),
            val_error=outcome.val_error,
            hyperparameters=dict(card.hyperparameters),
            model_dir=model_dir,
        )

    def report(self) -> Report:
        """Finish the study (every phase left, ``--verify``'s and ``--baseline``'s included) and return its report.

        Returns:
            A :class:`Report`, with ``to_json()``, ``to_text()`` and ``to_html()``.

        Example:
            >>> print(study.report().to_text())  # doctest: +SKIP
        """
        prepared, made = self._advance(_REPORT)
        return Report(self._report_data(prepared, made), prepared.study_dir.root)

    def close(self) -> None:
        """Release the study's lock, its Ray and its MLflow parent run (marked KILLED if it did not finish: loading
        it again continues it). Called by ``with``; a closed study opens them again at its next step."""
        if self._steps is not None:
            self._steps.close()
        self._steps = None

    def __enter__(self) -> Study:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- what it found ------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The study's name (its folder under the storage)."""
        return self._spec.name

    @property
    def spec(self) -> StudySpec:
        """The study's settings."""
        return self._spec

    @property
    def study_dir(self) -> Path:
        """The study's folder."""
        return StudyDir.for_study(self.name, self._options.runs_dir).root

    @property
    def trials(self) -> list[TrialResult]:
        """Every proxy trial of the finished search, in the order they were handed out."""
        return [TrialResult.of(t) for t in self._proxies().trials]

    @property
    def best_trial(self) -> TrialResult:
        """The trial the transfer starts from (the lowest validation error among those that ran the full budget)."""
        return TrialResult.of(self._proxies().best)

    @property
    def best_trials(self) -> list[TrialResult]:
        """The Pareto front of a two-objective search (``search.objectives: error+seconds``): the trials no other
        beats on both the validation error and the training seconds, by validation error; for a one-objective
        search, ``[best_trial]`` (as Optuna's ``Study.best_trials``).

        Example:
            >>> [(t.key, t.value) for t in study.best_trials]  # doctest: +SKIP
        """
        proxies = self._proxies()
        if self._spec.study.search.objectives == "error":
            return [TrialResult.of(proxies.best)]
        return [TrialResult.of(t) for t in pareto_front(proxies.trials)]

    @property
    def best_params(self) -> dict[str, float | int | str]:
        """The best trial's searched values (``best_trial.params``)."""
        return dict(self.best_trial.params)

    @property
    def best_value(self) -> float | None:
        """The best trial's validation error."""
        return self.best_trial.value

    @property
    def optuna_study(self) -> optuna.Study:
        """The proxy trials as an :class:`optuna.Study`, read from the study folder's journal (``optuna.journal``):
        the same trials, numbers, parameters and values, with each evaluation's validation error as an intermediate
        value; what optuna-dashboard shows (``mutransfer dashboard NAME``). Trials enqueued in it (``enqueue_trial``)
        are run by the search; others added to it are not.

        Example:
            >>> study.optuna_study.best_trial.params  # doctest: +SKIP
        """
        path = self.study_dir / JOURNAL_FILE
        if not path.is_file():
            raise UserInputError(f"study {self.name!r} has no proxy trial yet ({path}); call study.optimize() first")
        return optuna.load_study(study_name=self.name, storage=journal_storage(path))

    def trials_dataframe(self) -> pd.DataFrame:
        """The trials as a pandas DataFrame, with Optuna's columns: ``number``, ``value``, ``state``, ``params_<name>``,
        and ``epochs``, ``key``.

        Example:
            >>> study.trials_dataframe().sort_values("value").head()  # doctest: +SKIP
        """
        import pandas as pd  # noqa: PLC0415 -- deferred: pandas costs ~0.3 s, only this method needs it

        rows = [
            {
                "number": t.number,
                "value": t.value,
                "state": t.state,
                **{f"params_{k}": v for k, v in t.params.items()},
                "epochs": t.epochs,
                "key": t.key,
            }
            for t in self.trials
        ]
        return pd.DataFrame(rows)

    # ---- the engine ---------------------------------------------------------------------------
    def _advance(self, until: str) -> tuple[Prepared, Made]:
        """Run the study's phases until ``until`` has run (in this session or an earlier one); the study and what its
        steps made."""
        if self._at is not None and (COMPLETE in self._reached or _passed(self._reached, until)):
            return self._at
        if self._steps is None:
            if not self._command:
                if self.study_dir.exists():
                    self._options.resume = True  # a folder of this study: it continues (the stored settings must agree)
                self._options.study_text, self._options.study_folder = self._spec.text, self._spec.folder
                self._options.study_path = None
            self._reached = set()
            self._steps = sweep_steps(self._options)
        try:
            for name, prepared, made in self._steps:
                self._at = (prepared, made)
                self._reached.add(name)
                if name == COMPLETE:  # nothing is left to run: the lock is given back now
                    self.close()
                    return self._at
                if name == until and until != _REPORT:  # the report: on to the end, the session closed as finished
                    return self._at
        except BaseException:
            self._steps = None  # what ran is kept in the folder: the next step resumes it
            raise
        finally:
            if self._options.enqueued and holds_trials(self.study_dir, self.name):
                self._options.enqueued = ()  # the search wrote them to its journal before its first trial
        self._steps = None
        assert self._at is not None
        return self._at

    def _proxies(self) -> ProxyResults:
        prepared, made = self._advance(_OPTIMIZE)
        if made.made_proxies is not None:
            return made.made_proxies
        return ProxyResults.from_state(prepared.state)

    @staticmethod
    def _report_data(prepared: Prepared, made: Made) -> dict:
        return made.report or dict(prepared.state.get("report") or {})


#: the studies alive in this interpreter (weakly held: a study dropped is not kept alive by this set)
_OPEN: weakref.WeakSet[Study] = weakref.WeakSet()


@atexit.register
def _close_open_studies() -> None:
    """At the interpreter's exit, before its modules are torn down: a study left open releases its lock, Ray and
    parent run (a generator finalized after that raised "Exception ignored ... 'NoneType' object"). Best effort: an
    error here would only be printed at exit, over the program's own output."""
    for study in list(_OPEN):
        with contextlib.suppress(Exception):
            study.close()


def _passed(reached: set[str], until: str) -> bool:
    """Whether the phases in ``reached`` include ``until`` or a later API step."""
    later = _ORDER[_ORDER.index(until) :]
    return any(step in reached for step in later)


_TOKEN = object()


def create_study(
    spec: StudySpec | None = None,
    *,
    storage: str | Path = "mutransfer-runs",
    sampler: optuna.samplers.BaseSampler | None = None,
    pruner: optuna.pruners.BasePruner | None = None,
    executor: Executor | None = None,
    tracking_uri: str | None = None,
    load_if_exists: bool = False,
    quiet: bool = True,
    strategies: Sequence[Strategy] = (),
    register: str | None = None,
    ray_address: str | None = None,
) -> Study:
    """A new study of ``spec`` in ``<storage>/<spec.name>``. Nothing runs until :meth:`Study.optimize` (or a later
    step).

    Args:
        spec: the study's settings (default: the built-in quick study).
        storage: the folder of study folders (``mutransfer sweep --runs-dir``).
        sampler: an Optuna sampler (e.g. ``optuna.samplers.TPESampler(seed=0)``, ``GPSampler()``) used in place of
            the spec's ``search.algorithm``; it sees the results of the trials finished before each trial's window,
            as the built-in ones do.
        pruner: ``optuna.pruners.SuccessiveHalvingPruner(min_resource=G, reduction_factor=R)`` (ASHA with grace
            period G epochs, kept in the spec's ``budget``), ``optuna.pruners.NopPruner()`` (no early stops), or any
            other Optuna pruner (e.g. ``MedianPruner()``), asked at each evaluation on the study's Optuna journal in
            place of ASHA; None: the spec's ``budget`` (ASHA).
        executor: None (the spec's ``resources.executor``: ``"ray"`` unless it says otherwise; the built-in quick
            study says ``"population"``, which becomes ``"ray-population"`` with ``ray_address``), ``"ray"`` (Ray Tune trials, a Ray Train target or, for one CPU worker,
            one Ray actor), ``"inprocess"`` (one training at a time in this process, no Ray: the same trials and results),
            ``"population"`` (in this process, a window of proxies of one shape trained as one batched model: the
            same trials and results) or ``"ray-population"`` (those batched models on Ray, each a Ray task, a
            window's at once; the target as ``"ray"``'s).
        tracking_uri: the MLflow store (default: the spec's ``tracking.uri``, else ``sqlite:///mlflow.db`` here).
        load_if_exists: continue a study of that name in ``storage`` instead of refusing it.
        quiet: no progress lines on stderr.
        strategies: what the study runs besides its search: :class:`Verify`, :class:`DirectBaseline`,
            :class:`WarmStart`, :class:`CoordCheck` (``mutransfer sweep``'s ``--verify``, ``--baseline direct``,
            ``--warm-start``, ``--coord-check``). A study loaded again runs them without being given them again.
        register: a name in MLflow's model registry for the trained target (``--register``).
        ray_address: a Ray cluster's address (``--address``; the Ray executor only; None: a local Ray).

    Returns:
        The :class:`Study`.

    Example:
        >>> sampler = optuna.samplers.TPESampler(seed=0)  # doctest: +SKIP
        >>> study = mt.create_study(mt.StudySpec.default(), sampler=sampler)  # doctest: +SKIP
    """
    if isinstance(spec, StudySpec) and spec._command is not None:  # `mutransfer sweep`'s: checked in its flags' words
        return _command_study(spec, spec._command, storage, executor, strategies, register, ray_address, quiet)
    spec, register = checked_arguments(spec, storage, executor, sampler, register, ray_address)
    spec, pruner = with_pruner(spec, pruner)
    folder = StudyDir.for_study(spec.name, storage)
    if folder.exists() and not load_if_exists:
        raise UserInputError(
            f"study {spec.name!r} exists in {storage}: pass load_if_exists=True to continue it, or another name "
            "(spec.replace({'name': 'NEW'}))"
        )
    overrides = {"tracking_uri": tracking_uri} if tracking_uri is not None else {}
    options = SweepOptions(
        runs_dir=str(storage), quiet=quiet, json=True, executor=executor, sampler=sampler, pruner=pruner,
        overrides=overrides,
        register=register, address=ray_address,
    )  # fmt: skip
    return Study(spec, with_strategies(options, strategies), _token=_TOKEN)


def _command_study(
    spec: StudySpec, command: CommandLine, storage: str | Path, executor: Executor | None,
    strategies: Sequence[Strategy], register: str | None, ray_address: str | None, quiet: bool,
) -> Study:  # fmt: skip
    """The :class:`Study` of a spec ``mutransfer sweep`` made (:meth:`StudySpec._of_command`): the command's study file
    by its path (or none: the built-in study, or on ``--resume`` the stored one), its overrides (reported as
    ``override:`` lines, kept in the folder, compared on ``--resume``) and ``--resume`` itself, as given; its other
    arguments are checked by the sweep's first step, worded by their flags (a study of a Python spec continues the
    folder it finds and runs its spec's text)."""
    options = SweepOptions(
        study_path=command.study_path, overrides=dict(command.overrides), resume=command.resume,
        rebuild_state=command.rebuild_state, json=command.json, runs_dir=str(storage),
        quiet=quiet, executor=executor, register=register, address=ray_address,
    )  # fmt: skip
    return Study(spec, with_strategies(options, strategies), _token=_TOKEN, _command=True)


def load_study(
    study_name: str,
    *,
    storage: str | Path = "mutransfer-runs",
    sampler: optuna.samplers.BaseSampler | None = None,
    pruner: optuna.pruners.BasePruner | None = None,
    executor: Executor | None = None,
    quiet: bool = True,
    rebuild_state: bool = False,
    strategies: Sequence[Strategy] = (),
    register: str | None = None,
    ray_address: str | None = None,
) -> Study:
    """The study ``study_name`` of ``storage``, finished or not (a study stopped part-way continues at its next step).

    Args:
        study_name: its name (``spec.name``).
        storage: the folder of study folders.
        sampler: as :func:`create_study`'s, for the trials it has still to hand out.
        pruner: as :func:`create_study`'s, for the trials it has still to run (not kept: a study created with an
            Optuna pruner other than ASHA resumes without one unless given it again).
        executor: where the trainings it still has to run go (None: its spec's ``resources.executor``).
        quiet: no progress lines on stderr.
        rebuild_state: the study's ``state.json`` or its journal of trials was lost or damaged (its next step refuses
            it, saying so): rebuild the state from the journal and the store's runs, and a journal from the trials'
            runs, keeping every finished trial (``mutransfer sweep --resume --rebuild-state``). Refused for a study
            whose state and journal are intact.
        strategies: more strategies for it to run (one it was not created with is refused once its study is
            complete); those it was created with (:class:`Verify`, :class:`DirectBaseline`, :class:`CoordCheck`) it
            runs as first asked without them (kept in its folder).
        register: as :func:`create_study`'s; a finished study's target is registered then.
        ray_address: as :func:`create_study`'s: the cluster its remaining trainings run on.

    Returns:
        The :class:`Study`.

    Example:
        >>> study = mt.load_study("quick", storage="mutransfer-runs")  # doctest: +SKIP
        >>> study.best_params  # doctest: +SKIP
    """
    if not isinstance(study_name, str) or not study_name:
        raise UserInputError(f"study_name: the name a study was created with (spec.name), got {study_name!r:.40}")
    check_storage(storage)
    folder = StudyDir.for_study(study_name, storage)
    if not folder.study_file.is_file():
        found = (
            sorted(p.name for p in Path(storage).iterdir() if (p / "study.yaml").is_file())
            if Path(storage).is_dir()
            else []
        )
        raise UserInputError(
            f"study {study_name!r}: not found in {storage} ({', '.join(found) or 'no studies there'}); "
            "pass the name and storage it was created with"
        )
    # its problem.data as the folder keeps it: relative to the folder (mutransfer._study_folder.portable), absolute here
    spec = StudySpec.from_text(read_study_file(folder).to_yaml(), str(folder.study_file))
    study = create_study(
        spec, storage=storage, sampler=sampler, executor=executor, load_if_exists=True, quiet=quiet,
        strategies=strategies, register=register, ray_address=ray_address,
    )  # fmt: skip
    study._options.rebuild_state = rebuild_state
    study._options.pruner = loaded_pruner(spec, pruner)  # in place of its ASHA, the stored spec unchanged
    return study
