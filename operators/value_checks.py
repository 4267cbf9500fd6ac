"""Whether a model may check its input's values: not inside a population.

``torch.func.vmap`` (operators.population_vmap) cannot branch on a tensor's values, so a check such as "every sample
has a real point" cannot run inside a population. :func:`values_checked` is True outside one; a model's input
checks of values (operators.pointset.prepare_points) run only then. Inside, the data were checked once, when they
were loaded (mutransfer.data: a point set's every sample has a real point).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

_INSIDE: ContextVar[bool] = ContextVar("operators_inside_population", default=False)


def values_checked() -> bool:
    """False inside :func:`inside_population`, True elsewhere."""
    return not _INSIDE.get()


@contextlib.contextmanager
def inside_population() -> Iterator[None]:
    """The forward of a population's members runs here: their input checks of values are skipped."""
    token = _INSIDE.set(True)
    try:
        yield
    finally:
        _INSIDE.reset(token)
