"""The summary's last lines: the transfer verdict in words and the next commands with real paths (issue "The first
five minutes", item 2; "The first hour", item 1: the saving rated on time, the overhead named, commands that paste).
Pure functions of the report; the end-to-end check is in test_sweep.py."""

from __future__ import annotations

import shlex

import pytest

from mutransfer._sweep.report import summary_lines, transfer_verdict
from mutransfer._sweep.strategies.baseline import baseline_verdict
from mutransfer.cli.main import build_parser


def _report(**fields) -> dict:
    base = {
        "study": "quick",
        "study_dir": "/work/runs/quick",
        "target_model": "FNO-1D K=24 width 32",
        "proxy_to_target": {"split": "validation", "gain": 2.0},
        "target": {"status": "completed"},
        "compute": {
            "mutransfer_vs_direct_flops": 0.19,
            "mutransfer_vs_direct_training_seconds": 0.97,
            "sweep_wall_seconds": 80.0,
            "overheads": {"fixed_share": 0.55},
            "target_trainer_seconds": 10.0,
            "proxy_trainer_seconds": 16.0,
        },
        "trials": {"total": 8},
        "command": ["mutransfer", "sweep", "--study", "/work/my studies/q.yaml", "--proxy-K", "6"],
        "mlflow": {"tracking_uri": "sqlite:////work/m.db"},
        "verification": None,
        "direct_baseline": None,
        "coord_check": None,
    }
    return base | fields


def test_the_verdict_says_what_the_study_measured_and_what_it_did_not():
    words = transfer_verdict(_report())
    assert words[0] == "FNO-1D K=24 width 32 reached a 2.00x lower validation error than its proxy"
    assert "whether the target's optimum sits at the transferred LR is not measured" in words
    worse = transfer_verdict(_report(proxy_to_target={"split": "validation", "gain": 0.8}))
    assert worse[0].startswith("FNO-1D K=24 width 32 is no better than its proxy (validation error 1.25x the proxy's)")


def test_the_saving_is_rated_on_training_time_with_flops_beside_it_and_the_overhead_named():
    """The default study's case: 0.19x in FLOPs but 0.97x in time is "a small saving", not "a saving"."""
    words = transfer_verdict(_report())
    cost = next(w for w in words if w.startswith("muTransfer cost"))
    assert cost.startswith("muTransfer cost about 0.97x of tuning FNO-1D K=24 width 32 directly in training time")
    assert "0.19x in FLOPs" in cost and "): a small saving: a proxy smaller in width or grid would pay more" in cost
    assert words[-1].startswith("fixed overhead (setup, trial start-up, scheduling, the target's start-up) was 55%")
    assert "more trials or a longer budget spread it" in words[-1]
    cheap = transfer_verdict(_report(compute={"mutransfer_vs_direct_training_seconds": 0.3}))
    assert cheap[-1].endswith("): a saving")
    flops_only = transfer_verdict(_report(compute={"mutransfer_vs_direct_flops": 0.2}))
    assert "the saving in time is not known" in flops_only[-1]
    assert "in wall time" not in cost  # not estimated: not said
    walled = transfer_verdict(
        _report(compute={"mutransfer_vs_direct_training_seconds": 0.4, "mutransfer_vs_direct_wall_seconds": 0.8})
    )
    assert "0.40x of tuning FNO-1D K=24 width 32 directly in training time" in walled[-1]
    assert "; about 0.80x in wall time (the direct search's trainings in place of the proxies'" in walled[-1]
    assert walled[-1].endswith(
        "): a small saving: a proxy smaller in width or grid would pay more (docs/sweep.md, Cheap proxies)"
    )  # rated on the dearer, the wall time


def test_the_wall_time_of_direct_tuning_is_estimated_from_the_measured_parts():
    """Setup 10 s; a proxy phase of 30 s at 2 at a time whose 4 trials trained 40 s (20 s of it on the wall clock,
    10 s outside training); the target trains 2 s per epoch: the same 4 trials x 5 epochs at the target's size, 2 at
    a time, take 20 s: 10 + 10 + 20 = 40 s. A part not measured: no estimate."""
    from mutransfer._study_folder.records import TrialRecord
    from mutransfer._sweep.cost import direct_wall_estimate

    trials = [TrialRecord(f"t{i:04d}", i + 1, "completed", {}, {}, 0.1, 5, trainer_seconds=10.0) for i in range(4)]
    compute = {"setup_seconds": 10.0, "proxy_phase_seconds": 30.0, "proxy_concurrency": 2}
    target = {"trainer_seconds": 40.0, "epochs": 20}
    assert direct_wall_estimate(compute, trials, target) == 40.0
    assert direct_wall_estimate(compute | {"setup_seconds": None}, trials, target) is None
    assert direct_wall_estimate(compute, trials, None) is None


