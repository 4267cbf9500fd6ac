"""1D viscous Burgers (``mutransfer.data._burgers``)."""

from __future__ import annotations

from mutransfer._problems.base import problem_from_facts


def generate(
    n: int, resolution: int, *, seed: int, progress: bool = True, nu: float | None = None, alpha: float | None = None
) -> dict:
    """``nu`` (default 0.1) and ``alpha`` (the initial field's smoothness, default 2; lower is rougher)."""
    from mutransfer.data._burgers import generate_burgers  # noqa: PLC0415 -- deferred: scipy, needed only to generate data; the problem registry is on every command's path

    options = {k: v for k, v in (("nu", nu), ("alpha", alpha)) if v is not None}
    return generate_burgers(n, resolution, seed=seed, progress=progress, **options)


PROBLEM = problem_from_facts(
    "burgers",
    description="1D viscous Burgers, nu=0.1, periodic; map u0 -> u(., 1)",
    generator=generate,
    generated_resolution=1024,
    resolution=256,
    n_train=400,
    n_test=100,
    padding=0,
    generator_options=("nu", "alpha"),
)
