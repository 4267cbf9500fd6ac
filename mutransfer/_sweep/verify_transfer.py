"""``sweep --verify`` measures the transfer itself: the proxy's own optimum on the same master-LR grid (pure).

The target's optimum alone cannot tell a search that missed the proxy's optimum from a transfer that failed:
both put the target's optimum away from the transferred LR. So the verification also trains the **proxy** (the
size the search's winner was found at: the proxies, or a ladder's last rung) on the same master-LR grid, with
the same seeds, for the search's epochs (``budget.epochs``: the trials' setup the winner was chosen by), and
fits its optimum with the same estimator (:func:`mutransfer._landscape.analysis.fit_optimum`).

**The same master LR.** The models apply the μP multipliers themselves (c(K) on the spectral weights, m0/m on
the hidden ones): the transfer carries the master LR over unchanged (``operators.transfer``: ``master_lr``
factor 1), and the transfer record's ``lr_factor`` is what the *effective* spectral (or hidden) LR is multiplied
by — the proxy at master LR x has the effective LR of the target at x, divided by ``lr_factor``. So a proxy grid
point x corresponds to the target grid point x × (transferred LR / search winner's LR), a factor of 1 whenever
the transfer is μP's or SP's: the proxy grid is the target's grid, centred on the search winner's LR, and
every proxy coordinate is mapped onto the target's axis by that ratio before it is compared.

Measured (all in decades of master LR, per seed the estimator's usable optima):

- ``proxy_optimum``: the proxy's optimum LR (on the target's axis), mean of the seeds' log10 optima;
- ``transfer_error`` = target optimum − proxy optimum: Welch's t interval over the two seed sets
  (:func:`mutransfer._diagnostics.statistics.difference_ci`: independent models, different sizes);
- ``search_gap`` = search winner's LR − proxy optimum: Student-t over the proxy's seeds
  (:func:`~mutransfer._diagnostics.statistics.mean_ci`; the winner is one fixed LR);
- an effect is *resolved* only when its 95 % interval excludes 0; with one seed there is no interval
  (``ci`` [null, null]) and nothing is resolved;
- the transfer *held* only when neither effect is resolved and both intervals lie within half a grid step of 0.

The verdict (:func:`diagnose`) names what failed — the search, the transfer, both, neither — and what to do.
"""

from __future__ import annotations

import math

from mutransfer._diagnostics.statistics import difference_ci, mean_ci
from mutransfer._landscape.analysis import fit_optimum

#: the two causes a verdict names, and what to do about each
SEARCH_FAILED = "the search missed the proxy's optimum"
SEARCH_ADVICE = "widen search_space.lr or run more trials"
TRANSFER_FAILED = "the transfer rule did not hold here"
HELD = "transfer held"
NOT_RESOLVED = "not resolved"
#: why one seed resolves nothing, and what to do
ONE_SEED = "one seed: no interval; use --verify-seeds 2 or more"


def one_seed(seeds: int) -> str:
    """Why there is no interval: one seed was run (:data:`ONE_SEED`), or of ``seeds`` only one gave an optimum
    inside the grid (the others at its edge or diverged), which more seeds alone may not mend."""
    if seeds < 2:
        return ONE_SEED
    return (
        f"one usable seed of {seeds}: no interval; the others' optima lay at the grid's edge or were not measured: "
        "a wider grid (--verify-points) or more seeds (--verify-seeds)"
    )


def seed_optima(records: list[dict], grid: list[float]) -> list[dict]:
    """Per seed of ``records`` (``lr``, ``seed``, ``status``, ``val_error``): the estimator's optimum.

    Each: ``seed``, ``optimum_lr``, ``at_edge``, ``edge`` ("below"/"above" the grid, or None), ``coordinate``
    (log10 of the optimum when it is usable: inside the grid, else None).
    """

    out = []
    for seed in sorted({int(r["seed"]) for r in records}):
        rows = sorted((r for r in records if int(r["seed"]) == seed), key=lambda r: r["lr"])
        opt = fit_optimum([r["lr"] for r in rows], [r["val_error"] for r in rows], [r["status"] for r in rows], "lr")
        edge = None
        if opt.value is not None and opt.at_edge:
            edge = "below" if opt.value <= grid[0] * (1 + 1e-9) else "above"
        coordinate = opt.coordinate if opt.usable else None
        out.append(
            {"seed": seed, "optimum_lr": opt.value, "at_edge": opt.at_edge, "edge": edge, "coordinate": coordinate}
        )
    return out


def proxy_grid(target_grid: list[float], transferred_lr: float, search_lr: float) -> list[float]:
    """The proxy's master LRs, one per target grid point: ``lr`` × search LR / transferred LR (see the module)."""
    ratio = float(search_lr) / float(transferred_lr)
    return [float(lr * ratio) for lr in target_grid]


def estimate_dict(estimate) -> dict:
    """An Estimate as the report writes an effect: ``value``, ``ci`` ([null, null] without one), ``n``, ``level``,
    ``method``, ``resolved`` (the interval excludes 0)."""
    return {
        "value": estimate.mean,
        "ci": estimate.ci,
        "n": estimate.n,
        "level": estimate.level,
        "method": estimate.method,
        "resolved": estimate.resolved,
    }


