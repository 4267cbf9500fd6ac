"""How far float32 rounding carries in the default study's proxy training: one trial alone, alone with its initial
weights nudged by 1e-7 (relative, seeded noise), and as a member of a population of two.

    python benchmarks/trajectory_sensitivity.py [--epochs 10]

The proxy of studies/quick.yaml (FNO-1D K 6, width 16, muP, cosine schedule, Adam) on its real selection split
(Burgers, 32 points: the study's cached data), lr 5e-4, batch 10, one thread. Prints the validation error per epoch of
each run. Where the nudged run parts from the plain one, rounding differences of any kind (another summation order, a
batched kernel) part it there too: a population member can then only be equal to its solo run to float32 rounding
per step, not over the whole run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mutransfer._study import load_study  # noqa: E402
from mutransfer._study.data import load_study_data  # noqa: E402
from mutransfer._study.models import proxy_split  # noqa: E402
from mutransfer._sweep.trial import _setup  # noqa: E402 -- the trial's own model and TrainConfig
from mutransfer._training import train  # noqa: E402
from mutransfer._training._population import Member, train_population  # noqa: E402
from mutransfer.data._validation import carve_validation  # noqa: E402

TRIAL, PARTNER = {"lr": 5e-4, "batch_size": 10}, {"lr": 3.2e-4, "batch_size": 10}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=10, help="epochs printed (the study trains 20)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    study, _ = load_study(str(ROOT / "studies" / "quick.yaml"))
    split, _ = load_study_data(study, progress=False)
    _, selection = carve_validation(split, int(study.problem.n_val or 0))
    data = proxy_split(study, selection)

    def alone(nudge: float) -> list[float]:
        _, model, _, config = _setup(TRIAL, data, study, {"device": "cpu"}, None)
        generator = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1 + nudge * torch.randn(p.shape, generator=generator).to(p.dtype))
        return [r.test_error for r in train(model, data, config, resume=False).history]

    members = []
    for config in (TRIAL, PARTNER):
        _, model, _, train_config = _setup(config, data, study, {"device": "cpu"}, None)
        members.append(Member(model, train_config))
    together = [r.test_error for r in train_population(members, data, lambda i, r, w: False)[0].history]
    for name, errors in (("alone", alone(0.0)), ("alone, nudged 1e-7", alone(1e-7)), ("in a population", together)):
        print(f"{name:20s}", " ".join(f"{e:.5f}" for e in errors[: args.epochs]))


if __name__ == "__main__":
    main()
