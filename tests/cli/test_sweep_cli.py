"""`mutransfer sweep / studies / ui`: bad input is one line + exit 2 before any compute (light tests; more ui in test_ui.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from mutransfer.cli.main import main
from tests.cli_batch import run_cli_batch
from tests.sweep_helpers import K_ONLY_STUDY, k_only_study_text


def run_probe(cwd: Path, *args) -> subprocess.CompletedProcess:
    """The CLI on ``args`` in ``cwd``, in a fresh interpreter; its stdout ends with whether Ray / MLflow were
    imported (``"False False"``)."""
    return run_probes([(cwd, list(args))])[0]


def run_probes(cases: list[tuple[Path, list]]) -> list[subprocess.CompletedProcess]:
    """:func:`run_probe` for many cases in one fresh interpreter (tests/cli_batch.py), in order."""
    return [
        subprocess.CompletedProcess(args, o.returncode, f"{o.stdout}{o.ray} {o.mlflow}", o.stderr)
        for (_, args), o in zip(cases, run_cli_batch(cases), strict=True)
    ]


def quick_mapping() -> dict:
    return yaml.safe_load(k_only_study_text())


def write_study(tmp_path: Path, mutate=None, name="study.yaml") -> Path:
    m = quick_mapping()
    if mutate:
        mutate(m)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(m, sort_keys=False))
    return path


def assert_no_compute(proc, cwd: Path, *fragments):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("mutransfer sweep: error: ") and "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert proc.stdout.split() == ["False", "False"], "Ray or MLflow was imported: compute may have started"
    assert not (cwd / "mlflow.db").exists() and not (cwd / "mutransfer-runs").exists() and not (cwd / "cache").exists()


BAD_STUDIES = [
    (lambda m: m.update(learning_rate=1e-3), ["learning_rate: unknown key"]),
    (lambda m: m.update(proxy_K="6"), ["proxy_K: must be an integer"]),
    (lambda m: m.update(proxy_K=24, target_K=24), ["proxy_K: must be < target_K (24)"]),
    (lambda m: m.update(target_K=100), ["target_K: modes 100 too large for grid size 128"]),
    (lambda m: m.update(search_space={}), ["search_space: is empty"]),
    (
        lambda m: m["operator"].update(k_exponent="fast"),
        ["operator.k_exponent: must be a number in [0, 8]", "data"],
    ),
    (lambda m: m["operator"].update(k_exponent=9), ["operator.k_exponent: must be a number in [0, 8]"]),
    (
        lambda m: m.update(parametrization="standard", operator={**m["operator"], "k_exponent": 0.5}),
        ["operator.k_exponent: 0.5 sets the exponent of muP's K rule", "set parametrization: mup"],
    ),
    (
        lambda m: m.update(target_K=6, target_width=64, operator={**m["operator"], "k_exponent": "data"}),
        ["operator.k_exponent: 'data' measures how the data's energy grows from proxy_K to target_K"],
    ),
    (lambda m: m["search"].update(num_trials=10**13), ["search.num_trials: must be <= 10000, got 10000000000000"]),
    (lambda m: m["target"].update(epochs=10**20), ["target.epochs: must be <= 100000"]),
    (lambda m: m["budget"].update(epochs=10**6), ["budget.epochs: must be <= 100000"]),
    (
        lambda m: m.update(operator={"type": "galerkin", "width": 32, "k_exponent": "data"}),
        ["operator.k_exponent: applies to fno and a user's factory only, not galerkin"],
    ),
]


@pytest.fixture(scope="module")
def bad_studies(tmp_path_factory) -> list[tuple[Path, Path, subprocess.CompletedProcess]]:
    """Each of :data:`BAD_STUDIES` written in a folder of its own and swept, all in one probe process:
    (folder, study file, the probe's outcome)."""
    cases = []
    for i, (mutate, _) in enumerate(BAD_STUDIES):
        folder = tmp_path_factory.mktemp(f"bad{i}")
        cases.append((folder, ["sweep", "--study", write_study(folder, mutate)]))
    return [(cwd, args[-1], proc) for (cwd, args), proc in zip(cases, run_probes(cases))]


@pytest.mark.parametrize("case", range(len(BAD_STUDIES)))
def test_bad_study_fails_before_any_compute(bad_studies, case):
    folder, path, proc = bad_studies[case]
    assert_no_compute(proc, folder, f"study {path}:", *BAD_STUDIES[case][1])


def test_bad_override_fails_before_any_compute(tmp_path):
    proc = run_probe(tmp_path, "sweep", "--proxy-K", "6", "--target-K", "70")
    assert_no_compute(proc, tmp_path, "target_K: modes 70 too large", "(set by --target-K)")


BAD_K_EXPONENTS = ["fast", "-1", "nan"]


@pytest.fixture(scope="module")
def bad_k_exponents(tmp_path_factory) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    """Each of :data:`BAD_K_EXPONENTS` swept in a folder of its own, in one probe process: value -> (folder, outcome)."""
    cases = [(tmp_path_factory.mktemp("k"), ["sweep", "--k-exponent", v]) for v in BAD_K_EXPONENTS]
    return {v: (cwd, proc) for v, (cwd, _), proc in zip(BAD_K_EXPONENTS, cases, run_probes(cases))}


@pytest.mark.parametrize("value", BAD_K_EXPONENTS)
def test_a_bad_k_exponent_flag_fails_before_any_compute(bad_k_exponents, value):
    tmp_path, proc = bad_k_exponents[value]
    assert proc.returncode == 2 and "--k-exponent" in proc.stderr and "give a number in [0, 8]" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mutransfer-runs").exists()


def test_unschedulable_resources_fail_before_any_compute(tmp_path):
    path = write_study(tmp_path, lambda m: m["resources"].update(cpus_per_trial=4096))
    proc = run_probe(tmp_path, "sweep", "--study", path)
    assert_no_compute(proc, tmp_path, "resources.cpus_per_trial: 4096 >")


def test_bad_fault_injection_value(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MUTRANSFER_FAIL_TRIALS", "many")
    assert main(["sweep"]) == 2
    assert "MUTRANSFER_FAIL_TRIALS='many'" in capsys.readouterr().err


def test_existing_study_directory_is_not_overwritten(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mutransfer-runs" / "quick").mkdir(parents=True)
    assert main(["sweep", "--proxy-K", "6", "--target-K", "24"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "already exists" in err and "--resume" in err and "--name" in err
    assert not (tmp_path / "mlflow.db").exists()


def test_resume_without_a_study(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", "--resume", "--name", "nothing-here"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--resume: no study 'nothing-here' to resume" in err


def test_resume_with_a_conflicting_flag(tmp_path, monkeypatch, capsys):
    from mutransfer._study import load_study
    from mutransfer._study_folder.state import StudyDir

    monkeypatch.chdir(tmp_path)
    study, _ = load_study(K_ONLY_STUDY)
    sdir = StudyDir.for_study("quick")
    sdir.root.mkdir(parents=True)
    sdir.study_file.write_text(study.to_yaml())
    assert main(["sweep", "--resume", "--num-trials", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--num-trials 3 differs from the stored study (search.num_trials = 8)" in err
    from mutransfer._study_folder.portable import stored_tracking

    sdir.write_state({"phase": "proxies", **stored_tracking(f"sqlite:///{tmp_path / 'mlflow.db'}", sdir.root)})
    assert main(["sweep", "--resume", "--tracking-uri", "sqlite:///elsewhere.db"]) == 2
    err = capsys.readouterr().err
    assert f"--resume: study 'quick' logs to sqlite:///{tmp_path / 'mlflow.db'}, but this command names" in err
    assert "(--tracking-uri sqlite:///elsewhere.db); pass --tracking-uri sqlite:///" in err


# --------------------------------------------------------------------------- studies / ui


def test_studies_without_a_store(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["studies"]) == 2
    err = capsys.readouterr().err
    assert "mlflow.db not found" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "mlflow.db").exists()  # listing never creates a store


def test_studies_table_format():
    from mutransfer._tracking.listings import format_studies

    rows = [
        {
            "study": "quick",
            "status": "done",
            "problem": "burgers",
            "proxy_K": 6,
            "target_K": 24,
            "best_proxy_error": 0.0249,
            "target_error": 0.031,
            "proxy_device_seconds": 19.0,
            "target_device_seconds": 125.2,
            "device": "cpu",
        },
        {
            "study": "big",
            "status": "running",
            "problem": "darcy",
            "proxy_K": 6,
            "target_K": 24,
            "best_proxy_error": None,
            "target_error": None,
            "proxy_device_seconds": None,
            "target_device_seconds": None,
            "device": None,
        },
    ]
    lines = format_studies(rows).splitlines()
    assert lines[0].split()[:5] == ["study", "status", "problem", "proxy", "K"]
    assert "quick" in lines[2] and "0.0249" in lines[2] and "0.031" in lines[2] and "19 / 125 cpu" in lines[2]
    assert lines[3].split()[:5] == ["big", "running", "darcy", "6", "24"]
    assert format_studies([]).startswith("no studies")


def test_ui_parser_defaults_and_missing_store(tmp_path, monkeypatch, capsys):
    from mutransfer.cli.main import build_parser

    args = build_parser().parse_args(["ui"])
    assert (args.host, args.port) == ("127.0.0.1", 5000)
    monkeypatch.chdir(tmp_path)
    assert main(["ui", "--port", "5123"]) == 2
    assert "mlflow.db not found" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["ui", "--port", "70000"])
    assert info.value.code == 2


def test_cluster_fit_check_rejects_requests_no_single_node_can_hold():
    """With --address, a trial or target worker larger than every node would wait forever: one-line error instead."""
    from mutransfer._study import load_study
    from mutransfer._sweep.runner import check_cluster_fits
    from mutransfer.errors import UserInputError

    study, _ = load_study(K_ONLY_STUDY)  # quick: target.cpus_per_worker 2, cpus_per_trial 1
    check_cluster_fits(study, [{"CPU": 2.0}, {"CPU": 1.0}])
    with pytest.raises(
        UserInputError, match="target.cpus_per_worker: 2 but the largest node of the cluster has 1 CPUs"
    ):
        check_cluster_fits(study, [{"CPU": 1.0}, {"CPU": 1.0}])
    with pytest.raises(UserInputError, match="resources.cpus_per_trial"):
        check_cluster_fits(study, [{"CPU": 0.5}])


def test_a_name_or_address_ending_in_a_newline_is_refused_before_anything_is_created(tmp_path, monkeypatch, capsys):
    """Issue "A team deployment", edge case 3: the patterns are matched whole (a final newline is not ignored)."""
    from mutransfer.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(["sweep", "--name", "abc\n"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "letters, digits" in err
    assert main(["sweep", "--address", "127.0.0.1:6379\n"]) == 2
    assert list(tmp_path.iterdir()) == []


def test_a_warm_start_name_ending_in_a_newline_is_not_a_plain_study_name():
    """Edge case 3 for --warm-start: "quick\\n" is not read as the study "quick" (matched whole, like --name)."""
    from mutransfer._sweep.warm_start import _plain_name

    assert _plain_name("quick") and not _plain_name("quick\n") and not _plain_name("../quick")


def test_a_warm_start_name_ending_in_a_newline_is_refused_by_the_cli(tmp_path, monkeypatch, capsys):
    """Through `mutransfer sweep`: with a study folder "quick" beside it, `--warm-start "quick\\n"` is refused in one
    line, exit 2, nothing created. (The name check above is what keeps "quick\\n" from being read as "quick"; here
    the refusal is the CLI's contract: one line and no side effects.)"""
    from tests.sweep_helpers import k_only_study_text

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mutransfer-runs" / "quick").mkdir(parents=True)
    (tmp_path / "mutransfer-runs" / "quick" / "study.yaml").write_text(k_only_study_text())
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    rc = main(["sweep", "--name", "new", "--warm-start", "quick\n"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--warm-start" in err[0]
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_advice_comes_in_the_form_the_value_was_given(tmp_path):
    """Set by a flag, the advice is a flag ("e.g. --proxy-K 6"); set in a study file, it is YAML ("e.g. proxy_K: 6")."""
    proc = run_probe(tmp_path, "sweep", "--study", str(K_ONLY_STUDY), "--proxy-K", "24", "--target-K", "24")
    assert_no_compute(proc, tmp_path, "e.g. --proxy-K 6", "(set by --proxy-K)")
    assert "proxy_K: 6" not in proc.stderr
    path = write_study(tmp_path, lambda m: m.update(proxy_K=24, target_K=24))
    proc = run_probe(tmp_path, "sweep", "--study", path)
    assert_no_compute(proc, tmp_path, "e.g. proxy_K: 6")


BAD_COUNTS = [
    ("--num-trials", "10000000000000", "must be <= 10000"),
    ("--target-epochs", "100000000000000000000", "must be <= 100000"),
    ("--verify-seeds", "1000000", "must be an integer from 1 to 100"),
]


@pytest.fixture(scope="module")
def bad_counts(tmp_path_factory) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    """Each of :data:`BAD_COUNTS` swept in a folder of its own, in one probe process: flag -> (folder, outcome)."""
    cases = [
        (tmp_path_factory.mktemp("count"), ["sweep", *(["--verify"] if flag.startswith("--verify") else []), flag, v])
        for flag, v, _ in BAD_COUNTS
    ]
    return {flag: (cwd, proc) for (flag, _, _), (cwd, _), proc in zip(BAD_COUNTS, cases, run_probes(cases))}


@pytest.mark.parametrize("flag, value, fragment", BAD_COUNTS)
def test_a_count_no_run_could_finish_is_refused_before_anything_starts(bad_counts, flag, value, fragment):
    tmp_path, proc = bad_counts[flag]
    assert proc.returncode == 2 and fragment in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mutransfer-runs").exists()


@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda d: (d / "notes.txt").write_text("not a database\n"), "is not an SQLite database"),
        (lambda d: (d / "notes.txt").mkdir(), "is a directory; name a database file in it"),
    ],
)
def test_a_tracking_uri_that_is_no_sqlite_database_is_one_line(tmp_path, make, fragment):
    """Edge case 5 of "A team deployment": an 87- or 193-line traceback before; one line, exit 2, now."""
    make(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    proc = run_probe(tmp_path, "sweep", "--tracking-uri", "sqlite:///notes.txt")
    assert_no_compute(proc, tmp_path, f"tracking store {tmp_path / 'notes.txt'}: {fragment}")
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    if (tmp_path / "notes.txt").is_file():
        assert (tmp_path / "notes.txt").read_text() == "not a database\n"
