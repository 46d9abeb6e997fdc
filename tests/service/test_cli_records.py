"""The CLI's own record checks: ``psmatch subscribe`` and ``psmatch publish`` decode
what they would send with the service's decoders, inside the per-record barrier, so a
poison input is refused with its code and never crashes the command (no broker needed:
nothing is sent)."""

from __future__ import annotations

import pytest

from psmatch.service.cli import main

NO_BROKER = ["--bootstrap-servers", "127.0.0.1:1"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["s1", "a = 1", "--extra", "[" * 5000 + "]" * 5000], "5000 levels deep"),
        (["s1", "a = 1", "--extra", "[1]"], "--extra must be a JSON object, not array"),
        (["s1", "a = 1", "--extra", '{"x": NaN}'], "NaN is not valid JSON"),
        (["s1", "a = 1", "--subscriber", "x\udc00y"], "not valid UTF-8"),
        (["s1", "a = 1", "--extra", '{"x": "\\udc00"}'], "lone surrogate"),
        (["s1", "price <"], "invalid expression"),
        (["s1", " or ".join(["a = 1"] * 300)], "expression too large"),
        (["s" * 1025, "a = 1"], "longer than 1024"),
        (["s1", "a = 1 and b = 2", "--max-subscription-bytes", "20"], "at most 20"),
        # the record fits, the stored form (the subscriber and extra filled in) does not
        (["s1", "a = 1", "--max-subscription-bytes", "20"], "45 bytes once stored"),
    ],
)
def test_subscribe_refuses_what_the_service_would_reject(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["subscribe", *args, *NO_BROKER]) == 2
    err = capsys.readouterr().err
    assert err.startswith("psmatch subscribe: ") and message in err


def test_publish_skips_lines_that_are_not_bounded_json(capsys: pytest.CaptureFixture[str]) -> None:
    deep = '{"a":' * 1000 + "1" + "}" * 1000
    assert main(["publish", deep, "not json", '{"a": NaN}', *NO_BROKER]) == 2
    captured = capsys.readouterr()
    assert "published 0 events" in captured.out and "(3 skipped)" in captured.out
    errors = captured.err.splitlines()
    assert errors[0].startswith("psmatch publish: event 1 nests arrays and objects 1000 levels")
    assert "event 2 is not valid JSON" in errors[1] and "NaN" in errors[2]
