"""The executors (mutransfer._sweep._executors): a study run in this process trains what the same study trains on Ray.

The in-process executor is a real executor: it trains every trial and the target with the project's trainer, writes
the same trial files and MLflow runs, and takes ASHA's decisions from the same plan. No Ray is started by it.
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch

from mutransfer._sweep.report import format_report
from mutransfer._sweep.trial import read_executions
from tests.journal_helpers import held_by_key
from tests.sweep_helpers import galerkin_mesh_study, mlflow_runs, write_tiny_study


def _run(tmp_path, study, executor: str, name: str, quiet: bool = True, **options):
    from mutransfer._sweep import SweepOptions, run_sweep

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    report = run_sweep(
        SweepOptions(
            study_path=str(study),
            runs_dir=str(tmp_path / "runs"),
            quiet=quiet,
            executor=executor,
            overrides={"tracking_uri": uri, "name": name},
            **options,
        )
    )
    return report, uri


def _trials(report: dict) -> list[tuple]:
    return [(t["trial_id"], t["config"], t["status"], t["epochs"], t["val_error"]) for t in report["trial_table"]]


def test_an_inprocess_study_trains_and_logs_without_ray(tiny_data, tmp_path):
    import ray

    study = write_tiny_study(tmp_path, tiny_data, trials=4, epochs=3, grace=1)
    report, uri = _run(tmp_path, study, "inprocess", "here")
    assert not ray.is_initialized()
    statuses = [t["status"] for t in report["trial_table"]]
    assert len(statuses) == 4 and "completed" in statuses
    assert math.isfinite(report["target"]["test_error"])
    kinds = sorted(r.data.tags.get("mutransfer.kind", "") for r in mlflow_runs(uri))
    assert kinds.count("proxy_trial") == 4 and "target" in kinds
    folder = tmp_path / "runs" / "here"
    held = held_by_key(folder, "here")
    for trial in report["trial_table"]:  # every trial in the journal, as a Ray trial's is
        assert held[trial["trial_id"]].status == trial["status"]
    assert (folder / "model" / "MLmodel").exists()


def test_an_inprocess_trial_is_retried_then_recorded_failed(tiny_data, tmp_path, monkeypatch):
    study = write_tiny_study(tmp_path, tiny_data, trials=2, epochs=1, max_failures=1)
    monkeypatch.setenv("MUTRANSFER_FAIL_TRIALS", "3")  # t0000 fails twice (out of retries), t0001 once, then trains
    report, _ = _run(tmp_path, study, "inprocess", "faults")
    first, second = report["trial_table"]
    assert first["status"] == "failed" and second["status"] == "completed"
    assert "injected fault" in held_by_key(tmp_path / "runs" / "faults", "faults")["t0000"].error


def test_an_inprocess_study_refuses_a_ray_address(tiny_data, tmp_path):
    from mutransfer._sweep import SweepOptions, prepare
    from mutransfer.errors import UserInputError

    study = write_tiny_study(tmp_path, tiny_data)
    for executor in ("inprocess", "population"):
        refused = rf"executor {executor} \(--executor, resources.executor\) trains in this process; drop --address"
        with pytest.raises(UserInputError, match=refused):
            prepare(SweepOptions(study_path=str(study), executor=executor, address="auto", runs_dir=str(tmp_path)))
    with pytest.raises(UserInputError, match="--executor threads: one of ray, inprocess, population, ray-population"):
        prepare(SweepOptions(study_path=str(study), executor="threads", runs_dir=str(tmp_path)))
    assert not (tmp_path / "tiny").exists()


def test_galerkin_proxies_on_a_mesh_train_as_a_population_and_as_one_at_a_time(tmp_path):
    """An attention operator's population (``vmap``, operators.population_vmap) on packed point sets with masks: the
    same trials, errors (to float32 rounding) and winner as one at a time, and the summary says they trained
    together."""
    from mutransfer.data._pointclouds import generate_darcy_mesh, write_point_dataset

    mesh = tmp_path / "mesh.h5"
    write_point_dataset(mesh, generate_darcy_mesh(16, 9, seed=0, progress=False, points_min=30, points_max=50))
    study = galerkin_mesh_study(tmp_path, "g", mesh, n_train=12, n_test=4, target_width=16, batch_size=4, epochs=2)
    alone, _ = _run(tmp_path, study, "inprocess", "g-alone")
    together, _ = _run(tmp_path, study, "population", "g-together")
    a, b = _trials(alone), _trials(together)
    assert [t[:4] for t in a] == [t[:4] for t in b]
    assert [t[4] for t in b] == pytest.approx([t[4] for t in a], rel=1e-4)
    assert together["best_proxy"]["trial_id"] == alone["best_proxy"]["trial_id"]
    assert together["search_summary"] == "population executor: 2 of 2 trials trained in 1 population(s) (2–2 each)"


@pytest.mark.slow
def test_the_same_study_trains_the_same_trials_on_ray_and_in_process(ray_local, tiny_data, tmp_path):
    """The same seeded study: the same configurations, ASHA decisions, errors, winner and target error."""
    study = write_tiny_study(tmp_path, tiny_data, trials=5, epochs=3, grace=1)
    on_ray, _ = _run(tmp_path, study, "ray", "on-ray")
    here, _ = _run(tmp_path, study, "inprocess", "here")
    assert _trials(here) == _trials(on_ray)
    assert here["best_proxy"]["trial_id"] == on_ray["best_proxy"]["trial_id"]
    assert here["target"]["test_error"] == pytest.approx(on_ray["target"]["test_error"], rel=1e-5)


def test_every_executor_name_a_study_may_ask_for_has_its_executor():
    from mutransfer._config.executors import EXECUTORS, ON_RAY, POPULATION
    from mutransfer._sweep._executor_names import KINDS, executor_for

    assert list(KINDS) == list(EXECUTORS) and set(ON_RAY) | set(POPULATION) <= set(EXECUTORS)
    assert all(executor_for(name).name == name for name in EXECUTORS)
    with pytest.raises(ValueError, match="one of ray, inprocess, population, ray-population"):
        executor_for("threads")


def test_the_cli_refuses_an_unknown_executor_with_exit_2(tmp_path, capsys):
    from mutransfer.cli.main import main

    with pytest.raises(SystemExit) as stop:
        main(["sweep", "--executor", "threads", "--runs-dir", str(tmp_path / "runs")])
    assert stop.value.code == 2
    assert "--executor" in capsys.readouterr().err and not (tmp_path / "runs").exists()


def test_a_trial_asha_stopped_says_so_in_its_mlflow_run_name(tiny_data, tmp_path):
    """MLflow marks every ended trial FINISHED; the runs table shows the run name, which says pruned (and where)."""
    study = write_tiny_study(tmp_path, tiny_data, trials=6, epochs=4, grace=1)
    report, uri = _run(tmp_path, study, "inprocess", "named")
    runs = [r for r in mlflow_runs(uri) if r.data.tags.get("mutransfer.kind") == "proxy_trial"]
    pruned = [r for r in runs if r.data.tags["mutransfer.status"] == "pruned"]
    assert pruned, [t["status"] for t in report["trial_table"]]  # this seeded study prunes
    for run in runs:
        name, epochs = run.data.tags["mlflow.runName"], int(run.data.metrics["epochs"])
        if run in pruned:
            assert name.endswith(f", pruned at epoch {epochs})"), name
        else:
            assert "pruned" not in name, name


def test_a_population_trains_the_trials_a_study_trains_one_at_a_time(tiny_data, tmp_path, capsys):
    """``population``: the window's trials as one batched model; the same trials, statuses, epochs and errors (to
    float32 rounding) and the same winner as one at a time, every trial's files and MLflow run; the trials'
    executions say they trained together, one population per searched batch size. ASHA (grace 1, 3 epochs) stops
    some of them on either."""
    study = write_tiny_study(tmp_path, tiny_data, trials=8, epochs=3, grace=1, max_concurrent=4)
    alone, _ = _run(tmp_path, study, "inprocess", "alone")
    together, uri = _run(tmp_path, study, "population", "together", quiet=False)
    err = capsys.readouterr().err
    assert ", in a population of " in err  # the trial's line says so
    assert "population executor: the trials of each window (up to 4) of one model shape and batch size train as" in err
    a, b = _trials(alone), _trials(together)
    assert [t[:4] for t in a] == [t[:4] for t in b]  # ids, configs, statuses, epochs
    assert [t[4] for t in b] == pytest.approx([t[4] for t in a], rel=1e-4)
    assert together["best_proxy"]["trial_id"] == alone["best_proxy"]["trial_id"]
    assert together["target"]["test_error"] == pytest.approx(alone["target"]["test_error"], rel=1e-4)
    folder = tmp_path / "runs" / "together" / "trials"
    trained = [json.loads(line) for t in b for line in (folder / t[0] / "executions.jsonl").read_text().splitlines()]
    assert all(e.get("population", 1) >= 1 for e in trained) and max(e.get("population", 1) for e in trained) >= 2
    runs = [r for r in mlflow_runs(uri) if r.data.tags.get("mutransfer.study") == "together"]
    assert sum(r.data.tags.get("mutransfer.kind") == "proxy_trial" for r in runs) == 8
    assert any(t[3] < 3 for t in a), "ASHA stopped none: the test shows no stop"
    together_in = sum(1 for t in b if max(e.get("population", 1) for e in read_executions(folder / t[0])) > 1)
    summary = together["search_summary"]  # said once, kept in the report: how many trained together, why not all
    assert summary.startswith(f"population executor: {together_in} of 8 trials trained in "), summary
    assert (together_in == 8) == ("alone" not in summary), summary
    assert f"  {summary}" in format_report(together)
    assert alone.get("search_summary") is None  # one at a time: nothing to say
    # the members share their population's span as they share its time: the overheads count each population once
    overheads = together["compute"]["overheads"]
    assert 0 < overheads["fixed_share"] < 1, overheads
    members = [r for r in runs if r.data.tags.get("mutransfer.kind") == "proxy_trial"]
    for r in members:  # each member's span holds at least its share of the wall time (a partner stopped by ASHA)
        m = r.data.metrics
        assert m["span_seconds"] >= m["wall_seconds"] - 1e-9, m
    assert overheads["trial_startup_seconds"] < together["compute"]["proxy_phase_seconds"], overheads


def test_a_population_that_fails_trains_its_members_alone_once_even_without_retries(tiny_data, tmp_path, monkeypatch):
    """The population's training raises (here on purpose; an out-of-memory alike): each of its members trains again
    alone, once even at budget.max_failures: 0, and the search ends with every trial trained."""
    from mutransfer._sweep import _population_executor

    def broken(*args, **kwargs):
        raise RuntimeError("the population broke")

    monkeypatch.setattr(_population_executor, "run_population", broken)
    study = write_tiny_study(tmp_path, tiny_data, trials=4, epochs=1, grace=1, max_concurrent=4, max_failures=0)
    report, _ = _run(tmp_path, study, "population", "broken")
    assert [t["status"] for t in report["trial_table"]] == ["completed"] * 4
    folder = tmp_path / "runs" / "broken" / "trials"
    trained = [
        e for t in report["trial_table"] for e in read_executions(folder / t["trial_id"]) if e["kind"] == "train"
    ]
    assert len(trained) == 4 and all(e.get("population") is None for e in trained)  # each alone, once
    summary = report["search_summary"]  # none trained in a population: each trained alone after its population failed
    assert summary.startswith("population executor: 0 of 4 trials trained in 0 population(s); 4 alone: "), summary
    assert "its population failed (4)" in summary, summary


@pytest.mark.slow
def test_populations_on_ray_train_what_populations_in_process_train_several_at_once(
    ray_local, tiny_data, tmp_path, capsys
):
    """``ray-population``: each window's populations (and lone trials) as Ray tasks, at once. The same trials, statuses,
    epochs and errors (to float32 rounding) and the same winner as the in-process population executor; tasks of one
    window trained at the same time in two Ray workers; every trial's MLflow run."""
    study = write_tiny_study(tmp_path, tiny_data, trials=8, epochs=3, grace=1, max_concurrent=4)
    here, _ = _run(tmp_path, study, "population", "here")
    on_ray, uri = _run(tmp_path, study, "ray-population", "on-ray", quiet=False)
    assert "population executor on Ray: the trials of each window (up to 4)" in capsys.readouterr().err
    a, b = _trials(here), _trials(on_ray)
    assert [t[:4] for t in a] == [t[:4] for t in b]  # ids, configs, statuses, epochs: ASHA's stops included
    assert [t[4] for t in b] == pytest.approx([t[4] for t in a], rel=1e-5)
    assert on_ray["best_proxy"]["trial_id"] == here["best_proxy"]["trial_id"]
    assert any(t[3] < 3 for t in a), "ASHA stopped none: the test shows no stop"
    folder = tmp_path / "runs" / "on-ray" / "trials"
    spans = {}  # each task's (pid) first start and last write
    for key, *_ in b:
        starts = [e for e in read_executions(folder / key) if e["kind"] == "train"]
        end = (folder / key / "history.json").stat().st_mtime
        pid = starts[0]["pid"]
        first, last = spans.get(pid, (math.inf, 0.0))
        spans[pid] = (min(first, starts[0]["time"]), max(last, end))
    assert max(e.get("population", 1) for t in b for e in read_executions(folder / t[0])) >= 2
    overlaps = [
        (p, q) for p in spans for q in spans if p < q and spans[p][0] < spans[q][1] and spans[q][0] < spans[p][1]
    ]
    assert overlaps, spans  # two tasks trained at once
    runs = [r for r in mlflow_runs(uri) if r.data.tags.get("mutransfer.study") == "on-ray"]
    assert sum(r.data.tags.get("mutransfer.kind") == "proxy_trial" for r in runs) == 8
    assert all(r.info.status == "FINISHED" for r in runs)


