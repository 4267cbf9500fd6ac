"""Algorithm 1: composition, identity and the readable record."""

import math

import pytest

from operators import OperatorConfigError, transfer_hyperparameters


def test_identity_when_proxy_equals_target():
    record = transfer_hyperparameters(2, 8, 8, lr=3e-3, init_std=0.02, unchanged={"batch_size": 20})
    for q in record.quantities:
        assert q.factor == 1.0 and q.target == pytest.approx(q.proxy)


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_transfer_composes(dim):
    lr, std = 2e-3, 0.05
    k1, k2, k3 = 3, 7, 24
    step1 = transfer_hyperparameters(dim, k1, k2, lr=lr, init_std=std).target_values()
    step2 = transfer_hyperparameters(dim, k2, k3, lr=step1["master_lr"], init_std=step1["spectral_init_std"])
    direct = transfer_hyperparameters(dim, k1, k3, lr=lr, init_std=std)
    for name in ("master_lr", "spectral_lr", "spectral_init_std", "spectral_init_variance"):
        assert step2.get(name).target == pytest.approx(direct.get(name).target, rel=1e-12)


def test_rescaled_values_follow_algorithm_1():
    record = transfer_hyperparameters(3, 6, 24, lr=1e-3, init_std=0.1, unchanged={"beta2": 0.98})
    ratio = math.log(6) / math.log(24)
    assert record.get("master_lr").target == 1e-3
    assert record.get("spectral_lr").target / record.get("spectral_lr").proxy == pytest.approx(math.sqrt(ratio))
    assert record.get("spectral_lr").proxy == pytest.approx(1e-3 / math.sqrt(3 * math.log(6)))
    assert record.get("spectral_init_variance").target == pytest.approx(0.01 * ratio)
    assert record.get("beta2").target == 0.98
    table = record.format_table()
    assert "spectral_lr" in table and "K_proxy=6 -> K_target=24" in table
    assert record.as_dict()["quantities"][0]["name"] == "master_lr"


def test_transfer_rejects_k_below_two():
    with pytest.raises(OperatorConfigError, match="proxy modes 1"):
        transfer_hyperparameters(1, 1, 8, lr=1e-3)
