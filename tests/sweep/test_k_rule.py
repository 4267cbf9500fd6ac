"""`operator.k_exponent: data` end to end: the K rule's exponent is measured on the fit samples before the search,
kept in state.json and the report, and every model of the study (proxies, target) is built with it.

Real local Ray and a real MLflow sqlite store, as the other sweep tests.
"""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from mutransfer._diagnostics.k_exponent import estimate_k_exponent
from mutransfer._sweep.report import format_report
from operators import FNO
from operators.parametrization import data_aware_scale
from tests.sweep_helpers import write_tiny_study

pytestmark = pytest.mark.slow


def test_a_study_with_the_data_k_rule_measures_it_once_and_builds_every_model_with_it(tiny_data, tmp_path, capsys):
    from mutransfer._sweep import SweepOptions, run_sweep
    from mutransfer.data._hdf5_io import read_dataset

    path = write_tiny_study(tmp_path, tiny_data, name="krule", trials=2)
    mapping = yaml.safe_load(path.read_text())
    mapping["operator"]["k_exponent"] = "data"
    path.write_text(yaml.safe_dump(mapping, sort_keys=False))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    options = SweepOptions(
        study_path=str(path), runs_dir=str(tmp_path / "runs"), overrides={"tracking_uri": uri}, executor="inprocess"
    )
    report = run_sweep(options)
    said = capsys.readouterr().err
    # the exponent and the cost line come before any training
    assert said.index("K rule exponent rho = ") < said.index("cost: the proxy costs") < said.index("[trial 1/2]")
    assert report["compute"]["estimate_before_training"]["flop_ratio"] > 0

    k = report["k_rule"]
    rho = k["exponent"]
    assert k["modes"] == [6, 24] and len(k["layer_exponents"]) == 2
    assert k["samples"] == 32 - 32 // 5  # every fit sample (fewer than 64), no validation or test sample
    state = json.loads((tmp_path / "runs" / "krule" / "state.json").read_text())
    assert state["k_rule"] == k and report["k_exponent"] == rho
    assert "k_exponent: data" in (tmp_path / "runs" / "krule" / "study.yaml").read_text()

    # measured independently: the proxy (seed 0, the paper's rule) on the first fit samples at resolution 64
    raw = read_dataset(tiny_data)
    x = torch.as_tensor(raw["input"][: k["samples"], ::2]).float()[..., None]
    torch.manual_seed(0)
    probe = FNO(1, 1, 1, modes=6, width=16, layers=2, parametrization="mup", projection_channels=32)
    assert estimate_k_exponent(probe, x, 6, 24).exponent == pytest.approx(rho, rel=1e-4)
    assert 0.0 <= rho < 0.5, "smooth Burgers: the added modes carry little energy"

    # every proxy trial and the target ran with c(K) = (d log K)^(-rho/2), not the paper's 1/sqrt(d log K)
    for t in state["trials"]:
        if t["status"] == "completed":
            assert t["spectral_lr"] == pytest.approx(t["hp"]["lr"] * data_aware_scale(6, 1, rho), rel=1e-6)
    lr = report["target_hyperparameters"]["lr"]
    assert report["target"]["spectral_lr0"] == pytest.approx(lr * data_aware_scale(24, 1, rho), rel=1e-6)
    assert report["target"]["spectral_lr0"] != pytest.approx(lr * data_aware_scale(24, 1, 1.0), rel=1e-3)
    assert f"rho = {rho:.3g}" in report["transfer"]["table"]
    assert f"K rule: rho = {rho:.3g} measured on" in format_report(report)
