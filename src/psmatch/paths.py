"""Where psmatch keeps its default data (``var/``) and caches (``.cache/``): in the
checkout it runs from, else in the current directory. The service's settings and the
development servers both read their defaults from :func:`base_dir`."""

from __future__ import annotations

from pathlib import Path


def base_dir() -> Path:
    """The checkout holding this package (``src/psmatch`` beside a ``pyproject.toml``), or
    the current directory when the package is installed elsewhere (site-packages holds no
    checkout). Cost: two ``stat`` calls."""
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "src" / "psmatch").is_dir():
        return checkout
    return Path.cwd()
