"""The streaming service's own errors, below the root :class:`psmatch.errors.PsmatchError`.

The matching library knows nothing of settings; a bad flag, environment
variable or config field of the service is a :class:`ConfigError`.
"""

from __future__ import annotations

from psmatch.errors import PsmatchError


class ConfigError(PsmatchError, ValueError):
    """A setting (flag, environment variable or config field) with an invalid value."""