def test_a_verification_and_a_baseline_add_their_findings_and_leave_the_suggestions():
    verify = {"verdict": "the transfer held: ...", "target_verdict": None}
    baseline = {"mutransfer_vs_direct": {"error": 1.01, "trainer_device_seconds": 0.4}}
    report = _report(verification=verify, direct_baseline=baseline, coord_check={"verdict": "pass"})
    words = transfer_verdict(report)
    assert "--verify: the transfer held: ..." in words
    assert any(w.startswith("--baseline direct (measured): muTransfer cost 0.40x in training time") for w in words)
    assert any(w.endswith("its target is as good as direct tuning's winner (test error ratio 1.01x)") for w in words)
    assert "coordinate check: pass (it reports and never blocks)" in words
    assert not any("not measured" in w for w in words)
    text = "\n".join(summary_lines(report))
    assert "--verify --name" not in text and "--baseline direct --name" not in text


def test_the_next_commands_carry_the_studys_real_paths():
    text = "\n".join(summary_lines(_report()))
    assert "  mutransfer report quick --runs-dir /work/runs\n      the study page, /work/runs/quick/report.html" in text
    assert "  mutransfer ui --tracking-uri sqlite:////work/m.db" in text
    assert "  mutransfer sweep --study '/work/my studies/q.yaml' --proxy-K 6 --verify --name quick-2\n" in text
    assert "mutransfer sweep --study '/work/my studies/q.yaml' --proxy-K 6 --baseline direct --name quick-2" in text
    assert text.splitlines()[1] == "verdict:"
    # what --verify costs, before it is suggested: 15 target + 15 proxy trainings at this study's seconds
    assert "costs 15 target and 15 proxy trainings, about 180 s of training here (18x the target's)" in text


def _next_commands(report: dict) -> list[str]:
    lines = "\n".join(summary_lines(report)).splitlines()
    return [line.strip() for line in lines[lines.index("next:") + 1 :] if line.startswith("  mutransfer")]


@pytest.mark.parametrize(
    "command",
    [
        ["mutransfer", "sweep"],
        ["mutransfer", "sweep", "--study", "/tmp/a b.yaml", "--ladder", "4", "8", "--executor", "inprocess"],
    ],
)
def test_every_next_command_pastes_as_printed_and_parses(command):
    """Each line split as a shell splits it is a command the CLI's own parser takes (no placeholder left)."""
    commands = _next_commands(_report(command=command))
    assert len(commands) == 4
    for line in commands:
        argv = shlex.split(line)
        assert argv[0] == "mutransfer" and "<" not in line, line
        build_parser().parse_args(argv[1:])  # an unknown flag or a missing value exits 2


def test_the_check_that_commands_parse_can_fail():
    """The line printed before (a placeholder) is refused by the same check."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(shlex.split("mutransfer sweep <the same flags> --verify --name quick-2")[1:])


def test_the_baseline_verdict_says_as_good_or_worse_and_the_cost():
    assert baseline_verdict({"mutransfer_vs_direct": {"error": 1.3, "trainer_device_seconds": 1.5}}) == (
        "--baseline direct (measured): muTransfer cost 1.50x in training time of tuning the target directly "
        "(no saving); its target is worse than direct tuning's winner (test error ratio 1.30x)"
    )
    cheap = {"mutransfer_vs_direct": {"error": 1.0, "trainer_device_seconds": 0.45, "flops": 0.24}}
    assert baseline_verdict(cheap).startswith(
        "--baseline direct (measured): muTransfer cost 0.24x in FLOPs and 0.45x in training time of tuning the "
        "target directly (a saving); its target is as good as"
    )
    assert "no error ratio" in baseline_verdict({"mutransfer_vs_direct": {"error": None}})
