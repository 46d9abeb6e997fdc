"""The docs and the code's prose describe the product, not the work that made it.

Work-log vocabulary is flagged wherever a reader meets it as prose:

* README.md and docs/*.md, the whole text (code blocks included: an example is read as
  the product's behaviour too);
* the docstrings (every bare string statement, read with ``ast``: module, class and
  function docstrings and the attribute docstrings after an assignment) and the
  comments (``tokenize``) of every ``.py`` file under src/ and bench/;
* the comments (``/* */`` and ``//``, outside string and character literals) of every
  ``.c`` and ``.h`` file under src/.

Out of scope: code itself (a variable named ``scratch``, ``tempfile`` or a ``/tmp``
default in a string literal are behaviour, reviewed as code), tests/ (whose fixtures
and literals name temporary paths and these very words), and the files the benchmarks
write beside the docs that are not Markdown (plots, JSON).

What counts as work-log vocabulary (:data:`WORKLOG`): a numbered work stop ("stop 43",
"stop-44", "stops 40 to 43"; "stop the broker" is not one), "scratch" (but "from
scratch"), a path of a machine's temporary or home directories (``/tmp/``,
``/var/folders``, ``/root/``, ``/work/``, ``/home/<user>/``, ``/Users/``), talk of
sessions of work ("this session", "an earlier session", "work stop"; a Spark, terminal
or console session is not one) and the date or clock time of a run (``2026-11-30``,
``23:44 UTC``; a timestamp such as ``2026-11-25T22:16:48Z`` in an example record is data).
History belongs in git; a figure belongs beside the committed command that reproduces it.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

WORKLOG = re.compile(
    r"""
    \bstops?[ _-]?\d+\b                                   # stop 43, stop-44, stops 40
    | (?<!from\ )\bscratch\b                              # scratch files, not "from scratch"
    | (?<![\w.~-])/(?:tmp|var/folders|root|work|Users)/   # temporary and home paths
    | (?<![\w.~-])/home/\w+/
    | \b(?:this|earlier|previous|last|next|later|the\ same)\ session\b
    | \bwork[ -]stops?\b
    | \b20\d\d-[01]\d-[0-3]\d\b(?!T)                      # a run's date, not a timestamp
    | \b[0-2]\d:[0-5]\d(?:-[0-2]\d:[0-5]\d)?\ UTC\b       # a run's clock time
    """,
    re.IGNORECASE | re.VERBOSE,
)
"""Work-log vocabulary, matched case-insensitively."""


def offences(text: str, first_line: int = 1) -> Iterator[tuple[int, str]]:
    """(line, matched text) of every work-log phrase in ``text``."""
    for match in WORKLOG.finditer(text):
        yield first_line + text.count("\n", 0, match.start()), match.group(0)


def python_prose(source: str) -> Iterator[tuple[int, str]]:
    """(first line, text) of every docstring and comment of a Python module."""
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):  # fmt: skip
            yield node.lineno, node.value.value
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def c_comments(source: str) -> Iterator[tuple[int, str]]:
    """(first line, text) of every comment of a C file, skipping string and char literals."""
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        if c in "\"'":
            j = i + 1
            while j < n and source[j] != c:
                j += 2 if source[j] == "\\" else 1
            i = j + 1
        elif source.startswith("//", i):
            end = source.find("\n", i)
            end = n if end < 0 else end
            yield source.count("\n", 0, i) + 1, source[i:end]
            i = end
        elif source.startswith("/*", i):
            end = source.find("*/", i + 2)
            end = n if end < 0 else end + 2
            yield source.count("\n", 0, i) + 1, source[i:end]
            i = end
        else:
            i += 1


def prose(path: Path) -> Iterator[tuple[int, str]]:
    """The parts of ``path`` in scope, as (first line, text)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        yield 1, text
    elif path.suffix == ".py":
        yield from python_prose(text)
    else:
        yield from c_comments(text)


def files_in_scope() -> list[Path]:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    code = [p for top in ("src", "bench") for p in sorted((ROOT / top).rglob("*"))
            if p.suffix in {".py", ".c", ".h"} and p.is_file()]  # fmt: skip
    return docs + code


@pytest.mark.parametrize("path", files_in_scope(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_work_log_vocabulary(path: Path) -> None:
    found = sorted({(line + at - 1, phrase) for line, text in prose(path)
                    for at, phrase in offences(text)})  # fmt: skip
    listing = "\n".join(f"  line {line}: {phrase!r}" for line, phrase in found)
    assert not found, f"{path.relative_to(ROOT)}: work-log vocabulary:\n{listing}"


@pytest.mark.parametrize("text", [
    "stop 43", "Stop-44's runs", "stops 40 to 43", "a scratch file", "Scratch scripts",
    "see /tmp/lead/bs1m.md", "/var/folders/x", "/root/.cache/pip", "under /work/main",
    "/home/alice/src", "measured in this session", "an earlier session", "work stop",
    "the run of 2026-11-30", "at 23:44 UTC", "22:07-23:45 UTC",
])  # fmt: skip
def test_work_log_phrases_are_flagged(text: str) -> None:
    assert list(offences(text))


@pytest.mark.parametrize("text", [
    "stop the broker", "Ctrl-C stops what it started", "stop_query(query)",
    "rebuilt from scratch", "a Spark session", "the console session above",
    "tempfile.mkdtemp()", "the /metrics endpoint", "src/psmatch/core/", "docs/streaming.md",
    '"matched_at":"2026-11-25T22:16:48.766Z"', "https://example.com/tmp", "100 stops",
    "the scratchpad",
])  # fmt: skip
def test_legitimate_text_is_not_flagged(text: str) -> None:
    assert not list(offences(text))


def test_python_prose_is_docstrings_and_comments_only() -> None:
    source = 'X = "/tmp/a"  # why: stop 4\n"""X\'s docstring: scratch."""\ndef f():\n    """f."""\n'
    assert [text for _, text in python_prose(source)] == [
        "X's docstring: scratch.", "f.", "# why: stop 4"]


def test_c_comments_skip_literals() -> None:
    source = 'char *p = "/* not */ /tmp/x"; // one\n/* two\n */ int c = \'"\';\n'
    assert list(c_comments(source)) == [(1, "// one"), (2, "/* two\n */")]