@pytest.mark.slow
def test_a_ray_population_task_that_fails_retries_its_trials_alone_then_records_them_failed(
    ray_local, tiny_data, tmp_path, monkeypatch
):
    """A task that raises (here an injected fault; a lost node alike): its trials train again, each in a task of its
    own, within budget.max_failures; one out of retries is recorded failed with its error, the search goes on."""
    study = write_tiny_study(tmp_path, tiny_data, trials=2, epochs=1, max_failures=1)
    # three attempts fail, whichever trial makes them (its two tasks run at once): one trial twice (out of retries),
    # the other once, then it trains
    monkeypatch.setenv("MUTRANSFER_FAIL_TRIALS", "3")
    report, _ = _run(tmp_path, study, "ray-population", "faults")
    by_status = {t["status"]: t["trial_id"] for t in report["trial_table"]}
    assert sorted(by_status) == ["completed", "failed"], report["trial_table"]
    assert "injected fault" in held_by_key(tmp_path / "runs" / "faults", "faults")[by_status["failed"]].error


def test_a_trial_with_a_checkpoint_or_no_partner_trains_alone(tiny_data, tmp_path):
    """population_groups: trials of one batch size form a population; one with a checkpoint (a population cut short:
    it resumes alone), one of another batch size (no partner) and every trial under fault injection train alone; a
    population holds no more members than the memory plan lets fit."""
    from mutransfer._study import load_study
    from mutransfer._study.data import load_study_data
    from mutransfer._study.models import proxy_split
    from mutransfer._sweep.trial import population_groups
    from mutransfer._training.memory import available_memory
    from mutransfer.data._validation import carve_validation

    study, _ = load_study(str(write_tiny_study(tmp_path, tiny_data)))
    split, _ = load_study_data(study, progress=False)
    data = proxy_split(study, carve_validation(split, int(study.problem.n_val or 0))[1])
    window = [(f"t000{i}", {"lr": 1e-3 * (i + 1), "batch_size": 10 if i < 3 else 20}) for i in range(4)]
    options = {"study_dir": str(tmp_path / "runs"), "device": "cpu"}
    why: dict[str, str] = {}
    groups, alone = population_groups(window, data, study, options, why)
    assert [[t.key for t in g] for g in groups] == [["t0000", "t0001", "t0002"]] and alone == [window[3]]
    assert why == {"t0003": "no partner of its shape and batch size in its window"}
    (tmp_path / "runs" / "trials" / "t0001").mkdir(parents=True)
    (tmp_path / "runs" / "trials" / "t0001" / "checkpoint.pt").write_bytes(b"")
    groups, alone = population_groups(window, data, study, options)
    assert [[t.key for t in g] for g in groups] == [["t0000", "t0002"]]
    assert [key for key, _ in alone] == ["t0001", "t0003"]
    why.clear()
    groups, alone = population_groups(window, data, study, dict(options, fail_trials=1), why)
    assert groups == [] and len(alone) == 4 and set(why.values()) == {"faults are injected"}
    other_init = [(key, dict(config, init_scale=2.0 if key == "t0002" else 1.0)) for key, config in window]
    groups, _ = population_groups(other_init, data, study, options)  # t0000 and t0002 grouped above, not now
    assert groups == []  # the model's own configuration (here a searched init_scale) splits populations too
    free = available_memory("cpu")[0]  # a proxy planned at 30 % of the free memory: two fit in 80 %, three do not
    (tmp_path / "runs" / "trials" / "t0001" / "checkpoint.pt").unlink()
    groups, alone = population_groups(window, data, study, dict(options, plan=SimpleNamespace(total_bytes=free * 0.3)))
    assert [[t.key for t in g] for g in groups] == [["t0000", "t0001"]]
    assert [key for key, _ in alone] == ["t0002", "t0003"]


