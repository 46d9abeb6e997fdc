"""The sections of docs/*.md that the benchmark scripts write (shared by bench/*.py).

A script owns the text between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` of one
page and rewrites it whole with its latest figures; the prose around it is the page's
own, so a rerun replaces the figures and keeps no history (that is git's).
"""

from __future__ import annotations

from pathlib import Path


def replace_section(path: Path, name: str, text: str) -> None:
    """Put ``text`` between the ``name`` markers of ``path`` in place of what was there."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    page = path.read_text(encoding="utf-8")
    if begin not in page or end not in page:
        raise SystemExit(f"{path} has no {begin} ... {end} section to replace")
    head, rest = page.split(begin, 1)
    path.write_text(f"{head}{begin}\n{text.strip()}\n{end}{rest.split(end, 1)[1]}",
                    encoding="utf-8")
