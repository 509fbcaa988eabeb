"""The version, written in this one place (pyproject.toml and ``jra.__version__`` read it)."""

__version__ = "0.1.0"
