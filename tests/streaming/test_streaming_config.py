"""ServiceConfig: defaults, environment, overrides and validation."""

from __future__ import annotations

import pytest

from streaming.config import ServiceConfig
from streaming.errors import ConfigError


def test_defaults_work_on_one_machine() -> None:
    cfg = ServiceConfig.load(env={})
    assert cfg.bootstrap_servers == "127.0.0.1:9092"
    assert cfg.subscriptions_topic == "psmatch.subscriptions"
    assert cfg.matcher == "psthash"
    assert cfg.trigger_seconds == 1.0


def test_flags_win_over_environment_which_wins_over_defaults() -> None:
    env = {"PSMATCH_MATCHER": "scan", "PSMATCH_TRIGGER_SECONDS": "2.5", "PSMATCH_EVENTS_TOPIC": "e"}
    cfg = ServiceConfig.load(env=env, overrides={"matcher": "pstbloom", "redis_url": None})
    assert (cfg.matcher, cfg.trigger_seconds, cfg.events_topic) == ("pstbloom", 2.5, "e")
    assert cfg.redis_url == ServiceConfig().redis_url


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PSMATCH_TRIGGER_SECONDS": "soon"}, "must be a float"),
        ({"PSMATCH_TRIGGER_SECONDS": "0"}, "trigger_seconds"),
        ({"PSMATCH_MATCHER": "magic"}, "unknown matcher"),
        ({"PSMATCH_EVENTS_TOPIC": "psmatch.subscriptions"}, "distinct"),
        ({"PSMATCH_STARTING_OFFSETS": "middle"}, "starting_offsets"),
        ({"PSMATCH_REDIS_URL": "localhost:6379"}, "redis://"),
        ({"PSMATCH_MAX_OFFSETS_PER_TRIGGER": "-1"}, "max_offsets_per_trigger"),
    ],
)
def test_bad_settings_raise_config_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ServiceConfig.load(env=env)


def test_config_is_frozen() -> None:
    cfg = ServiceConfig()
    with pytest.raises(AttributeError):
        cfg.matcher = "scan"  # type: ignore[misc]
