"""The paper's spectral-norm argument at a real width: ‖K‖₂ = max over modes of the m×m block norm, against K.

Li, Yoo & Yang (2025) bound ‖K‖₂ = max_k |r_k| = Θ(b(K)·√(d log K)) for m = 1 ("without loss of
generality"). For m×m blocks the spectral norm of one block is ≈ 2√(2m)·σ whatever K, and the maximum
over the N = 2^(d−1)K^d blocks adds only O(σ√(2 ln N)): at m = 16 the growth with K nearly vanishes.
This script builds the spectral layer at init (SP and μP) for each K and width, takes
max_k ‖R_k‖₂ (the largest singular value of each complex m×m block), and fits its log-log slope in K
per seed (mean and 95 % Student-t CI over seeds).

    python benchmarks/spectral_norm_vs_k.py --dim 1 --widths 1 16 --modes 4 8 16 32 64 --seeds 5
"""

from __future__ import annotations

import argparse
import math

import torch

from mutransfer._diagnostics.statistics import fit_slope, mean_ci
from operators.spectral import SpectralConv


def max_block_norm(layer: SpectralConv) -> float:
    """max over every mode (all corners) of the largest singular value of the (m_in, m_out) complex block."""
    best = 0.0
    for w in layer.spectral_weights():
        blocks = w.detach().reshape(w.shape[0], w.shape[1], -1).permute(2, 0, 1)  # (modes, m_in, m_out)
        best = max(best, float(torch.linalg.matrix_norm(blocks, ord=2).max()))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dim", type=int, default=1)
    parser.add_argument("--widths", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--modes", type=int, nargs="+", default=[4, 8, 16, 32, 64])
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    print(
        f"d = {args.dim}, K = {args.modes}; slope of ln max_k ||R_k||_2 against ln K, mean [95% CI] over "
        f"{args.seeds} seeds; the paper's m = 1 rule predicts d(ln sqrt(d ln K))/d ln K = "
        f"{fit_slope([math.log(k) for k in args.modes], [0.5 * math.log(args.dim * math.log(k)) for k in args.modes]):+.3f} under SP"
    )
    for width in args.widths:
        for parametrization in ("standard", "mup"):
            slopes = []
            for seed in range(args.seeds):
                torch.manual_seed(seed)
                norms = [max_block_norm(SpectralConv(width, width, k, args.dim, parametrization)) for k in args.modes]
                slopes.append(fit_slope([math.log(k) for k in args.modes], [math.log(v) for v in norms]))
            print(f"  m = {width:>3}  {parametrization:<8}  slope {mean_ci(slopes)}")


if __name__ == "__main__":
    main()
