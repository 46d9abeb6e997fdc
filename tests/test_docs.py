"""The docs are executed: every example in README.md and docs/*.md runs or says why not.

The kinds of blocks and the ``not executed`` marker are described in tests/docblocks.py.
Here: the Python sessions run as doctests and the JSON formats parse; the console
sessions run against real servers in tests/service/test_doc_sessions.py.
"""

from __future__ import annotations

import doctest
import json
import re
from pathlib import Path

import pytest

from tests.docblocks import DOCS, ROOT, Block, all_blocks, blocks

RUN = {"python", "console", "json"}
"""Languages whose blocks the tests run (python only with >>> prompts)."""
NOT_CODE = {"text"}
"""Diagrams and prose; every fence names its language, so no command hides in a bare one."""


def is_doctest(block: Block) -> bool:
    return block.language == "python" and ">>>" in block.text and block.not_executed is None


def test_every_example_runs_or_says_why_not() -> None:
    problems = []
    for block in all_blocks():
        if block.not_executed is not None or block.language in NOT_CODE:
            continue
        if not block.language:
            problems.append(f"{block.where}: a block without a language (text for diagrams)")
        elif block.language not in RUN:
            problems.append(f"{block.where}: a {block.language!r} block that no test runs")
        elif block.language == "python" and ">>>" not in block.text:
            problems.append(f"{block.where}: a python block without >>> prompts")
        elif block.language == "console" and not block.commands():
            problems.append(f"{block.where}: a console block without '$ ' commands")
    assert not problems, (
        "\n".join(problems)
        + "\nmake them runnable, or put <!-- not executed: REASON --> on the line before"
    )


def test_the_front_door_has_examples_that_run() -> None:
    readme = blocks(ROOT / "README.md")
    assert any(is_doctest(b) for b in readme)
    assert any(b.language == "console" and b.not_executed is None for b in readme)


@pytest.mark.parametrize(
    "path",
    [p for p in DOCS if any(is_doctest(b) for b in blocks(p))],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_python_sessions_run_as_doctests(path: Path) -> None:
    globs: dict[str, object] = {"__name__": path.stem}
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner()
    report: list[str] = []
    for block in filter(is_doctest, blocks(path)):
        test = parser.get_doctest(block.text, globs, block.where, str(path), block.line - 1)
        runner.run(test, out=report.append, clear_globs=False)
    assert runner.tries > 0
    assert runner.failures == 0, "".join(report)


@pytest.mark.parametrize(
    "block",
    [b for b in all_blocks() if b.language == "json" and b.not_executed is None],
    ids=lambda b: b.where,
)
def test_json_examples_parse(block: Block) -> None:
    assert isinstance(json.loads(block.text), dict)


def test_every_section_a_benchmark_writes_is_on_a_page() -> None:
    """Each bench script rewrites its section of a page whole (bench/docsection.py): the
    page must hold the section's two markers once, or the script's run would fail at the
    end, after its minutes of measuring."""
    written = {name for script in sorted((ROOT / "bench").glob("*.py"))
               for name in re.findall(r'replace_section\([^,]+,\s*"(\w+)"',
                                      script.read_text(encoding="utf-8"))}  # fmt: skip
    assert written, "no bench script writes a doc section"
    pages = [path.read_text(encoding="utf-8") for path in DOCS]
    for name in sorted(written):
        begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
        holding = [page for page in pages if begin in page]
        assert len(holding) == 1 and holding[0].count(begin) == holding[0].count(end) == 1, (
            f"{name}: its {begin} ... {end} markers must be on exactly one page, once")
        assert holding[0].index(begin) < holding[0].index(end), name


def test_blocks_markers_and_commands_are_read_as_described(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "Text.\n\n<!-- not executed: serves until Ctrl-C -->\n```sh\nmake run\n```\n\n"
        "```console\n$ echo a\na\n$ true\n$ printf 'b\\nc\\n'\nb\nc\n```\n"
    )
    first, second = blocks(doc)
    assert (first.language, first.line, first.not_executed) == ("sh", 5, "serves until Ctrl-C")
    assert (second.language, second.not_executed) == ("console", None)
    assert second.commands() == [("echo a", "a\n"), ("true", ""), ("printf 'b\\nc\\n'", "b\nc\n")]
    doc.write_text("```console\noutput first\n$ true\n```\n")
    with pytest.raises(ValueError, match="output before the first"):
        blocks(doc)[0].commands()
