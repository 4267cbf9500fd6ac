"""Live progress of a study on the console: the proxy search and the target's epochs.

Three modes (:func:`display_mode`), on stderr (stdout is kept for the report):

- ``bar`` (stderr is a terminal, no ``--json``): a tqdm bar that updates while the
  phase runs. Proxy search: trials done / running / pending, the best validation error so
  far and its configuration, elapsed and estimated remaining time (from the fraction
  of the budget's epochs done: a running trial at epoch e of B counts e/B), with one
  line per finished trial printed above it. Target: epoch / epochs, train loss, test
  error, elapsed and remaining time.
- ``lines`` (``--json``, or stderr is not a terminal, e.g. a log file): one line per
  finished trial (and per retried attempt); nothing per target epoch.
- ``off`` (``SweepOptions.quiet``): nothing.

:class:`ProxyProgress` has the trial methods of a Tune ``Callback`` (the executor feeds it the search's
events: mutransfer._sweep._executors); :class:`TargetProgress` is fed the target's epochs by the
driver (mutransfer._sweep.train_target). Neither imports Ray nor MLflow.
"""

from __future__ import annotations

import math
import sys
import time

from tqdm import tqdm

from mutransfer._config.progress import bar_disabled
from mutransfer._sweep.plan import error_text, trial_number, trial_status

MODES = ("bar", "lines", "off")
#: Tune trial statuses of a trial that will not run again
_ENDED = ("TERMINATED", "ERROR")


def display_mode(*, quiet: bool, json: bool, stream=None) -> str:
    """``off`` when quiet; ``lines`` with --json or when ``stream`` (default stderr) is not a terminal; else ``bar``."""
    if quiet:
        return "off"
    stream = sys.stderr if stream is None else stream
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return "lines" if json or not tty else "bar"


