"""The console display of a study (mutransfer._sweep.progress), driven with synthetic Tune trial events (fast, no Ray)."""

from __future__ import annotations

import io
import pickle
from types import SimpleNamespace

import pytest

from mutransfer._sweep.progress import PRUNING_NOTE, ProxyProgress, TargetProgress, display_mode


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _trial(number: int, lr: float, **last):
    return SimpleNamespace(
        trial_id=f"id{number}",
        config={"lr": lr, "seed": 0, "trial_key": f"t{number - 1:04d}"},
        last_result=dict(last),
        status="RUNNING",
        get_error=lambda: None,
    )


def _drive(progress: ProxyProgress) -> None:
    """Three trials of a 4-epoch budget: one completes (best), one is pruned, one is still running."""
    a, b, c = _trial(1, 0.01), _trial(2, 0.1), _trial(3, 0.001)
    for t in (a, b):
        progress.on_trial_start(t)
    for epoch, (ea, eb) in enumerate([(0.5, 0.9), (0.3, 0.8)], start=1):
        for t, e in ((a, ea), (b, eb)):
            t.last_result = {"epoch": epoch, "val_error": e, "diverged": 0, "time_total_s": 1.5 * epoch}
            progress.on_trial_result(t, t.last_result)
    b.status = "TERMINATED"
    progress.on_trial_complete(b)  # ASHA stopped it at epoch 2 of 4
    progress.on_trial_start(c)
    for epoch in (3, 4):
        a.last_result = {
            "epoch": epoch,
            "val_error": 0.3 - 0.1 * (epoch - 2),
            "diverged": 0,
            "time_total_s": 1.5 * epoch,
        }
        progress.on_trial_result(a, a.last_result)
    a.status = "TERMINATED"
    progress.on_trial_complete(a)


@pytest.mark.parametrize(
    ("quiet", "json", "stream", "mode"),
    [
        (False, False, Terminal(), "bar"),
        (False, True, Terminal(), "lines"),
        (False, False, io.StringIO(), "lines"),
        (True, False, Terminal(), "off"),
        (True, True, io.StringIO(), "off"),
    ],
)
def test_display_mode_follows_the_terminal_and_the_flags(quiet, json, stream, mode):
    assert display_mode(quiet=quiet, json=json, stream=stream) == mode


def test_a_terminal_gets_a_live_bar_with_counts_and_the_best_configuration(monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    out = Terminal()
    progress = ProxyProgress(4, budget_epochs=4, searched=["lr"], mode="bar", file=out)
    _drive(progress)
    assert progress.counts() == (2, 1, 1)
    assert progress.best == (pytest.approx(0.1), {"lr": 0.01})
    assert progress.fraction_done() == pytest.approx(2.0)  # two done, the third at epoch 0 of 4
    text = out.getvalue()
    assert "\r" in text and "proxies:" in text  # the bar redraws in place
    last_draw = text.split("\r")[-1]
    assert "2 done, 1 running, 1 pending" in last_draw and "best val 0.1 (lr=0.01)" in last_draw
    assert "[trial 2/4] pruned" in text and "[trial 1/4] completed val 0.1 at epoch 4/4  lr=0.01" in text
    assert "seed" not in text  # only the searched hyperparameters are shown


def test_not_a_terminal_gets_one_line_per_finished_trial():
    out = io.StringIO()
    progress = ProxyProgress(4, budget_epochs=4, searched=["lr"], mode="lines", file=out)
    _drive(progress)
    lines = out.getvalue().splitlines()
    assert lines == [
        "[trial 2/4] pruned    val 0.8 at epoch 2/4  lr=0.1  (3.0 s)",
        PRUNING_NOTE,  # once, under the first trial ASHA stops: its decision rests on one epoch's error
        "[trial 1/4] completed val 0.1 at epoch 4/4  lr=0.01  (6.0 s)",
    ]
    assert "at one epoch" in PRUNING_NOTE and "grace_period" in PRUNING_NOTE


def test_a_failed_attempt_and_a_failed_trial_are_one_line_each():
    out = io.StringIO()
    progress = ProxyProgress(2, budget_epochs=4, searched=["lr"], mode="lines", file=out)
    t = _trial(1, 0.01)
    t.get_error = lambda: RuntimeError("Traceback ...\n  File x\nInjectedFault: injected fault 1/1")
    progress.on_trial_start(t)
    progress.on_trial_recover(t)
    assert progress.counts() == (0, 0, 2)  # pending again until it restarts
    progress.on_trial_start(t)
    progress.on_trial_error(t)
    assert out.getvalue().splitlines() == [
        "[trial 1/2] attempt 1 failed, retrying (InjectedFault: injected fault 1/1)",
        "[trial 1/2] failed    InjectedFault: injected fault 1/1  lr=0.01  (0.0 s)",
    ]


def test_quiet_shows_nothing(monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    out = Terminal()
    progress = ProxyProgress(4, budget_epochs=4, searched=["lr"], mode="off", file=out)
    _drive(progress)
    target = TargetProgress(3, mode="off", file=out)
    target.show(1, train_loss=0.5, test_error=0.4)
    assert out.getvalue() == "" and progress.counts() == (2, 1, 1)


def test_trials_tune_ended_without_events_count_as_done():
    progress = ProxyProgress(3, budget_epochs=4, searched=["lr"], mode="off")
    restored = [SimpleNamespace(trial_id="a", status="TERMINATED"), SimpleNamespace(trial_id="b", status="PENDING")]
    progress.on_step_end(restored)
    assert progress.counts() == (1, 0, 2)


def test_the_target_bar_shows_epoch_errors_and_the_lines_mode_stays_quiet(monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    out = Terminal()
    target = TargetProgress(10, mode="bar", file=out)
    for epoch in (4, 5, 6):  # resumed at epoch 4: the bar starts there
        target.show(epoch, train_loss=0.01 * epoch, test_error=0.02 * epoch)
    target.close()
    last = out.getvalue().split("\r")[-1]
    assert "target: 6/10 epochs" in last and "train loss 0.06, test error 0.12" in last
    quiet = io.StringIO()
    TargetProgress(10, mode="lines", file=quiet).show(1, train_loss=0.1, test_error=0.2)
    assert quiet.getvalue() == ""


def test_the_display_survives_pickling_as_tune_stores_its_callbacks(monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    progress = ProxyProgress(4, budget_epochs=4, searched=["lr"], mode="bar", file=Terminal())
    _drive(progress)
    copy = pickle.loads(pickle.dumps(progress))
    assert copy.counts() == (2, 1, 1) and copy.file is None and copy.mode == "bar"


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="one of bar, lines, off"):
        ProxyProgress(1, budget_epochs=1, searched=[], mode="fancy")


def test_a_resumed_search_counts_the_trials_finished_before_it():
    """A search resumed with 2 of 4 trials finished starts its counts at 2 done, not 0."""
    out = Terminal()
    progress = ProxyProgress(4, budget_epochs=4, searched=["lr"], mode="bar", file=out, finished=2)
    assert progress.counts() == (2, 0, 2)
    progress.on_trial_start(_trial(3, 0.01))
    assert progress.counts() == (2, 1, 1)
    fresh = ProxyProgress(4, budget_epochs=4, searched=["lr"], mode="bar", file=Terminal())
    fresh.on_trial_start(_trial(3, 0.01))
    assert fresh.counts() == (0, 1, 3)
