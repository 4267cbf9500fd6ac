"""Where a study's trainings run: ``resources.executor`` in the study, ``--executor`` over it, the study's in-process
executors taken to the cluster of ``--address`` as their Ray counterparts, and how many trials a Ray window trains at
once (no more than the resources hold)."""

from __future__ import annotations

import re

import pytest

from mutransfer._config.executors import ON_RAY_AS, chosen_executor
from mutransfer._study import default_study_text, load_study
from mutransfer._sweep._executors import RayExecutor
from mutransfer._sweep.context import SweepOptions
from mutransfer._sweep.repeat import repeat_command
from mutransfer._sweep.search import lanes
from mutransfer.cli.main import main
from mutransfer.errors import UserInputError


def _text(**resources: object) -> str:
    text = default_study_text()
    for key, value in resources.items():
        text = text.replace("  executor: population", f"  {key}: {value}")
    return text


def test_the_built_in_study_trains_its_proxies_as_populations_eight_at_a_time():
    study, _ = load_study(None)
    assert study.resources.executor == "population" and study.search.max_concurrent == 8
    assert study.trial_count == 8  # one window: every trial in it
    other, _ = load_study(None, text=_text(executor="ray"))
    assert other.resources.executor == "ray"
    plain, _ = load_study(None, text=default_study_text().replace("  executor: population", ""))
    assert plain.resources.executor == "ray"  # the field's default


def test_an_unknown_executor_in_the_study_is_one_line_naming_the_field(tmp_path, capsys):
    with pytest.raises(UserInputError, match=r"resources\.executor") as caught:
        load_study(None, text=_text(executor="gpu-farm"))
    assert "ray-population" in str(caught.value) and "\n" not in str(caught.value)
    bad = tmp_path / "bad.yaml"
    bad.write_text(_text(executor="gpu-farm"))
    assert main(["sweep", "--study", str(bad), "--runs-dir", str(tmp_path / "runs")]) == 2  # before any folder
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "resources.executor" in err[0] and not (tmp_path / "runs").exists()


def test_the_flag_wins_and_an_address_takes_the_studys_in_process_executor_to_ray():
    assert chosen_executor(None, "population", None) == "population"
    assert chosen_executor(None, "population", "auto") == "ray-population"
    assert chosen_executor(None, "inprocess", "auto") == "ray"
    assert chosen_executor(None, "ray", "auto") == "ray"
    assert chosen_executor("inprocess", "population", None) == "inprocess"
    assert chosen_executor("population", "ray", "auto") == "population"  # a flag is never changed (refused later)
    assert set(ON_RAY_AS.values()) <= {"ray", "ray-population"}


def test_a_population_executor_from_the_study_refuses_two_objectives_before_compute(tmp_path, capsys):
    study = tmp_path / "two.yaml"
    study.write_text(_two_objectives())
    assert main(["sweep", "--study", str(study), "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert "executor population (--executor, resources.executor)" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def _two_objectives() -> str:
    return default_study_text().replace(
        "  seed: 0\n  max_concurrent: 8", "  seed: 0\n  objectives: error+seconds\n  max_concurrent: 8"
    )


def test_the_repeated_command_names_the_executor_only_where_it_is_not_the_studys():
    assert "--executor" not in (repeat_command(SweepOptions(executor="population"), "population") or [])
    argv = repeat_command(SweepOptions(executor="ray"), "population") or []
    assert argv[argv.index("--executor") + 1] == "ray"
    on_cluster = repeat_command(SweepOptions(executor="ray-population", address="auto"), "population") or []
    assert "--executor" not in on_cluster and "--address" in on_cluster  # --address takes it there again


class _TwoCpus(RayExecutor):
    """The Ray executor on a cluster of two CPUs (its resources as Ray would report them)."""

    def resources(self) -> tuple[float, float]:
        return 2.0, 0.0


def test_a_ray_window_wider_than_the_cluster_asks_tune_for_it_and_the_report_counts_what_trains_at_once():
    """Tune gets the study's window (an autoscaling cluster grows for the trials it waits on); the summary and the
    report's wall-time estimates divide by the trials the cluster holds at once."""
    study, _ = load_study(None, text=_text(executor="ray"))
    executor = _TwoCpus()
    assert executor.search_shape(study) == (8, 8)
    assert lanes(study, 8, *executor.resources()) == 2
    narrow, _ = load_study(None, text=_text(executor="ray").replace("max_concurrent: 8", "max_concurrent: 1"))
    assert lanes(narrow, executor.search_shape(narrow)[1], *executor.resources()) == 1


@pytest.mark.slow  # ~20 s: the built-in study's data are generated
def test_the_built_in_study_runs_as_populations_in_this_process_with_no_ray(tmp_path, monkeypatch, capsys):
    """``mutransfer sweep`` with no --study and no --executor: the quick study's own executor, end to end (shortened
    by flags): its window's proxies train as populations, the target in this process, and Ray never starts."""
    import json

    import ray

    monkeypatch.chdir(tmp_path)
    short = ["--num-trials", "4", "--epochs", "2", "--target-epochs", "2"]
    assert main(["sweep", "--proxy-K", "6", "--target-K", "24", *short, "--json"]) == 0
    out = capsys.readouterr()
    report = json.loads(out.out)
    assert not ray.is_initialized()
    summary = report["search_summary"]  # one window of 4: one population per searched batch size with a partner
    assert re.match(r"population executor: [234] of 4 trials trained in [12] population\(s\)", summary), summary
    assert "--executor" not in " ".join(report["command"])  # the study's own executor: nothing to repeat
    assert "(in this process)" in out.err
