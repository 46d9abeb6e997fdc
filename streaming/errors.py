"""The streaming service's own errors, below the library's root :class:`index.errors.PsmatchError`.

The matching library (``index``) knows nothing of settings; a bad flag, environment
variable or config field of the service is a :class:`ConfigError`.
"""

from __future__ import annotations

from index.errors import PsmatchError


class ConfigError(PsmatchError, ValueError):
    """A setting (flag, environment variable or config field) with an invalid value."""
