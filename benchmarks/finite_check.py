"""The trainer's divergence check after each step: the parameters' sums against ``isfinite`` per element.

    python benchmarks/finite_check.py

On the default study's proxy (FNO-1D, K 6, width 16) and target (K 24, width 64), 4 layers, one thread: the mean
microseconds of :func:`mutransfer._training.evaluation.all_finite` (one sum per tensor) and of the check it
replaced (``torch.isfinite(p).all()`` per tensor), over 2,000 calls after 50, and both one training step of each
model for scale (random batch of 10 on 32 and 128 points). Both checks are also asked about a NaN, an infinity and
a complex NaN planted in the weights, and must say no.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mutransfer._training.evaluation import all_finite  # noqa: E402
from operators.fno import FNO  # noqa: E402
from operators.parametrization import optimizer_param_groups  # noqa: E402


def per_element(params: list[torch.Tensor]) -> bool:
    """The check before: every element through ``isfinite``."""
    return bool(torch.stack([torch.isfinite(p).all() for p in params]).all())


def _us(check: Callable[[list[torch.Tensor]], bool], params: list[torch.Tensor], calls: int = 2000) -> float:
    for _ in range(50):
        check(params)
    start = time.perf_counter()
    for _ in range(calls):
        check(params)
    return 1e6 * (time.perf_counter() - start) / calls


def _step_ms(model: FNO, points: int, steps: int = 50) -> float:
    opt = torch.optim.Adam(optimizer_param_groups(model, 1e-3), lr=1e-3)
    x, y = torch.randn(10, points, 2), torch.randn(10, points, 1)
    start = 0.0
    for i in range(steps + 10):
        if i == 10:
            start = time.perf_counter()
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
    return 1e3 * (time.perf_counter() - start) / steps


def main() -> None:
    torch.set_num_threads(1)
    for name, modes, width, points in (("proxy", 6, 16, 32), ("target", 24, 64, 128)):
        torch.manual_seed(0)
        model = FNO(dim=1, in_channels=2, out_channels=1, modes=modes, width=width, layers=4, parametrization="mup")
        params = list(model.parameters())
        step = _step_ms(model, points)
        new, old = _us(all_finite, params), _us(per_element, params)
        print(f"{name}: sums {new:.0f} us, isfinite per element {old:.0f} us, one training step {step:.2f} ms")
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
