"""Two costs of every trainer step besides the model: the divergence check and the Adam update.

    python benchmarks/trainer_overheads.py

On the default study's proxy (FNO-1D, K 6, width 16) and target (K 24, width 64), 4 layers, one thread:

- the mean microseconds of :func:`mutransfer._training.evaluation.all_finite` (one sum per tensor) and of the check
  it replaced (``torch.isfinite(p).all()`` per tensor), over 2,000 calls after 50; both are also asked about a NaN,
  an infinity and a complex NaN planted in the weights, and must say no;
- the mean milliseconds of one ``torch.optim.Adam`` step over the trainer's muP groups, single-tensor (torch's
  default on a CPU) and multi-tensor (``foreach=True``, the trainer's), over 300 steps after 20;
- one training step of each model for scale (random batch of 10 on 32 and 128 points);

under the allocator every trial of the product runs with (the script re-executes itself with it).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "benchmarks"))
from allocator_env import run_under  # noqa: E402
from proxy_step import mean_ms  # noqa: E402 -- the benchmarks' one timing loop

from mutransfer._training.precision import all_finite  # noqa: E402
from operators.fno import FNO  # noqa: E402
from operators.parametrization import optimizer_param_groups  # noqa: E402


def per_element(params: list[torch.Tensor]) -> bool:
    """The check before: every element through ``isfinite``."""
    return bool(torch.stack([torch.isfinite(p).all() for p in params]).all())


def _us(check: Callable[[list[torch.Tensor]], bool], params: list[torch.Tensor], calls: int = 2000) -> float:
    return 1e3 * mean_ms(lambda: check(params), calls, warmup=50)


def _step_ms(model: FNO, points: int, steps: int = 50) -> float:
    opt = torch.optim.Adam(optimizer_param_groups(model, 1e-3), lr=1e-3)
    x, y = torch.randn(10, points, 2), torch.randn(10, points, 1)

    def step() -> None:
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()

    return mean_ms(step, steps, warmup=10)


def adam_ms(model: FNO, foreach: bool, steps: int = 300) -> float:
    """Milliseconds of one Adam step of ``model`` (its gradients of one batch), single- or multi-tensor."""
    opt = torch.optim.Adam(optimizer_param_groups(model, 1e-3), lr=1e-3, foreach=foreach)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    return mean_ms(opt.step, steps, warmup=20)


def main() -> None:
    run_under("product", sys.argv[1:], __file__)  # glibc reads its variables at start: run again with them
    torch.set_num_threads(1)
    for name, modes, width, points in (("proxy", 6, 16, 32), ("target", 24, 64, 128)):
        torch.manual_seed(0)
        model = FNO(dim=1, in_channels=2, out_channels=1, modes=modes, width=width, layers=4, parametrization="mup")
        params = list(model.parameters())
        step = _step_ms(model, points)
        new, old = _us(all_finite, params), _us(per_element, params)
        single, multi = adam_ms(model, foreach=False), adam_ms(model, foreach=True)
        print(
            f"{name}: divergence check: sums {new:.0f} us, isfinite per element {old:.0f} us; Adam step: "
            f"single-tensor {single:.2f} ms, foreach {multi:.2f} ms; one training step {step:.2f} ms"
        )
        spectral = next(p for p in params if p.is_complex())
        for planted in (math.nan, math.inf, complex(math.nan, 0.0)):
            with torch.no_grad():
                target = spectral if isinstance(planted, complex) else params[0]
                saved = target.view(-1)[0].item()
                target.view(-1)[0] = planted
                assert not all_finite(params) and not per_element(params), planted
                target.view(-1)[0] = saved
        assert all_finite(params)


if __name__ == "__main__":
    main()
