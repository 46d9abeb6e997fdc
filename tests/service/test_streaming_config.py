"""ServiceConfig: defaults, environment, overrides and validation."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from psmatch.service.config import ServiceConfig
from psmatch.service.errors import ConfigError


def test_defaults_work_on_one_machine() -> None:
    cfg = ServiceConfig.load(env={})
    assert cfg.bootstrap_servers == "127.0.0.1:9092"
    assert cfg.subscriptions_topic == "psmatch.subscriptions"
    assert cfg.matcher == "auto"
    assert cfg.trigger_seconds == 1.0
    assert cfg.sink_compression == "lz4"


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
        ({"PSMATCH_SINK_COMPRESSION": "brotli"}, "sink_compression must be one of"),
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


def test_secrets_come_from_env_or_file_and_are_never_shown(tmp_path: Path) -> None:
    secret_file = tmp_path / "kafka.pw"
    secret_file.write_text("file-s3cret\n")
    env = {
        "PSMATCH_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "PSMATCH_KAFKA_SASL_MECHANISM": "PLAIN",
        "PSMATCH_KAFKA_USERNAME": "alice",
        "PSMATCH_REDIS_PASSWORD": "redis/s3cret@",
        "PSMATCH_REDIS_URL": "redis://127.0.0.1:6390/2",
    }
    cfg = ServiceConfig.load(env=env, overrides={"kafka_password_file": str(secret_file)})
    assert cfg.kafka_password == "file-s3cret"
    assert cfg.kafka_security.client_config()["sasl.password"] == "file-s3cret"
    assert cfg.redis_connection_url == "redis://:redis%2Fs3cret%40@127.0.0.1:6390/2"
    shown = repr(cfg) + repr(cfg.kafka_security) + str(cfg.as_dict()) + cfg.redis_display_url
    assert "s3cret" not in shown
    assert cfg.replace(trigger_seconds=2.0).kafka_password == "file-s3cret"
    with_url_password = ServiceConfig(redis_url="redis://:in-url-s3cret@h:1/0")
    assert "s3cret" not in with_url_password.redis_display_url
    assert "s3cret" not in str(with_url_password.as_dict())


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PSMATCH_KAFKA_SECURITY_PROTOCOL": "TLS"}, "kafka_security_protocol must be one of"),
        ({"PSMATCH_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "needs kafka_username and a password"),
        ({"PSMATCH_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "PSMATCH_KAFKA_USERNAME": "u",
          "PSMATCH_KAFKA_PASSWORD": "p", "PSMATCH_KAFKA_SASL_MECHANISM": "GSSAPI"},
         "kafka_sasl_mechanism"),
        ({"PSMATCH_KAFKA_PASSWORD_FILE": "/nonexistent/pw"}, "cannot read kafka_password_file"),
        ({"PSMATCH_REDIS_CA_FILE": "/nonexistent/ca.pem"}, "redis_ca_file"),
        ({"PSMATCH_REDIS_RETRY_SECONDS": "-1"}, "redis_retry_seconds"),
        ({"PSMATCH_QUERY_MAX_RESTARTS": "-1"}, "query_max_restarts"),
        ({"PSMATCH_REDIS_URL": "http://:pw-s3cret@h/0"}, r"http://:\*\*\*@h/0"),
    ],
)  # fmt: skip
def test_bad_security_and_retry_settings(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ServiceConfig.load(env=env)


def test_default_folders_are_the_checkouts_else_the_current_directory(tmp_path: Path) -> None:
    """From the checkout (an editable install), var/ and .cache/ are the checkout's; from a
    copy of the package outside any checkout (as an installed wheel is), the current
    directory's."""
    checkout = Path(__file__).resolve().parents[2]
    cfg = ServiceConfig()
    assert cfg.checkpoint_location == str(checkout / "var" / "checkpoint")
    assert cfg.spark_jars_dir == str(checkout / ".cache" / "spark-kafka" / "jars")
    site, elsewhere = tmp_path / "site-packages", tmp_path / "elsewhere"
    shutil.copytree(checkout / "src" / "psmatch", site / "psmatch",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    elsewhere.mkdir()
    code = ("from psmatch.service.config import ServiceConfig as C; import psmatch; "
            "print(psmatch.__file__); print(C().checkpoint_location); print(C().spark_jars_dir)")
    done = subprocess.run([sys.executable, "-c", code], cwd=elsewhere, capture_output=True,
                          text=True, check=True, env={**os.environ, "PYTHONPATH": str(site)})
    located, checkpoint, jars = done.stdout.splitlines()
    assert located.startswith(str(site))
    assert checkpoint == str(elsewhere / "var" / "checkpoint")
    assert jars == str(elsewhere / ".cache" / "spark-kafka" / "jars")
