"""``psmatch explain SUB_ID EVENT``: a stored subscription explained, against real Redis."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from psmatch import explain
from psmatch.adapters.state import StateStore
from psmatch.service.cli import main
from psmatch.service.config import ServiceConfig
from psmatch.service.records.subscriptions import dumps_record

EXPR = "price < 20 and category = 'books' and not stock <= 0"


def test_explain_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["explain", "--help"])
    assert exit_info.value.code == 0
    assert "--redis-url" in capsys.readouterr().out


@pytest.fixture
def config(make_config: Callable[..., ServiceConfig]) -> ServiceConfig:
    """A config whose Redis state holds the subscription ``cheap-books``."""
    config = make_config()
    store = StateStore.from_url(config.redis_url, config.redis_prefix)
    store.rebuild({"cheap-books": dumps_record(EXPR, "alice", {})})
    return config


def flags(config: ServiceConfig) -> list[str]:
    return ["--redis-url", config.redis_url, "--redis-prefix", config.redis_prefix]


@pytest.mark.parametrize(
    ("event", "verdict"),
    [
        ({"price": 12, "category": "books", "stock": 3}, "match: the expression is true"),
        ({"price": 25, "category": "books", "stock": 3}, "no match: the expression is false"),
        ({"price": 12, "category": "books"}, "no match: the expression is unknown"),
    ],
)
def test_explain_prints_the_stored_subscription_marked(
    config: ServiceConfig, capsys: pytest.CaptureFixture[str], event: dict, verdict: str
) -> None:
    assert main(["explain", "cheap-books", json.dumps(event), *flags(config)]) == 0
    out = capsys.readouterr().out
    assert out == f"subscription cheap-books: {EXPR}\n{explain(EXPR, event)}\n"
    assert out.splitlines()[1].startswith(verdict)


def test_a_missing_attribute_is_named(
    config: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    event = '{"price": 12, "category": "books"}'
    assert main(["explain", "cheap-books", event, *flags(config)]) == 0
    assert "stock is missing from the event" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nobody", "{}"], "no subscription 'nobody'"),
        (["cheap-books", "{price"], "the event is not valid JSON"),
        (["cheap-books", '{"a":' * 5000 + "1" + "}" * 5000], "levels deep; the limit is"),
        (["cheap-books", '{"a": "x\\udc00y"}'], "lone surrogate"),
        (["cheap-books", '{"price": [1]}'], "invalid event: attribute 'price': arrays"),
        (["cheap-books", "[1]"], "invalid event: an event must be a JSON object"),
    ],
)
def test_bad_input_is_a_usage_error(
    config: ServiceConfig, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["explain", *args, *flags(config)]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""