def test_a_population_is_sized_where_it_trains(tiny_data, tmp_path, monkeypatch):
    """A driver without the trials' device (a cluster's head with no GPU) does not size populations: it cannot read
    that device's memory. The population is sized again where it trains (a Ray task's process): a group larger than
    its device holds trains as consecutive populations that fit, each trial recording the size it trained in."""
    from mutransfer._study import load_study
    from mutransfer._study.data import load_study_data
    from mutransfer._study.models import proxy_split
    from mutransfer._sweep.trial import _members_that_fit, population_groups, read_executions, run_population
    from mutransfer._training.memory import available_memory
    from mutransfer.data._validation import carve_validation

    plan = SimpleNamespace(total_bytes=available_memory("cpu")[0] * 0.3)  # two fit in 80 % of the free memory
    with monkeypatch.context() as m:  # a driver with no GPU sizing a GPU study's populations: no limit, no error
        m.setattr(torch.cuda, "is_available", lambda: False)
        assert _members_that_fit({"plan": plan, "device": "cuda"}) == 1 << 30
    study, _ = load_study(str(write_tiny_study(tmp_path, tiny_data, epochs=1)))
    split, _ = load_study_data(study, progress=False)
    data = proxy_split(study, carve_validation(split, int(study.problem.n_val or 0))[1])
    window = [(f"t000{i}", {"lr": 1e-3 * (i + 1), "batch_size": 10}) for i in range(3)]
    options = {"study_dir": str(tmp_path / "runs"), "device": "cpu"}
    (group,) = population_groups(window, data, study, options)[0]  # grouped with no plan: all three together
    assert len(group) == 3
    reports: list[str] = []
    run_population(group, data, dict(options, plan=plan), lambda key, metrics: reports.append(key) and False)
    trained = {t.key: [e.get("population") for e in read_executions(t.trial_dir)] for t in group}
    assert trained == {"t0000": [2], "t0001": [2], "t0002": [1]}, trained
    assert set(reports) == {"t0000", "t0001", "t0002"}


