"""Selection reads the validation split, never the test split (issue: verdicts you can trust, item 1).

End to end on a real local Ray and MLflow sqlite: the same study on two data files that differ **only in
their test samples** (the second's test outputs are noise) must choose exactly alike — the same trials,
the same validation errors, the same winner, the same transferred LR, the same target validation error —
while the target's test error differs. If any selection read the test split, the two runs would part.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tests.sweep_helpers import IN_PROCESS, mlflow_runs, write_tiny_study

pytestmark = pytest.mark.slow


def _pair_of_data_files(directory):
    """(clean, poisoned): 48 Burgers samples; the poisoned file's last 16 (the test split) outputs are noise."""
    from mutransfer.data._burgers import generate_burgers
    from mutransfer.data._hdf5_io import write_dataset

    data = generate_burgers(48, 128, seed=0, progress=False)
    clean = write_dataset(directory / "clean.h5", data)
    rng = np.random.default_rng(1)
    poisoned = dict(data, output=data["output"].copy())
    poisoned["output"][-16:] = rng.normal(0.0, 5.0, poisoned["output"][-16:].shape)
    return clean, write_dataset(directory / "poisoned.h5", poisoned)


def _run(main, study, runs, uri, capsys) -> dict:
    rc = main(["sweep", "--study", str(study), "--runs-dir", str(runs), "--tracking-uri", uri, "--json", *IN_PROCESS])
    out = capsys.readouterr().out
    assert rc == 0, out
    return json.loads(out)


def test_the_test_split_is_never_read_while_selecting(tmp_path, capsys):
    from mutransfer.cli.main import main

    clean, poisoned = _pair_of_data_files(tmp_path)
    reports, uris = [], []
    for name, data in (("clean", clean), ("poisoned", poisoned)):
        # one trial at a time: TPE then sees the results in the same order in both runs
        study = write_tiny_study(tmp_path, data, name=name, trials=3, max_concurrent=1, epochs=2, target_epochs=2)
        uri = f"sqlite:///{tmp_path / (name + '.db')}"
        reports.append(_run(main, study, tmp_path / f"runs-{name}", uri, capsys))
        uris.append(uri)
    a, b = reports
    assert a["selection"]["split"] == "validation" and a["n_val"] == 32 // 5 and a["selection"]["n_fit"] == 32 - 6

    # every selection alike: trials, their validation errors, the winner, the transfer, the target's val error
    for ta, tb in zip(a["trial_table"], b["trial_table"], strict=True):
        assert ta["config"] == tb["config"] and ta["status"] == tb["status"]
        assert ta["val_error"] == pytest.approx(tb["val_error"], rel=1e-6)
    assert a["best_proxy"]["trial_id"] == b["best_proxy"]["trial_id"]
    assert a["target_hyperparameters"]["lr"] == pytest.approx(b["target_hyperparameters"]["lr"], rel=1e-12)
    assert a["target"]["val_error"] == pytest.approx(b["target"]["val_error"], rel=1e-5)
    # ... while the test split, read by the target alone, differs
    assert math.isfinite(a["target"]["test_error"]) and math.isfinite(b["target"]["test_error"])
    assert b["target"]["test_error"] != pytest.approx(a["target"]["test_error"], rel=0.05)

    # MLflow: the proxy trials log validation errors only; the target logs both
    runs = mlflow_runs(uris[0])
    trials = [r for r in runs if r.data.tags.get("mutransfer.kind") == "proxy_trial"]
    target = next(r for r in runs if r.data.tags.get("mutransfer.kind") == "target")
    assert trials and all(
        "final_val_error" in r.data.metrics and "final_test_error" not in r.data.metrics for r in trials
    )
    assert {"final_val_error", "final_test_error"} <= set(target.data.metrics)
