"""The `mutransfer` CLI: outputs, and bad input as one line on stderr with exit code 2."""

import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest

import mutransfer._problems as problems
from mutransfer.cli.main import main
from tests.cli_batch import run_cli_batch
from tests.repo_paths import ROOT


def run_cli(*args, env=None):
    """Run the installed CLI in a subprocess (as a user would)."""
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "mutransfer.cli.main", *map(str, args)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=600,
    )


def assert_user_error(proc, *fragments):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_console_script_is_installed():
    exe = shutil.which("mutransfer")
    assert exe is not None
    proc = subprocess.run([exe, "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and "mutransfer" in proc.stdout


def test_transfer_json(capsys):
    assert main(["transfer", "--dim", "3", "--proxy-K", "3", "--target-K", "24", "--lr", "1e-3", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    rows = {q["name"]: q for q in record["quantities"]}
    assert rows["master_lr"]["target"] == 1e-3
    assert rows["spectral_lr"]["factor"] == pytest.approx(np.sqrt(np.log(3) / np.log(24)))


def test_transfer_table(capsys):
    assert (
        main(["transfer", "--dim", "1", "--proxy-K", "6", "--target-K", "6", "--lr", "2e-3", "--init-scale", "0.5"])
        == 0
    )
    out = capsys.readouterr().out
    assert "spectral_init_variance" in out and "K_proxy=6 -> K_target=6" in out


def test_transfer_takes_the_model_from_a_study_and_defaults_to_operator_widths_default(capsys):
    """`transfer --study` (the default study: K 6 -> 24, width 16 -> 64, grid 32 -> 128) gives the table the same
    model given by flags gives; without --width the flags' width is operator.width's default, 32."""
    args = ["--lr", "3e-3", "--init-scale", "1", "--json"]
    assert main(["transfer", "--study", *args]) == 0
    from_study = json.loads(capsys.readouterr().out)
    model = ["--dim", "1", "--proxy-K", "6", "--target-K", "24", "--width", "16", "--target-width", "64"]
    assert main(["transfer", *model, "--proxy-resolution", "32", "--target-resolution", "128", *args]) == 0
    from_flags = json.loads(capsys.readouterr().out)
    assert from_study["quantities"] == from_flags["quantities"]
    std = {q["name"]: q for q in from_study["quantities"]}["spectral_init_std"]["proxy"]
    assert std == pytest.approx(1 / 16 / np.sqrt(np.log(6)))  # muP: (1/m_in) / sqrt(d log K) at m = 16
    assert main(["transfer", "--study", "--lr", "3e-3"]) == 0
    header = "muTransfer  d=1  K_proxy=6 -> K_target=24  width_proxy=16 -> width_target=64"
    assert capsys.readouterr().out.splitlines()[0] == header
    assert main(["transfer", "--dim", "1", "--proxy-K", "6", "--target-K", "24", "--lr", "3e-3"]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("width=32")


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (
            ["transfer", "--study", "--dim", "2", "--lr", "1e-3"],
            "--study takes the model from the study file; drop --dim",
        ),
        (["transfer", "--lr", "1e-3"], "give --dim, --proxy-K, --target-K, or --study FILE"),
    ],
)
def test_transfer_needs_a_model_from_flags_or_a_study_not_both(capsys, argv, fragment):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and fragment in err[0]


def test_plan_paper_scale_json(capsys):
    assert (
        main(
            [
                "plan",
                "--dim",
                "3",
                "--modes",
                "24",
                "--width",
                "64",
                "--layers",
                "4",
                "--grid",
                "64",
                "--batch",
                "2",
                "--json",
            ]
        )
        == 0
    )
    plan = json.loads(capsys.readouterr().out)
    assert plan["spectral_params"] == 905_969_664
    assert plan["grid"] == [64, 64, 64]
    assert plan["total_bytes"] > plan["adam_bytes"] > 0


BAD_INPUTS = [
    (["transfer", "--dim", "1", "--proxy-K", "1", "--target-K", "8", "--lr", "1e-3"], ["proxy modes 1", ">= 2"]),
    (["transfer", "--dim", "1", "--proxy-K", "4", "--target-K", "8", "--lr", "-1"], ["--lr", "must be > 0"]),
    (["plan", "--dim", "2", "--modes", "-3", "--width", "8", "--layers", "2"], ["--modes", "positive integer"]),
    (
        ["plan", "--dim", "2", "--modes", "20", "--width", "8", "--layers", "2", "--grid", "32"],
        ["modes 20 too large"],
    ),
    (["plan", "--dim", "4", "--modes", "2", "--width", "8", "--layers", "2"], ["dim 4"]),
    (["train", "--parametrization", "ntk"], ["--parametrization", "invalid choice"]),
    (["train", "--batch-size", "-5"], ["--batch-size", "positive integer"]),
    (["train", "--warmup", "1.5"], ["--warmup", "must be in [0, 1)"]),
    (["data", "inspect", "/nonexistent/file.h5"], ["/nonexistent/file.h5"]),
    (["data", "generate", "darcy", "--n", "0", "--resolution", "9", "--out", "x.h5"], ["--n"]),
]


@pytest.fixture(scope="module")
def bad_inputs(tmp_path_factory):
    """Each of :data:`BAD_INPUTS` run in a folder of its own, all in one interpreter (tests/cli_batch.py)."""
    return run_cli_batch([(tmp_path_factory.mktemp("bad"), args) for args, _ in BAD_INPUTS])


@pytest.mark.parametrize("case", range(len(BAD_INPUTS)))
def test_bad_input_is_one_line_and_exit_2(bad_inputs, case):
    assert_user_error(bad_inputs[case], *BAD_INPUTS[case][1])


@pytest.mark.slow  # a whole training end to end (the default suite stays under 5 min)
def test_generate_inspect_and_train_end_to_end(tmp_path):
    data = tmp_path / "darcy.h5"
    proc = run_cli(
        "data", "generate", "darcy", "--n", "24", "--resolution", "13", "--out", data, "--seed", "3", "--no-progress"
    )
    assert proc.returncode == 0, proc.stderr
    with h5py.File(data, "r") as f:
        assert f["input"].shape == (24, 13, 13) and f.attrs["problem"] == "darcy" and f.attrs["seed"] == 3

    proc = run_cli("data", "inspect", data, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["n_samples"] == 24

    ckpt = tmp_path / "run"
    args = [
        "train",
        "--problem",
        "darcy",
        "--data",
        data,
        "--modes",
        "3",
        "--width",
        "8",
        "--layers",
        "2",
        "--epochs",
        "2",
        "--batch-size",
        "4",
        "--n-train",
        "16",
        "--n-test",
        "8",
        "--padding",
        "2",
        "--schedule",  # the LR held over these 2 epochs (cosine, the default, anneals it to 0 by the second)
        "step",
        "--checkpoint-dir",
        ckpt,
        "--no-progress",
        "--json",
    ]
    proc = run_cli(*args)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["result"]["status"] == "completed"
    assert summary["result"]["epochs_completed"] == 2
    assert 0 < summary["result"]["test_error"] < 10
    assert summary["model"]["parametrization"] == "mup" and summary["grid"] == [13, 13]
    assert (ckpt / "checkpoint.pt").exists()

    # K too large for the 13x13 grid (+2 padding): refused before any training
    assert_user_error(run_cli(*[a if a != "3" else "9" for a in args]), "modes 9 too large")
    # muP with K = 1
    bad = list(args)
    bad[bad.index("--modes") + 1] = "1"
    assert_user_error(run_cli(*bad), "K = 1")
    # problem mismatch
    assert_user_error(run_cli("train", "--problem", "burgers", "--data", data), "holds 'darcy' data", "--problem darcy")


def test_train_rejects_missing_and_malformed_data(tmp_path):
    junk = tmp_path / "junk.h5"
    junk.write_text("not an hdf5 file")
    partial = tmp_path / "partial.h5"
    with h5py.File(partial, "w") as f:
        f["input"] = np.zeros((4, 9, 9), dtype=np.float32)
    missing, junk_out, partial_out = run_cli_batch(
        [(tmp_path, ["train", "--data", path]) for path in (tmp_path / "missing.h5", junk, partial)]
    )
    assert_user_error(missing, "missing.h5")
    assert_user_error(junk_out, "junk.h5")
    assert_user_error(partial_out, "partial.h5", "output")


def test_train_without_data_generates_and_caches(tmp_path, monkeypatch, capsys):
    """No --data: a default dataset is generated once into the cache, then reused."""
    monkeypatch.setenv("MUTRANSFER_CACHE", str(tmp_path))
    small = problems.Problem(
        **{
            **problems.PROBLEMS["burgers"].__dict__,
            "n_train": 12,
            "n_test": 4,
            "generated_resolution": 128,
            "resolution": 64,
        }
    )
    monkeypatch.setitem(problems.PROBLEMS, "burgers", small)
    args = [
        "train",
        "--problem",
        "burgers",
        "--modes",
        "4",
        "--width",
        "8",
        "--layers",
        "2",
        "--epochs",
        "1",
        "--batch-size",
        "4",
        "--no-progress",
        "--json",
    ]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    cached = list((tmp_path / "data").glob("burgers_*.h5"))
    assert len(cached) == 1 and first["data"] == str(cached[0])
    mtime = cached[0].stat().st_mtime_ns
    assert main(args) == 0
    second = json.loads(capsys.readouterr().out)
    assert cached[0].stat().st_mtime_ns == mtime  # reused, not regenerated
    assert second["result"]["test_error"] == pytest.approx(first["result"]["test_error"])
    assert first["grid"] == [64] and first["n_train"] == 12


def test_a_closed_stdout_pipe_is_not_an_error():
    """`mutransfer … | head`: the reader goes away before the output is written; exit 0, no traceback."""
    root = str(ROOT)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mutransfer",
            "transfer",
            "--dim",
            "1",
            "--proxy-K",
            "4",
            "--target-K",
            "16",
            "--lr",
            "1e-3",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ, PYTHONPATH=root),
    )
    proc.stdout.close()  # before the interpreter has even imported torch
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err


# --------------------------------------------------------------------------- suggestions and overwrite refusals


def test_a_mistyped_flag_gets_the_closest_flag_of_its_own_command(capsys):
    from mutransfer.cli.main import main

    with pytest.raises(SystemExit) as excinfo:
        main(["sweep", "--taget-K", "24"])
    err = capsys.readouterr().err.strip()
    assert excinfo.value.code == 2 and "\n" not in err
    assert "did you mean --target-K (not --taget-K)?" in err and "(see mutransfer sweep --help)" in err


def test_a_flag_nothing_resembles_gets_no_guess(capsys):
    from mutransfer.cli.main import main

    with pytest.raises(SystemExit) as excinfo:
        main(["sweep", "--zzzzzz"])
    err = capsys.readouterr().err
    assert excinfo.value.code == 2 and "unrecognized arguments: --zzzzzz" in err and "did you mean" not in err


def test_a_mistyped_subcommand_gets_the_closest_one(capsys):
    from mutransfer.cli.main import main

    with pytest.raises(SystemExit) as excinfo:
        main(["sweeep"])
    err = capsys.readouterr().err
    assert excinfo.value.code == 2 and "did you mean 'sweep'?" in err


def test_report_of_an_unknown_study_lists_the_studies_there(tmp_path, capsys):
    from mutransfer.cli.main import main

    for name in ("quick", "darcy-big"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "state.json").write_text("{}")
    (tmp_path / "not-a-study").mkdir()
    assert main(["report", "quik", "--runs-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "did you mean 'quick'?" in err
    assert "darcy-big, quick" in err and "not-a-study" not in err


def test_data_generate_keeps_an_existing_file_unless_forced(tmp_path, capsys):
    from mutransfer.cli.main import main

    out = tmp_path / "b.h5"
    out.write_bytes(b"precious")
    args = ["data", "generate", "burgers", "--n", "2", "--resolution", "16", "--out", str(out), "--no-progress"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "the file exists and is kept; pass --force" in err
    assert out.read_bytes() == b"precious"
    assert main([*args, "--force"]) == 0 and out.read_bytes() != b"precious"
    assert main(["data", "generate", "burgers", "--n", "2", "--resolution", "16", "--out", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
