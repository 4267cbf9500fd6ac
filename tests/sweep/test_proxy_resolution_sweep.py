"""A study whose proxy shrinks in K, width and grid at once runs end to end: sweep, transfer, target, report,
MLflow, resume (issue "Proxies that pay", item 1). Real local Ray and a real MLflow sqlite store."""

from __future__ import annotations

import pytest
import yaml

from mutransfer._study import load_study
from mutransfer._sweep.cost import epoch_flops
from mutransfer.errors import UserInputError
from tests.sweep_helpers import mlflow_runs, write_tiny_study

pytestmark = pytest.mark.slow


def test_a_proxy_small_in_k_width_and_grid_trains_on_its_grid_and_transfers_to_the_full_one(
    tiny_data, tmp_path, capsys
):
    from mutransfer._sweep import SweepOptions, run_sweep

    path = write_tiny_study(tmp_path, tiny_data, name="cheap", trials=2)
    mapping = yaml.safe_load(path.read_text())
    mapping.update(proxy_resolution=32, target_width=32)  # tiny study: resolution 64, width 16, K 6 -> 24
    path.write_text(yaml.safe_dump(mapping, sort_keys=False))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    runs_dir = tmp_path / "runs"
    options = SweepOptions(
        study_path=str(path), runs_dir=str(runs_dir), overrides={"tracking_uri": uri}, executor="inprocess"
    )
    report = run_sweep(options)
    said = capsys.readouterr().err
    assert said.index("cost: the proxy costs") < said.index("[trial 1/2]")

    assert report["scaling"] == "K 6 -> 24, width 16 -> 32 (width-mup), grid 32 -> 64"
    assert report["proxy_resolution"] == 32 and report["target_resolution"] == 64
    assert report["target"]["status"] == "completed"
    rows = {r.split()[0] for r in report["transfer"]["table"].splitlines()[2:]}
    assert {"grid_points_per_axis", "hidden_lr", "spectral_lr"} <= rows

    # the proxies trained on 32 points (their MLflow runs say so, and their FLOPs are counted there)
    runs = mlflow_runs(uri)
    trials = [r for r in runs if r.data.tags.get("mutransfer.kind") == "proxy_trial"]
    assert len(trials) == 2 and {r.data.params["grid"] for r in trials} == {"32"}
    parent = next(r for r in runs if r.data.tags.get("mutransfer.kind") == "study")
    assert parent.data.params["proxy_resolution"] == "32" and parent.data.params["target_resolution"] == "64"
    study, _ = load_study(path)
    epochs = sum(int(t["epochs"]) for t in report["trial_table"]) if report.get("trial_table") else None
    per_epoch = epoch_flops(study, 6, 16, None, 32)
    assert epochs and report["compute"]["proxy_flops"] == pytest.approx(epochs * per_epoch)
    assert per_epoch < 0.6 * epoch_flops(study, 6, 16, None, 64)

    # resume: a finished study reports again; a different proxy grid is refused in one line
    again = run_sweep(SweepOptions(study_path=str(path), runs_dir=str(runs_dir), resume=True, overrides={}))
    assert again["already_complete"] and again["scaling"] == report["scaling"]
    with pytest.raises(UserInputError, match="proxy_resolution"):
        run_sweep(
            SweepOptions(
                study_path=None,
                runs_dir=str(runs_dir),
                resume=True,
                overrides={"name": "cheap", "proxy_resolution": 16},
            )
        )
