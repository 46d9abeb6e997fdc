"""The code examples of README.md and docs/*.md, read as the tests execute them.

A fenced block is one of:

* ``python`` with ``>>>`` prompts: a doctest (tests/test_docs.py), the blocks of one
  file sharing their names like one interpreter session;
* ``console``: a terminal session, ``$ command`` lines followed by their output, run
  against real Kafka, Redis and Spark (tests/service/test_doc_sessions.py);
* ``json``: a record format, which must parse;
* ``text`` or no language: a diagram or prose, not code;
* anything else (``sh``, ``python`` without prompts, ...), or any block the tests cannot
  run, carries ``<!-- not executed: REASON -->`` on the line before its fence, so the
  reason is in the doc's source and a reader of the source sees which examples are
  not checked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))

_FENCE = re.compile(r"^(```+)\s*([\w+-]*)\s*$")
_NOT_EXECUTED = re.compile(r"^<!--\s*not executed:\s*(?P<reason>.+?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    """1-based line of the block's first content line."""
    language: str
    text: str
    not_executed: str | None
    """The reason given in ``<!-- not executed: ... -->``, or None."""

    @property
    def where(self) -> str:
        shown = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{shown}:{self.line}"

    def commands(self) -> list[tuple[str, str]]:
        """A console block as (command, expected output) pairs."""
        pairs: list[tuple[str, list[str]]] = []
        for line in self.text.splitlines():
            if line.startswith("$ "):
                pairs.append((line[2:], []))
            elif pairs:
                pairs[-1][1].append(line)
            elif line.strip():
                raise ValueError(f"{self.where}: output before the first '$ ' command")
        return [(command, "".join(out + "\n" for out in output)) for command, output in pairs]


def blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end].rstrip() != fence.group(1):
            end += 1
        if end == len(lines):
            raise ValueError(f"{path}:{i + 1}: unclosed code fence")
        marker = _NOT_EXECUTED.match(lines[i - 1]) if i else None
        found.append(Block(path, i + 2, fence.group(2), "\n".join(lines[i + 1 : end]) + "\n",
                           marker.group("reason") if marker else None))  # fmt: skip
        i = end + 1
    return found


def all_blocks() -> list[Block]:
    return [block for path in DOCS for block in blocks(path)]
