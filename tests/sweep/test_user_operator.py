"""A user's own operator in a study (issue 34, "bring your own operator"): ``operator.type: "mymodel:build"`` for a
``mymodel.py`` beside the study file, not installed, no PYTHONPATH, run from another directory. Every proxy trial
and the target build the user's class (on Ray: in worker processes), the optimizer's LRs follow the muP rules read
from the parameters, the saved target rebuilds from the factory, and a bad factory is one line, exit 2, before any
folder or run."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml

from tests.sweep_helpers import IN_PROCESS, driver_command, write_tiny_data

USER_MODULE = textwrap.dedent(
    '''
    """A user's 1-D spectral operator: channel-last (B, N, C) in and out; its spectral weight complex (in, out, K)."""
    import os

    import torch
    from torch import nn


    class Spectral1d(nn.Module):
        def __init__(self, width, K):
            super().__init__()
            self.K = K
            self.weight = nn.Parameter(torch.randn(width, width, K, dtype=torch.cfloat) / width)

        def forward(self, x):  # (B, C, N)
            z = torch.fft.rfft(x)
            out = torch.zeros_like(z)
            out[..., : self.K] = torch.einsum("bik,iok->bok", z[..., : self.K], self.weight)
            return torch.fft.irfft(out, n=x.shape[-1])


    class UserFNO(nn.Module):
        def __init__(self, K, width, in_channels, out_channels, layers):
            super().__init__()
            self.lift = nn.Linear(in_channels, width)
            self.spectral = nn.ModuleList(Spectral1d(width, K) for _ in range(layers))
            self.skip = nn.ModuleList(nn.Conv1d(width, width, 1) for _ in range(layers))
            self.readout = nn.Linear(width, out_channels)

        def forward(self, x):
            h = self.lift(x).movedim(-1, 1)
            for spectral, skip in zip(self.spectral, self.skip):
                h = torch.nn.functional.gelu(spectral(h) + skip(h))
            return self.readout(h.movedim(1, -1))


    def build(*, K, width, in_channels, out_channels, layers=2):
        model = UserFNO(K, width, in_channels, out_channels, layers)
        log = os.environ.get("BUILD_LOG")
        if log:  # which process built which size, on which device
            with open(log, "a") as f:
                f.write(f"{os.getpid()} {K} {width} {next(model.parameters()).device.type}\\n")
        return model
    '''
)


def _study(tmp_path: Path, *, type_: str = "mymodel:build", module: str | None = USER_MODULE, **top) -> Path:
    folder = tmp_path / "project"
    folder.mkdir(exist_ok=True)
    if module is not None:
        (folder / "mymodel.py").write_text(module)
    data = (
        write_tiny_data(tmp_path / "burgers.h5") if not (tmp_path / "burgers.h5").exists() else tmp_path / "burgers.h5"
    )
    study = {
        "name": "byo",
        "problem": {"name": "burgers", "data": str(data), "resolution": 64, "n_train": 32, "n_test": 16},
        "operator": {"type": type_, "width": 8, "layers": 2},
        "proxy_K": 6,
        "target_K": 12,
        "target_width": 16,
        "width_parametrization": "mup",
        "search_space": {"lr": {"type": "loguniform", "low": 1e-3, "high": 1e-2}},
        "search": {"num_trials": 2, "max_concurrent": 2},
        "budget": {"epochs": 2, "grace_period": 1},
        "target": {"epochs": 2, "num_workers": 1, "cpus_per_worker": 1},
        **top,
    }
    path = folder / "s.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


def _fake_plugin(tmp_path: Path) -> Path:
    """A folder holding an "installed" distribution ``myplug`` that offers ``tiny_user_fno = myplug_models:build`` in
    the entry-point group ``mutransfer.operators`` (put it on the path: PYTHONPATH, or sys.path)."""
    site = tmp_path / "site"
    (site / "myplug-0.1.dist-info").mkdir(parents=True)
    (site / "myplug-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: myplug\nVersion: 0.1\n")
    (site / "myplug-0.1.dist-info" / "entry_points.txt").write_text(
        "[mutransfer.operators]\ntiny_user_fno = myplug_models:build\n"
    )
    (site / "myplug_models.py").write_text(USER_MODULE)
    return site


def _sweep(tmp_path: Path, study: Path, *extra: str) -> tuple[subprocess.CompletedProcess, Path]:
    """The sweep from a directory that is not the study's (the module is found beside the study file only)."""
    cmd, env = driver_command(study, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    log = tmp_path / "builds.log"
    env = dict(env, BUILD_LOG=str(log))
    env.pop("PYTHONPATH", None)
    cmd += ["--runs-dir", str(tmp_path / "runs"), "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", *extra]
    proc = subprocess.run(cmd, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=900)
    return proc, log


def _builds(log: Path) -> list[tuple[int, int, int, str]]:
    rows = [line.split() for line in log.read_text().splitlines()]
    return [(int(pid), int(k), int(width), device) for pid, k, width, device in rows]


def _check_lrs(report: dict, label: str = "UserFNO") -> None:
    """The target's spectral LR, read from its optimizer in the process that trained it: the proxy's (the master
    LR, at the proxy's own sizes) x sqrt(log K_p / log K_t) x width_p / width_t."""
    lr = report["target_hyperparameters"]["lr"]
    best = next(t for t in report["trial_table"] if t["best"])
    assert best["spectral_lr"] == pytest.approx(lr, rel=1e-9)
    want = lr * math.sqrt(math.log(6) / math.log(12)) * 8 / 16
    assert report["target"]["spectral_lr0"] == pytest.approx(want, rel=1e-9)
    assert report["proxy_model"] == f"{label}-1D K=6 width 8" and report["target_model"] == f"{label}-1D K=12 width 16"


@pytest.mark.slow  # a whole training end to end (the default suite stays under 5 min)
def test_a_user_model_beside_the_study_file_is_tuned_and_its_target_rebuilt(tmp_path):
    proc, log = _sweep(tmp_path, _study(tmp_path), *IN_PROCESS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    _check_lrs(report)
    real = {(k, width) for _, k, width, device in _builds(log) if device == "cpu"}
    assert {(6, 8), (12, 16)} <= real
    # the transfer record reads the facts: relative to the proxy, the readout in Table 3's form
    rows = {row["name"]: row for row in report["transfer"]["quantities"]}
    assert rows["spectral_lr"]["proxy"] == pytest.approx(report["target_hyperparameters"]["lr"], rel=1e-9)
    assert "readout_lr" in rows and "output_multiplier" not in rows
    # the saved target: the factory's path and arguments, no pickle; rebuilt from the module in the working directory
    config = json.loads((tmp_path / "runs" / "byo" / "model" / "config.json").read_text())
    assert config["model_class"] == "UserFNO" and config["model_config"]["factory"] == "mymodel:build"
    data = tmp_path / "burgers.h5"
    cmd, env = driver_command(data, tmp_path)
    evaluate = [cmd[0], "-m", "mutransfer.cli.main", "evaluate", "byo", "--runs-dir", str(tmp_path / "runs")]
    ok = subprocess.run(
        [*evaluate, "--data", str(data)], cwd=tmp_path / "project", env=env, capture_output=True, text=True, timeout=300
    )
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "relative L2" in ok.stdout
    # elsewhere the module is not importable: one line naming it, not a traceback
    elsewhere = subprocess.run(
        [*evaluate, "--data", str(data)],
        cwd=tmp_path / "elsewhere",
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert elsewhere.returncode == 2 and "neither a module in the working directory" in elsewhere.stderr
    assert len(elsewhere.stderr.strip().splitlines()) == 1 and "Traceback" not in elsewhere.stderr


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["ray", "ray-population"])
def test_on_ray_every_trial_and_the_target_build_the_users_class_in_their_workers(tmp_path, executor):
    """Issue 34's first finding: a family registered in the driver never reached the Ray workers (KeyError in every
    trial). Here the proxies run as Ray Tune trials (``ray``) or a Ray task (``ray-population``: the user's model
    stacks under ``vmap``, so the two trials train as one population, said once) and the target on Ray, each in its
    own worker process."""
    proc, log = _sweep(tmp_path, _study(tmp_path), "--executor", executor)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    if executor == "ray-population":
        assert (
            report["search_summary"]
            == "population executor on Ray: 2 of 2 trials trained in 1 population(s) (2–2 each)"
        )
    _check_lrs(report)
    assert report["trials"]["completed"] == 2
    builds = _builds(log)
    driver = builds[0][0]  # the driver reads the study first (its parse-time check builds on meta)
    workers = {(pid, k, width) for pid, k, width, device in builds if device == "cpu" and pid != driver}
    assert {(k, w) for _, k, w in workers} >= {(6, 8), (12, 16)}, builds
    assert len({pid for pid, _, _ in workers}) >= 2, builds  # the trials' worker(s) and the target's


_BAD = {
    "no module": (None, "mymodel:build", "no module 'mymodel' is importable; put mymodel.py beside the study file"),
    "no function": ("def other():\n    pass\n", "mymodel:build", "module mymodel has no 'build'"),
    "not callable": ("build = 3\n", "mymodel:build", "build is a int, not a function"),
    "bad form": (None, "mymodel:", "a factory is named 'module:function'"),
    "import fails": (
        "raise RuntimeError('no GPU here')\n",
        "mymodel:build",
        "importing mymodel failed: RuntimeError: no GPU here",
    ),
    "factory fails": (
        "def build(**kw):\n    raise ValueError('width must be even')\n",
        "mymodel:build",
        "failed: ValueError: width must be even",
    ),
    "not a module": (
        "def build(**kw):\n    return 'model'\n",
        "mymodel:build",
        "returned a str, not a torch.nn.Module",
    ),
    "ignores K": (
        USER_MODULE.replace("model = UserFNO(K, width", "model = UserFNO(4, width"),
        "mymodel:build",
        "K goes from 6 to 12 but no parameter of mymodel:build's model grows with it: does build() use its K argument?",
    ),
    "ambiguous": (
        USER_MODULE.replace(
            "self.readout = nn.Linear(width, out_channels)",
            "self.readout = nn.Linear(width, out_channels)\n        self.mix = nn.Parameter(torch.zeros(width, 3))",
        ),
        "mymodel:build",
        "'mix' (16, 3) grows with the width in dim 0 only and is no dense layer's weight: input or readout?",
    ),
}


@pytest.mark.parametrize("case", sorted(_BAD))
def test_a_bad_factory_is_one_line_exit_2_and_nothing_is_made(tmp_path, case):
    module, type_, needle = _BAD[case]
    proc, _ = _sweep(tmp_path, _study(tmp_path, type_=type_, module=module), *IN_PROCESS)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert needle in lines[-1] and "operator.type" in lines[-1], lines
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "mlflow.db").exists()


_TUCKER = """
from neuralop.models import TFNO

from mutransfer.neuralop import NeuralopModel


def build(*, K, width, in_channels, out_channels, **options):
    return NeuralopModel(TFNO(n_modes=(2 * K,), in_channels=in_channels, out_channels=out_channels,
                              hidden_channels=width, n_layers=2, factorization="tucker", rank=0.5))
"""


def test_a_factorized_spectral_weight_is_one_line_exit_2_and_nothing_is_made(tmp_path):
    """Issue 34: an unsupported factorization (neuraloperator's TFNO with Tucker factors) is refused before anything
    is made, naming the parameter and the supported form."""
    pytest.importorskip("neuralop")
    proc, _ = _sweep(tmp_path, _study(tmp_path, type_="mymodel:build", module=_TUCKER), *IN_PROCESS)
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert "follows neither rule; use a dense spectral weight (neuraloperator: factorization=None)" in line, line
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "mlflow.db").exists()


def test_on_a_cluster_the_users_module_ships_with_the_job(tmp_path):
    """A cluster's nodes may not see the driver's folders: the module goes with the job as Ray ``py_modules``; a
    built-in operator or an installed module ships nothing."""
    from mutransfer._local_ray import cluster_runtime_env
    from mutransfer._study.files import load_study
    from operators.factory import module_paths
    from operators.family import unregister_family

    path = _study(tmp_path)
    try:
        study, _ = load_study(path)  # registers the factory's family in this process: removed below
    finally:
        unregister_family("mymodel:build")
        sys.modules.pop("mymodel", None)
        if str(path.parent.resolve()) in sys.path:
            sys.path.remove(str(path.parent.resolve()))
    code = module_paths(study.operator.type, study.operator.factory_dir)
    assert code == (str((tmp_path / "project" / "mymodel.py").resolve()),)
    env = cluster_runtime_env(code)
    assert env is not None and env["py_modules"] == list(code)
    assert module_paths("fno", None) == () and module_paths("numpy:ones", None) == ()
    assert "py_modules" not in (cluster_runtime_env(()) or {})


def test_the_coordinate_check_of_a_factory_under_the_standard_parametrization_is_refused(tmp_path):
    """The factory's check measures its muP facts across K: a study that trains it under `standard` has none to
    measure, and says so in one line before anything is made."""
    proc, _ = _sweep(tmp_path, _study(tmp_path, parametrization="standard"), *IN_PROCESS, "--coord-check")
    assert proc.returncode == 2 and "--coord-check on operator.type mymodel:build measures its muP facts" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "runs").exists()


@pytest.mark.slow  # a whole training end to end (the default suite stays under 5 min)
def test_the_coordinate_check_measures_the_users_own_model(tmp_path):
    """--coord-check on a factory (issue 34 item 1; it was refused: it built the project's FNO) measures the user's
    model: the gate builds the user's class at K = 8, the geometric mean of the proxy's 6 and the target's 12, which
    no trial or target builds; its verdict, reported only, is in the report and its curves in coord_check.json."""
    proc, log = _sweep(tmp_path, _study(tmp_path), *IN_PROCESS, "--coord-check")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["coord_check"]["modes"] == [6, 8, 12] and report["coord_check"]["blocks"] is False
    assert report["target"]["status"] == "completed"  # it never blocks
    payload = json.loads((tmp_path / "runs" / "byo" / "coord_check.json").read_text())
    assert [c["rule"] for c in payload["curves"]] == ["mup", "wrong"] and payload["verdict"] == report["coord_check"][
        "verdict"
    ]
    built = {(int(k), int(w)) for _, k, w, _ in (line.split() for line in log.read_text().splitlines())}
    assert (8, 8) in built, built


@pytest.mark.slow  # a whole training end to end (the default suite stays under 5 min)
def test_the_k_rules_exponent_is_measured_on_the_users_model(tmp_path):
    """``operator.k_exponent: data`` on a factory (issue 34 item 1; it was refused, "applies to fno only"): rho is
    measured at the inputs of the user's two layers holding spectral weights, and the target's spectral LR, read
    from its optimizer, is the proxy's x (log K_p / log K_t)^(rho/2) x width_p / width_t."""
    operator = {"type": "mymodel:build", "width": 8, "layers": 2, "k_exponent": "data"}
    proc, _ = _sweep(tmp_path, _study(tmp_path, operator=operator), *IN_PROCESS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    rho = report["k_rule"]["exponent"]
    assert len(report["k_rule"]["layer_exponents"]) == 2 and report["k_rule"]["modes"] == [6, 12]
    lr = report["target_hyperparameters"]["lr"]
    want = lr * (math.log(6) / math.log(12)) ** (rho / 2) * 8 / 16
    assert report["target"]["spectral_lr0"] == pytest.approx(want, rel=1e-9)


@pytest.mark.slow  # a whole training end to end (the default suite stays under 5 min)
def test_neuraloperators_fno_is_tuned_from_its_installed_factory(tmp_path):
    """``operator.type: mutransfer.neuralop:fno1d``: an installed module, no file beside the study."""
    pytest.importorskip("neuralop")
    study = _study(
        tmp_path,
        type_="mutransfer.neuralop:fno1d",
        module=None,
        operator={"type": "mutransfer.neuralop:fno1d", "width": 8, "options": {"layers": 2}},
    )
    proc, _ = _sweep(tmp_path, study, *IN_PROCESS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    _check_lrs(report, label="NeuralopModel")


def test_train_takes_a_factory_from_the_working_directory(tmp_path):
    """`mutransfer train --operator mymodel:build`: the factory imported from the working directory, its own
    arguments through --option (layers included), K and the width through --modes and --width."""
    study = _study(tmp_path)  # writes mymodel.py and the data
    cmd, env = driver_command(study, tmp_path)
    train = [cmd[0], "-m", "mutransfer.cli.main", "train", "--operator", "mymodel:build", "--problem", "burgers"]
    train += ["--data", str(tmp_path / "burgers.h5"), "--modes", "4", "--width", "8", "--option", "layers=1"]
    done = subprocess.run(
        [*train, "--epochs", "1"], cwd=study.parent, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "UserFNO-1D K=4 width 8" in done.stdout + done.stderr
    # its memory check counts the activations its forward keeps (operators/saved_activations.py): 64 KiB holds the
    # parameters' four copies (under 10 KiB) but not 20 samples' activations, so the refusal names the batch that fits
    small = [*train, "--batch-size", "20", "--device-memory", "64KiB"]
    refused = subprocess.run(small, cwd=study.parent, env=env, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr[-2000:]
    assert re.search(
        r"needs .* but the memory limit set \(--device-memory\) is 64\.0 KiB; use a batch size of at most \d+,",
        refused.stderr,
    ), refused.stderr


@pytest.mark.slow  # a whole training end to end (the default suite stays under 5 min)
def test_an_installed_plugin_is_an_operator_by_its_name(tmp_path):
    """A package that declares ``tiny_user_fno = myplug_models:build`` in the entry-point group ``mutransfer.operators``
    offers ``operator.type: tiny_user_fno`` (and ``train --operator``, ``check-operator``), found in any process."""
    site = _fake_plugin(tmp_path)
    study = _study(tmp_path, type_="tiny_user_fno", module=None)
    cmd, env = driver_command(study, tmp_path)
    env = dict(env, PYTHONPATH=str(site))
    cmd += ["--runs-dir", str(tmp_path / "runs"), "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", *IN_PROCESS]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    _check_lrs(report)
    assert report["operator"] == "tiny_user_fno"
    # without the plug-in installed, the name is unknown: one line listing what is known
    gone = subprocess.run(cmd, cwd=tmp_path, env=dict(env, PYTHONPATH=""), capture_output=True, text=True, timeout=300)
    assert gone.returncode == 2 and "'tiny_user_fno' is unknown" in gone.stderr, gone.stderr[-2000:]


def test_a_folder_cannot_choose_an_installed_function_to_run(tmp_path, monkeypatch):
    """A saved model's config or a study folder's study.yaml names its factory; from a folder only a module of the
    working directory or an installed plug-in is imported. ``torch.hub:load`` with the folder's options would
    fetch and run a repository of the folder writer's choosing."""
    from mutransfer._study import study_from_yaml_text
    from mutransfer.errors import UserInputError
    from operators.errors import OperatorConfigError
    from operators.family import OPERATORS, family_of_config

    monkeypatch.chdir(tmp_path)
    config = {"factory": "torch.hub:load", "K": 6, "width": 8, "options": {"repo_or_dir": "someone/repo"}}
    with pytest.raises(OperatorConfigError, match="neither a module in the working directory nor an installed plug-in"):
        family_of_config(config)
    text = yaml.safe_dump({**yaml.safe_load(_study(tmp_path).read_text()), "operator": {"type": "torch.hub:load"}})
    with pytest.raises(UserInputError, match="a study folder names this factory"):
        study_from_yaml_text(text, "runs/x/study.yaml")
    assert "torch.hub:load" not in OPERATORS


def test_a_proxy_sized_model_knows_its_spectral_weights():
    """At the proxy's own sizes nothing grows between model and base; the roles come from a probe twice the size on
    the meta device, so clip_value and init_scale act on the spectral weights of every proxy trial."""
    pytest.importorskip("neuralop")
    from operators.factory import factory_family
    from operators.family import ModelSpec, unregister_family
    from operators.parametrization import clip_spectral_gradients, spectral_parameters

    family = factory_family("mutransfer.neuralop:fno1d", None)
    try:
        spec = ModelSpec(dim=1, input_channels=1, output_channels=1, width=8, layers=2, modes=6, base_modes=6)
        model = family.build(spec)
        spectral = spectral_parameters(model)
        assert len(spectral) == 4  # 4 Fourier layers, one complex weight each
        model(torch.randn(2, 32, 1)).pow(2).sum().backward()
        clip_spectral_gradients(model, 1e-6)
        assert all(float(torch.view_as_real(p.grad).abs().max()) <= 1e-6 for p in spectral)
    finally:
        unregister_family("mutransfer.neuralop:fno1d")


def test_a_plugin_study_parses_again_in_the_same_process(tmp_path, monkeypatch):
    """A resume or the Python API reads the study a second time, after its plug-in's family is registered."""
    from mutransfer._study.files import load_study
    from operators.family import unregister_family

    site = _fake_plugin(tmp_path)
    monkeypatch.syspath_prepend(str(site))
    path = _study(
        tmp_path,
        type_="tiny_user_fno",
        module=None,
        operator={"type": "tiny_user_fno", "width": 8, "options": {"layers": 1}},
    )
    try:
        first, _ = load_study(path)
        again, _ = load_study(path)
        assert first == again and again.family.name == "tiny_user_fno" and again.operator.options == {"layers": 1}
    finally:
        unregister_family("tiny_user_fno")
        sys.modules.pop("myplug_models", None)


def test_a_factorys_depth_is_searched_among_its_own_options_not_as_operator_layers(tmp_path, monkeypatch):
    """A factory is not given operator.layers, so searching it would change nothing: refused, with the fix; the
    factory's own option (here ``layers``, which the study's options set) is searched instead."""
    from mutransfer._study.files import load_study
    from mutransfer.errors import UserInputError
    from operators.family import unregister_family

    site = _fake_plugin(tmp_path)
    monkeypatch.syspath_prepend(str(site))
    space = {"lr": {"type": "loguniform", "low": 1e-3, "high": 1e-2}}
    operator = {"type": "tiny_user_fno", "width": 8, "options": {"layers": 1}}
    try:
        refused = _study(
            tmp_path,
            type_="tiny_user_fno",
            module=None,
            operator=operator,
            search_space={**space, "operator.layers": {"type": "int", "low": 1, "high": 2}},
        )
        with pytest.raises(UserInputError, match="search_space.operator.layers: a factory builds its own depth"):
            load_study(refused)
        searched = _study(
            tmp_path,
            type_="tiny_user_fno",
            module=None,
            operator=operator,
            search_space={**space, "operator.options.layers": {"type": "choice", "values": [1, 2]}},
        )
        study, _ = load_study(searched)
        assert study.search_space["operator.options.layers"].values == [1, 2]
    finally:
        unregister_family("tiny_user_fno")
        sys.modules.pop("myplug_models", None)