def _short(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _config_text(config: dict, keys) -> str:
    return ", ".join(f"{k}={_short(config[k])}" for k in keys if k in config)


class _Display:
    """The mode, the stream and the tqdm bar shared by the two displays (the bar is made on first use)."""

    def __init__(self, mode: str, file=None):
        if mode not in MODES:
            raise ValueError(f"progress mode {mode!r}: one of {', '.join(MODES)}")
        self.mode = mode
        self.file = file  # None: sys.stderr at the time of writing
        self._bar = None

    def __getstate__(self):  # picklable (Tune stores its callbacks): the bar and stream are not
        return dict(self.__dict__, _bar=None, file=None)

    @property
    def stream(self):
        return sys.stderr if self.file is None else self.file

    def say(self, line: str) -> None:
        """One line: above the bar in ``bar`` mode, plain in ``lines`` mode, nothing when ``off``."""
        if self.mode == "off":
            return
        if self._bar is not None:
            self._bar.write(line, file=self.stream)
        else:
            print(line, file=self.stream, flush=True)

    def _make_bar(self, **kwargs):
        # smoothing=0: the rate is the average since the bar started (fractional steps make a moving average jumpy).
        disable = bar_disabled()  # TQDM_DISABLE, read now
        self._bar = tqdm(file=self.stream, dynamic_ncols=True, smoothing=0, leave=True, disable=disable, **kwargs)
        return self._bar

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class ProxyProgress(_Display):
    """The proxy search on the console (see the module docstring); fed trial events by the executor (on Ray, as a Tune callback).

    total: the number of trials; budget_epochs: a trial's full budget; searched: the searched
    hyperparameters (those shown for a trial). Trial events arrive as Tune's ``Trial`` objects
    (trial_id, config, experiment_tag, last_result, status, get_error()).
    """

    #: at most one redraw per this many seconds between trial events (the elapsed time ticks)
    refresh_s = 1.0

    def __init__(
        self,
        total: int,
        *,
        budget_epochs: int,
        searched,
        mode: str,
        file=None,
        label: str = "proxies",
        finished: int = 0,
    ):
        super().__init__(mode, file)
        self.total = int(total)
        self.finished = int(finished)  # trials a resumed search had finished before this session
        self.budget_epochs = max(1, int(budget_epochs))
        self.searched = list(searched)
        self.label = label
        self._ended: set[str] = set()  # trial ids that finished (events, or Tune's status)
        self._running: dict[str, float] = {}  # trial id -> the fraction of the budget it has run
        self._attempts: dict[str, int] = {}
        self.best: tuple[float, dict] | None = None  # (validation error, searched config) of the best result so far
        self._drawn = 0.0
        self._complete = False
        self._pruning_explained = False  # PRUNING_NOTE is said once, at the first trial ASHA stops

    # ---- counts ---------------------------------------------------------------------
    def counts(self) -> tuple[int, int, int]:
        """(done, running, pending) trials."""
        done, running = self.finished + len(self._ended), len(self._running)
        return done, running, max(0, self.total - done - running)

    def fraction_done(self) -> float:
        """Trials done plus the budget fraction of each running trial (the bar's position, in trials)."""
        return min(float(self.total), self.finished + len(self._ended) + sum(self._running.values()))

    def status_text(self) -> str:
        done, running, pending = self.counts()
        text = f"{done} done, {running} running, {pending} pending"
        if self.best is not None:
            error, config = self.best
            shown = _config_text(config, self.searched)
            text += f" | best val {error:.4g}" + (f" ({shown})" if shown else "")
        return text

    # ---- Tune callback methods --------------------------------------------------------
    def on_trial_start(self, trial) -> None:
        self._running[trial.trial_id] = self._epoch_fraction(trial.last_result or {})
        self._draw(force=True)

    def on_trial_result(self, trial, result: dict) -> None:
        if trial.trial_id not in self._ended:
            self._running[trial.trial_id] = self._epoch_fraction(result)
        error = result.get("val_error")
        if not result.get("diverged") and isinstance(error, (int, float)) and math.isfinite(error):
            if self.best is None or error < self.best[0]:
                self.best = (float(error), {k: v for k, v in (trial.config or {}).items() if k in self.searched})
        self._draw()

    def on_trial_recover(self, trial) -> None:
        self._attempts[trial.trial_id] = self._attempts.get(trial.trial_id, 0) + 1
        self._running.pop(trial.trial_id, None)  # pending again until it restarts
        reason = error_text(trial)
        detail = "" if reason == "unknown error" else f" ({reason})"
        number = trial_number(trial)
        self.say(f"[trial {number}/{self.total}] attempt {self._attempts[trial.trial_id]} failed, retrying{detail}")
        self._draw(force=True)

    def on_trial_complete(self, trial) -> None:
        self._finish(trial, failed=False)

    def on_trial_error(self, trial) -> None:
        self._finish(trial, failed=True)

    def on_step_end(self, trials) -> None:
        """Tune's loop: count trials Tune ended without events (a restored experiment's) and let the clock tick."""
        for trial in trials:
            if str(getattr(trial, "status", "")) in _ENDED and trial.trial_id not in self._ended:
                self._ended.add(trial.trial_id)
                self._running.pop(trial.trial_id, None)
        self._draw()

    # ---- drawing -----------------------------------------------------------------------
    def _epoch_fraction(self, result: dict) -> float:
        return min(1.0, float(result.get("epoch", 0) or 0) / self.budget_epochs)

    def _finish(self, trial, failed: bool) -> None:
        if trial.trial_id in self._ended:
            return
        self._ended.add(trial.trial_id)
        self._running.pop(trial.trial_id, None)
        last = dict(trial.last_result or {})
        status = trial_status(last, failed, self.budget_epochs)
        epochs = int(last.get("epoch", 0) or 0)
        if failed:
            result = error_text(trial)
        else:
            result = f"val {float(last.get('val_error', float('nan'))):.4g} at epoch {epochs}/{self.budget_epochs}"
        wall = float(last.get("time_total_s", 0.0) or 0.0)
        number = trial_number(trial)
        shown = _config_text(dict(trial.config or {}), self.searched)
        together = f", in a population of {int(last['population'])}" if last.get("population") else ""
        self.say(f"[trial {number}/{self.total}] {status:<9} {result}  {shown}  ({wall:.1f} s{together})")
        if status == "pruned" and not self._pruning_explained:
            self._pruning_explained = True
            self.say(PRUNING_NOTE)
        self._draw(force=True)
        if self.finished + len(self._ended) >= self.total:  # the last state stays on the screen
            self.close()
            self._complete = True

    def _draw(self, force: bool = False) -> None:
        if self.mode != "bar" or self._complete:
            return
        now = time.monotonic()
        if not force and now - self._drawn < self.refresh_s:
            return
        self._drawn = now
        bar = self._bar
        if bar is None:
            start = float(self.finished + len(self._ended))
            bar = self._make_bar(
                total=self.total,
                initial=start,
                desc=self.label,
                bar_format="{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}]{postfix}",
            )
        bar.n = self.fraction_done()
        bar.set_postfix_str(self.status_text(), refresh=False)
        bar.refresh()


#: said once, under the first trial ASHA stops: what the decision rests on
PRUNING_NOTE = (
    "note: ASHA stops a trial on its validation error at one epoch (a rung), which can swing several-fold between "
    "epochs on a small proxy; a later budget.grace_period makes the decisions steadier, at more epochs"
)


class TargetProgress(_Display):
    """The target's epochs on the console: a bar in ``bar`` mode, nothing otherwise (the phase prints its own lines)."""

    def __init__(self, epochs: int, *, mode: str, file=None, label: str = "target"):
        super().__init__(mode, file)
        self.epochs = max(1, int(epochs))
        self.label = label

    def show(self, epoch: int, *, train_loss: float, test_error: float) -> None:
        """The target finished ``epoch`` (1-based) with these errors."""
        if self.mode != "bar":
            return
        bar = self._bar
        if bar is None:  # a resumed target starts where its checkpoint was: those epochs do not count for the rate
            bar = self._make_bar(
                total=self.epochs,
                initial=max(0, epoch - 1),
                desc=self.label,
                unit="epoch",
                bar_format="{desc}: {n_fmt}/{total_fmt} epochs |{bar}| [{elapsed}<{remaining}]{postfix}",
            )
        bar.n = min(self.epochs, int(epoch))
        bar.set_postfix_str(f"train loss {train_loss:.4g}, test error {test_error:.4g}", refresh=False)
        bar.refresh()


def for_options(options) -> str:
    """The display mode of a sweep's options (SweepOptions: quiet, json)."""
    return display_mode(quiet=bool(options.quiet), json=bool(getattr(options, "json", False)))


def proxy_callback(options, study, label: str, total: int, finished: int = 0):
    """The display of a search (``label``: how the console names it) of ``study``, fed its trials' events by the
    executor (options: the sweep's SweepOptions; total: its number of trials, ``finished`` of them before this
    session)."""
    return ProxyProgress(
        total,
        budget_epochs=study.budget.epochs,
        searched=list(study.search_space),
        mode=for_options(options),
        finished=finished,
        label=label,
    )


__all__ = [
    "MODES",
    "ProxyProgress",
    "TargetProgress",
    "display_mode",
    "for_options",
    "proxy_callback",
]