def test_a_seeded_study_on_populations_trains_the_same_trials_twice_to_the_last_bit(tiny_data, tmp_path):
    """Issue "Proxies that pay in time": seeded studies still reproduce their trials and winners exactly. The same
    study twice on the population executor: the same configurations, statuses, epochs, validation errors (equal, not
    close), winner and target error."""
    study = write_tiny_study(tmp_path, tiny_data, trials=8, epochs=3, grace=1, max_concurrent=4)
    first, _ = _run(tmp_path, study, "population", "first")
    second, _ = _run(tmp_path, study, "population", "second")
    assert _trials(first) == _trials(second)
    assert (
        max(
            e.get("population", 1)
            for t in _trials(first)
            for e in read_executions(tmp_path / "runs" / "first" / "trials" / t[0])
        )
        >= 2
    )
    assert first["best_proxy"]["trial_id"] == second["best_proxy"]["trial_id"]
    assert first["target"]["test_error"] == second["target"]["test_error"]


def test_an_in_process_training_runs_on_its_trials_threads_and_the_process_gets_its_own_back():
    """The in-process executors give each training (a population included, which does not set them itself) the
    study's CPUs per trial, then restore the process's: a population once ran on the process's default threads."""
    from mutransfer._sweep._executors import _threads

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with _threads(1):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
