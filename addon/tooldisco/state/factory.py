"""``open_store``: the one place that picks the session store's backend from the config."""

from __future__ import annotations

from tooldisco.config import Sessions
from tooldisco.state.base import SessionStore
from tooldisco.state.disk import DiskSessionStore


def open_store(settings: Sessions) -> SessionStore:
    """The configured backend (``sessions.backend``), opened; it fails open from here on."""
    if settings.backend == "redis":
        # Not at the top: redis is an optional extra (pip install tooldisco[redis]), imported only when configured.
        from tooldisco.state.redis import RedisSessionStore

        return RedisSessionStore(settings.redis, settings.ttl)
    return DiskSessionStore(settings.directory(), settings.ttl, settings.cleanup_interval, settings.timeout,
                            settings.retry_after)
