"""The package's version, declared once (pyproject.toml reads the same number)."""

__version__ = "0.1.0"