def compare(
    target_optima: list[dict],
    proxy_records: list[dict],
    transferred_lr: float,
    search_lr: float,
    target_verdict: str,
) -> dict:
    """The proxy's optimum, the transfer error, the search gap and the verdict, from the target's per-seed optima
    (:func:`seed_optima`) and the proxy's trainings on :func:`proxy_grid` (pure; fields of ``Verification``)."""

    grid = sorted({float(r["lr"]) for r in proxy_records})
    shift = math.log10(transferred_lr) - math.log10(search_lr)  # proxy axis -> target axis (0 under μP and SP)
    proxy = seed_optima(proxy_records, grid)
    p = [s["coordinate"] + shift for s in proxy if s["coordinate"] is not None]
    t = [s["coordinate"] for s in target_optima if s.get("coordinate") is not None]
    winner = math.log10(search_lr) + shift
    gap = mean_ci([winner - c for c in p]) if p else None
    error = difference_ci(t, p) if p and t else None
    half_span = math.log10(grid[-1] / grid[0]) / 2 if len(grid) > 1 else 0.0
    half_step = math.log10(grid[1] / grid[0]) / 2 if len(grid) > 1 else 0.0
    return {
        "search_lr": float(search_lr),
        "proxy_grid": grid,
        "proxy_optimum": float(10.0 ** (sum(p) / len(p))) if p else None,
        "proxy_seed_optima": proxy,
        "transfer_error": None if error is None else estimate_dict(error),
        "search_gap": None if gap is None else estimate_dict(gap),
        "verdict": diagnose(error, gap, proxy, bool(t), target_verdict, half_span, half_step),
    }


def _effect(estimate) -> str:
    return f"{estimate.mean:+.2f} decades {estimate.interval('+.2f')}"


def diagnose(
    error, gap, proxy: list[dict], target_measured: bool, target_verdict: str, half_span: float, half_step: float
) -> str:
    """Which failed — the search, the transfer, both or neither — and what to do (see the module docstring).

    A cause is named only from a resolved effect (an interval, n >= 2, that excludes 0); the search is blamed only
    for a gap beyond ``half_step`` (a smaller one is below what the grid resolves). "Transfer held" is said
    only when neither is resolved *and* both intervals lie within ``half_step`` decades (half a grid step: what the
    grid can tell apart) of 0; wider intervals that cover 0 are "not resolved at this scale".
    """
    if gap is None:
        return _proxy_unmeasured(proxy, target_verdict, half_span)
    side = "above" if gap.mean > 0 else "below"
    # a resolved gap within half a grid step is below what the grid resolves: the search is not blamed for it
    missed = gap.resolved and abs(gap.mean) > half_step
    small = f" (within half a grid step, {half_step:.3g} decades)" if gap.resolved and not missed else ""
    search = (
        f"{SEARCH_FAILED} by {abs(gap.mean):.2f} decades {gap.interval('+.2f')} (the winner {side} it): {SEARCH_ADVICE}"
    )
    if error is None:
        missing = (
            f"the target's optimum was not measured ({target_verdict})"
            if not target_measured
            else "the transfer error is not measured"
        )
        return f"{search}; {missing}" if missed else f"{NOT_RESOLVED}: {missing}; search gap {_effect(gap)}{small}"
    moved = f"the optimum moved by {_effect(error)} from proxy to target: {TRANSFER_FAILED}"
    if missed and error.resolved:
        return f"{search}; and {moved}"
    if missed:
        return f"{search}; the transfer error {_effect(error)} is not resolved"
    if error.resolved:
        return f"{moved}; the search gap {_effect(gap)} is " + (small.strip(" ()") if small else "not resolved")
    if not (gap.bounded and error.bounded):
        reason = one_seed(len(proxy))
        return f"{NOT_RESOLVED} ({reason}): transfer error {error.mean:+.2f}, search gap {gap.mean:+.2f} decades"
    if all(-half_step <= e.lo and e.hi <= half_step for e in (error, gap)):
        return (
            f"{HELD}: the transfer error {_effect(error)} and the search gap {_effect(gap)} "
            f"are within half a grid step ({half_step:.3g} decades), intervals included"
        )
    return (
        f"{NOT_RESOLVED} at this scale: the transfer error {_effect(error)} and the search gap {_effect(gap)} cover 0 "
        f"but reach beyond half a grid step ({half_step:.3g} decades): neither a failure nor a transfer that held is "
        f"shown; more seeds (--verify-seeds) narrow the intervals"
    )


def _proxy_unmeasured(proxy: list[dict], target_verdict: str, half_span: float) -> str:
    """No usable proxy optimum: every seed's lay at the grid's edge (the search missed it) or every training diverged.

    The search is blamed only when at least two seeds put the proxy's optimum beyond the same edge: one seed at the
    edge is an observation (no spread, so no interval), not a finding — that verdict is "not resolved".
    """
    edges = {s["edge"] for s in proxy if s["edge"]}
    if len(edges) == 1 and all(s["edge"] for s in proxy if s["optimum_lr"] is not None):
        edge = edges.pop()
        at_edge = sum(1 for s in proxy if s["edge"])
        if at_edge < 2:
            return (
                f"{NOT_RESOLVED} ({one_seed(len(proxy))}): the one proxy seed's optimum lay {edge} the grid around the search "
                f"winner (its best point at the edge, more than {half_span:.2f} decades away) — an observation, not a "
                f"cause; the transfer error is not measured"
            )
        return (
            f"{SEARCH_FAILED} by more than {half_span:.2f} decades (its optimum lies {edge} the grid around the search "
            f"winner for every seed, {at_edge} seeds): {SEARCH_ADVICE}; the transfer error is not measured"
        )
    if not edges:
        return f"every proxy training diverged: no proxy optimum; the target: {target_verdict}"
    return f"the proxy's optimum lies outside the grid (below for some seeds, above for others); the target: {target_verdict}"
