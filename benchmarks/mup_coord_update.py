"""One Adam step on neuraloperator's FNO: how much a hidden and a spectral layer's output moves, per coordinate,
as the width grows, under ``mutransfer.mup`` (facts on the parameters) and under torch's Adam (SP).

muP's promise for the width: the change of a layer's output after a step stays Theta(1) as the width grows.
With Adam in SP it grows like the width. Printed: the rms change of ``fno_blocks.fno_skips.0`` (hidden, a 1x1
conv) and of ``fno_blocks.convs.0`` (spectral) outputs on a fixed input, mean ± sd over seeds.

    python benchmarks/mup_coord_update.py [--seeds 3] [--widths 16 32 64 128 256] [--modes 4 8 16 24]

Needs neuraloperator (``pip install -e ".[neuralop]"``). Results: docs/mup.md.
"""

from __future__ import annotations

import argparse
import statistics

import torch
from neuralop.models import FNO
from torch import nn

from mutransfer import mup

BASE_WIDTH, BASE_K, GRID = 16, 4, 64


def _build(width: int, K: int) -> nn.Module:
    return FNO(n_modes=(2 * K, 2 * K), in_channels=1, out_channels=1, hidden_channels=width, n_layers=2)


def _moves(width: int, K: int, seed: int, use_mup: bool) -> tuple[float, float]:
    torch.manual_seed(seed)
    model = _build(width, K)
    if use_mup:  # SP: the author's init and torch's Adam, untouched
        mup.set_base_shapes(model, _build(BASE_WIDTH, BASE_K))
    x, y = torch.randn(4, 1, GRID, GRID), torch.randn(4, 1, GRID, GRID)
    seen: dict[str, torch.Tensor] = {}
    hooks = [
        model.fno_blocks.fno_skips[0].register_forward_hook(lambda m, i, o: seen.__setitem__("hidden", o.detach())),
        model.fno_blocks.convs[0].register_forward_hook(lambda m, i, o: seen.__setitem__("spectral", o.detach())),
    ]
    opt = mup.Adam(model.parameters(), lr=1e-3) if use_mup else torch.optim.Adam(model.parameters(), lr=1e-3)
    nn.functional.mse_loss(model(x), y).backward()
    before = dict(seen)
    opt.step()
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    return tuple(float((seen[k] - before[k]).pow(2).mean().sqrt()) for k in ("hidden", "spectral"))  # type: ignore[return-value]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--widths", type=int, nargs="+", default=[16, 32, 64, 128, 256])
    parser.add_argument("--modes", type=int, nargs="+", default=[4, 8, 16, 24], help="K (n_modes = 2K)")
    args = parser.parse_args()
    print(f"neuraloperator FNO 2D, grid {GRID}², base K {BASE_K} width {BASE_WIDTH}, Adam lr 1e-3, {args.seeds} seeds")
    print("    K  width  optimizer   hidden Δ (rms)        spectral Δ (rms)")
    sizes = [(BASE_K, w) for w in args.widths] + [(k, 32) for k in args.modes if k != BASE_K]
    for K, width in sizes:
        for use_mup in (True, False):
            runs = [_moves(width, K, seed, use_mup) for seed in range(args.seeds)]
            cells = []
            for i in range(2):
                vals = [r[i] for r in runs]
                sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
                cells.append(f"{statistics.mean(vals):.4g} ± {sd:.2g}")
            print(f"{K:5d}  {width:5d}  {'mup.Adam' if use_mup else 'Adam (SP)':10s}  {cells[0]:20s}  {cells[1]}")


if __name__ == "__main__":
    main()
