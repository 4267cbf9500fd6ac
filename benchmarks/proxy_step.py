"""One training step of the default study's proxy and target FNOs, model alone (no trainer, no Ray).

    python benchmarks/proxy_step.py

Times 200 steps (zero_grad, forward, MSE, backward, Adam) after 20 warm-up steps, one
thread, batch 10, for the proxy (K 6, width 16, 32 points) and the target (K 24, width 64,
128 points) of studies/quick.yaml, and the K-only former target (K 24, width 32), and
prints the median-free mean ms per step. docs/results.md ("Cheap proxies on the default
study") quotes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from operators.fno import FNO


def step_ms(width: int, grid: int, modes: int, batch: int = 10, steps: int = 200) -> float:
    torch.manual_seed(0)
    model = FNO(dim=1, in_channels=2, out_channels=1, modes=modes, width=width, layers=4, parametrization="mup")
    optimizer = torch.optim.Adam(model.parameters(), 1e-3)
    x, y = torch.randn(batch, grid, 2), torch.randn(batch, grid, 1)

    def step():
        optimizer.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        optimizer.step()

    return mean_ms(step, steps, warmup=20)


def mean_ms(step: Callable[[], None], steps: int, warmup: int) -> float:
    """Mean milliseconds of ``step()`` over ``steps`` calls after ``warmup`` calls."""
    for _ in range(warmup):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return 1000 * (time.perf_counter() - start) / steps


def main() -> None:
    torch.set_num_threads(1)
    for name, (width, grid, modes) in {
        "proxy (K 6, width 16, 32 points)": (16, 32, 6),
        "target (K 24, width 64, 128 points)": (64, 128, 24),
        "former target (K 24, width 32, 128 points)": (32, 128, 24),
    }.items():
        print(f"{name}: {step_ms(width, grid, modes):.2f} ms per step")


if __name__ == "__main__":
    main()
