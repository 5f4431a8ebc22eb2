"""The one place the package version is written (pyproject.toml reads it)."""

__version__ = "0.2.0"
