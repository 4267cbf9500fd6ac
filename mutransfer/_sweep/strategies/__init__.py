"""Search strategies as plug-ins: a model-size ladder, top-k to the target, the verification, the direct baseline,
a warm start.

Each is one module here with one :class:`~mutransfer._sweep.strategies.base.Strategy` (the interface, in
``base.py``) over the sweep module that does its work; the runner (phases and resume), the report (JSON, text,
HTML), the cost accounting and the MLflow records loop over :data:`STRATEGIES` instead of naming each one
(``registry.py``). A new strategy is one module and one line below (or ``register(MyStrategy())``).
"""

from mutransfer._sweep.strategies.base import CostShare, ExtraCosts, Placement, Strategy
from mutransfer._sweep.strategies.baseline import Baseline
from mutransfer._sweep.strategies.ladder import Ladder
from mutransfer._sweep.strategies.registry import (
    STRATEGIES,
    asked_but_missing,
    by_name,
    count_costs,
    extra_costs,
    gain_source,
    html_sections,
    metrics,
    ordered_phases,
    prepare_strategies,
    refine_gain,
    register,
    sections,
    suggestions,
    text_lines,
    unregister,
    verdicts,
)
from mutransfer._sweep.strategies.top_k import TopKStrategy
from mutransfer._sweep.strategies.verify import Verify
from mutransfer._sweep.strategies.warm_start import WarmStartStrategy

# the order of their phases after one anchor, report sections, text lines, costs and metrics
for _strategy in (Ladder(), TopKStrategy(), Verify(), Baseline(), WarmStartStrategy()):
    register(_strategy)

__all__ = [
    "STRATEGIES",
    "CostShare",
    "ExtraCosts",
    "Placement",
    "Strategy",
    "asked_but_missing",
    "by_name",
    "count_costs",
    "extra_costs",
    "gain_source",
    "html_sections",
    "metrics",
    "ordered_phases",
    "prepare_strategies",
    "refine_gain",
    "register",
    "sections",
    "suggestions",
    "text_lines",
    "unregister",
    "verdicts",
]
