"""The study's model-size ladder: ``ladder: [4, 8, 16]`` (and ``ladder_keep``), read and checked.

A ladder lists model sizes from the proxy up towards the target. Each entry is one
integer on the study's scaling axis (Fourier modes K for FNO, the width for the
attention operators) or a mapping naming both axes, ``{K: 8, width: 48}``. The first
entry is the proxy (``proxy_K`` / ``operator.width``); every later entry is larger on at
least one axis, smaller on none, and no larger than the target. The search runs at the
first size; the best ``ladder_keep`` fraction of each rung is rescaled by μP and
trained again at the next size (mutransfer._sweep.ladder).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from mutransfer._config.reader import Reader, is_plain_int, kind_of
from operators.errors import OperatorConfigError
from operators.parametrization import check_modes

_EXAMPLE = "e.g. ladder: [4, 8, 16] (K) or ladder: [{K: 4, width: 16}, {K: 8, width: 32}]"


@dataclass(frozen=True)
class LadderSize:
    """One rung's model size: Fourier modes (None for operators without) and width."""

    K: int | None
    width: int

    def text(self) -> str:
        return f"K={self.K} width {self.width}" if self.K is not None else f"width {self.width}"


def read_ladder(r: Reader, name: str, default):
    """The raw ladder (a list of positive integers or {K, width} mappings), or None."""
    value = r.raw(name, default)
    if value is None:
        return None
    where = r.where(name)
    if not isinstance(value, list) or len(value) < 2:
        r.fail(
            where,
            f"must be a list of at least 2 model sizes, got {kind_of(value) if not isinstance(value, list) else len(value)}; {_EXAMPLE}",
        )
    out = []
    for i, entry in enumerate(value):
        if is_plain_int(entry):
            if entry < 1:
                r.fail(f"{where}[{i}]", f"must be a positive integer, got {entry}; {_EXAMPLE}")
            out.append(entry)
        elif isinstance(entry, dict) and entry and set(entry) <= {"K", "width"}:
            for key, v in entry.items():
                if not is_plain_int(v) or v < 1:
                    r.fail(f"{where}[{i}].{key}", f"must be a positive integer, got {kind_of(v)}; {_EXAMPLE}")
            out.append(dict(entry))
        else:
            r.fail(
                f"{where}[{i}]",
                f"must be a positive integer or a mapping with K and/or width, got {kind_of(entry)}; {_EXAMPLE}",
            )
    return out


def ladder_sizes(study) -> list[LadderSize]:
    """The ladder's sizes (an integer is K for FNO, the width otherwise; a missing axis is the proxy's)."""
    out = []
    k_axis = study.family.scales("K")
    for entry in study.ladder or ():
        if isinstance(entry, dict):
            K = study.family.sized(entry.get("K", study.proxy_K))
            out.append(LadderSize(K, int(entry.get("width", study.operator.width))))
        elif k_axis:
            out.append(LadderSize(int(entry), int(study.operator.width)))
        else:
            out.append(LadderSize(None, int(entry)))
    return out


def first_size_overrides(raw_ladder, spectral: bool) -> dict:
    """The proxy fields the first entry of a ``--ladder`` flag sets: {"proxy_K": 4} or {"proxy_width": 16}."""
    if not raw_ladder:
        return {}
    first = raw_ladder[0]
    if isinstance(first, dict):
        return {
            **({"proxy_K": first["K"]} if "K" in first else {}),
            **({"proxy_width": first["width"]} if "width" in first else {}),
        }
    return {"proxy_K": first} if spectral else {"proxy_width": first}


def keep_count(n_trials: int, keep: float, available: int) -> int:
    """Trials promoted from a rung of ``n_trials``: ceil(keep · n), at least 1, at most the ``available`` ranked ones."""
    return min(available, max(1, math.ceil(keep * n_trials - 1e-9)))


def planned_rung_trials(study) -> list[int]:
    """Trials per rung when every trial reports an error: the study's trials, then ceil(keep · n) per rung."""
    counts = [study.trial_count]
    for _ in study.ladder_sizes()[1:]:
        counts.append(keep_count(counts[-1], study.ladder_keep, counts[-1]))
    return counts


def check_ladder(study, r: Reader) -> None:
    """One line naming the entry when the ladder does not climb from the proxy to at most the target."""
    if not study.ladder:
        return
    k_axis = study.family.scales("K")
    for i, entry in enumerate(study.ladder):
        if isinstance(entry, dict) and "K" in entry and not k_axis:
            r.fail(
                f"ladder[{i}].K", f"{study.operator.type} has no Fourier modes; give widths, e.g. ladder: [16, 32, 64]"
            )
    sizes = ladder_sizes(study)
    proxy = LadderSize(study.proxy_modes, study.operator.width)
    if sizes[0] != proxy:
        r.fail(
            "ladder[0]",
            f"{sizes[0].text()} must be the proxy ({proxy.text()}): the ladder starts at the proxy; "
            f"set proxy_K / operator.width to it, or start the ladder at {proxy.text()}",
        )
    target = LadderSize(study.target_modes, study.target_width or study.operator.width)
    for i, (a, b) in enumerate(zip(sizes, sizes[1:]), start=1):
        pairs = [(b.width, a.width)] + ([(b.K, a.K)] if k_axis else [])
        if any(x < y for x, y in pairs) or all(x == y for x, y in pairs):
            r.fail(
                f"ladder[{i}]",
                f"{b.text()} must be larger than ladder[{i - 1}] ({a.text()}) on one axis and smaller on none",
            )
        if b.width > target.width or (k_axis and b.K > target.K):
            r.fail(
                f"ladder[{i}]",
                f"{b.text()} is larger than the target ({target.text()}); a ladder climbs up to the target",
            )
        heads = study.operator.heads if "heads" in study.family.fields else None
        if heads and b.width % heads:
            r.fail(
                f"ladder[{i}]", f"width {b.width} is not divisible by operator.heads {heads}; use a multiple of {heads}"
            )
        if k_axis and b.K != a.K:
            try:
                check_modes(b.K, study.dim, study.parametrization)
            except OperatorConfigError as exc:
                r.fail(f"ladder[{i}]", str(exc))
    last = planned_rung_trials(study)[-1]
    if study.search.top_k > last:
        r.fail(
            "search.top_k",
            f"{study.search.top_k} is more than the {last} trial(s) the ladder's last rung will hold "
            f"({' -> '.join(map(str, planned_rung_trials(study)))} with ladder_keep {study.ladder_keep:g}); "
            f"use top_k <= {last} or a larger ladder_keep",
        )


def rung_study(study, size: LadderSize):
    """The study whose *target* is ``size``: a rung's trials build that model (the width-μP base stays operator.width)."""
    return dataclasses.replace(study, target_K=study.target_K if size.K is None else size.K, target_width=size.width)


def step_study(study, a: LadderSize, b: LadderSize):
    """The study whose proxy is ``a`` and target ``b``: its transfer_scaling() is the μP step a → b."""
    return dataclasses.replace(
        study,
        proxy_K=study.proxy_K if a.K is None else a.K,
        operator=dataclasses.replace(study.operator, width=a.width),
        target_K=study.target_K if b.K is None else b.K,
        target_width=b.width,
    )


def target_size(study) -> LadderSize:
    """The target's size (K for families with the K axis, and the width)."""
    return LadderSize(study.target_modes, int(study.target_width or study.operator.width))
