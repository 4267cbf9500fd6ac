"""The target's folder as the one-CPU-worker trainer writes it (mutransfer._sweep._target_here; on Ray its actor runs
the same function): checkpoint folders readable as any other folder the user makes, and what a publication cut
short by a kill left removed on the next start."""

from __future__ import annotations

import os
import stat

from mutransfer._sweep._target_here import TargetJob, train_target_here
from tests.sweep_helpers import write_tiny_study


def test_checkpoint_folders_follow_the_umask_and_a_cut_publication_is_cleared(tiny_data, tmp_path):
    from mutransfer._study import load_study
    from mutransfer._study.models import merge_hyperparameters
    from mutransfer.data._loading import load_split

    study, _ = load_study(write_tiny_study(tmp_path, tiny_data, target_epochs=2))
    data = load_split(tiny_data, n_train=32, n_test=16, resolution=64)
    target = tmp_path / "run" / "target"
    cut = target / ".epoch_00001-abc123"  # a copy a kill interrupted: partial, hidden, never read
    cut.mkdir(parents=True)
    (cut / "checkpoint.pt").write_bytes(b"half")
    hp = merge_hyperparameters(study, {"lr": 3e-3, "batch_size": 8})
    before = os.umask(0o022)
    try:
        summary, final = train_target_here(TargetJob(study, hp, data, tmp_path / "run", False, 0), None)
    finally:
        os.umask(before)
    assert summary.status == "completed" and final == target / "final"
    assert not cut.exists()
    for folder in (target / "final", target / "epoch_00001"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o755, folder  # not mkdtemp's 0o700
    assert not [p for p in target.iterdir() if p.name.startswith(".")]
