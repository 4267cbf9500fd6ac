"""Defaults of the sweep's checks, declared once (the CLI's flags, ``SweepOptions`` and the summary's cost hints)."""

#: sweep --verify's grid: LRs around the transferred one (--verify-points), seeds at each (--verify-seeds)
VERIFY_POINTS, VERIFY_SEEDS = 5, 3
