"""The bulk scanner: many subscription texts read at once into normal-form columns.

:func:`scan_columns` joins the texts, each ended by a newline, and reads them with one
compiled loop (``scan_comparisons``, src/psmatch/core/kernels/scan.c): each text that is
comparisons of a name with integers of at most 18 digits joined by ``and``, its words
separated by spaces (the common form of :mod:`psmatch.language.bulk`), gets its
comparisons written to columns, and
:func:`psmatch.language.bulk.conjunction_columns` builds their normal form. Every other
text (another form, another kind of value, another spacing, a newline inside) is handed
back for :func:`psmatch.language.parse_subscription`, whose every error stays its own.

Cost O(total length) in the compiled loop, O(comparisons) in numpy passes after it, and
one ``str`` per distinct attribute name (each comparison's name checked byte for byte
against it).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from psmatch.core import _kernels
from psmatch.language.bulk import conjunction_columns
from psmatch.language.columns import SubscriptionColumns


def scan_columns(texts: Sequence[str]) -> tuple[np.ndarray, SubscriptionColumns, np.ndarray]:
    """The positions of the texts in the common form (ascending), their columns (in that
    order), and the positions of the others (int64, ascending)."""
    n = len(texts)
    joined = "\n".join(texts) + "\n" if n else ""
    rejected = np.zeros(n, dtype=bool)
    if joined.count("\n") != n:  # a text holds a newline: its lines would pass for texts
        rejected[:] = True
        joined = "\n" * n
    data = np.frombuffer(joined.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    capacity = len(data) // 4 + 1  # each comparison and what ends it take 4 bytes at least
    text_of, start, length, hashed, value, high = (np.empty(capacity, np.int64)
                                                   for _ in range(6))  # fmt: skip
    code = np.empty(capacity, np.int8)
    flags = rejected.view(np.uint8)
    count = _kernels.scan_comparisons(data, flags, text_of, start, length, hashed, code,
                                      value, high)  # fmt: skip
    text_of, start, length = text_of[:count], start[:count], length[:count]
    names = _names(data, start, length, hashed[:count], rejected, text_of)
    accepted, columns = conjunction_columns(list(texts), text_of, names, code[:count],
                                            value[:count], high[:count], rejected)
    return accepted, columns, np.flatnonzero(rejected)


def _names(data: np.ndarray, start: np.ndarray, length: np.ndarray, hashed: np.ndarray,
           rejected: np.ndarray, text_of: np.ndarray) -> list[str]:
    """Each comparison's name: one ``str`` per distinct hash, and every name compared
    byte for byte with the one its hash stands for (a text whose name differs, a hash
    collision, is rejected). O(the names' bytes) in numpy."""
    if not len(start):
        return []
    _, first, inverse = np.unique(hashed, return_index=True, return_inverse=True)
    spelled = [bytes(data[a:a + b]).decode("ascii")
               for a, b in zip(start[first].tolist(), length[first].tolist(), strict=True)]
    same = length == length[first][inverse]
    lengths = np.where(same, length, 0)
    within = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    differs = data[np.repeat(start, lengths) + within] != data[
        np.repeat(start[first][inverse], lengths) + within]
    same[np.repeat(np.arange(len(start)), lengths)[differs]] = False
    rejected[text_of[~same]] = True
    return np.array(spelled, dtype=object)[inverse].tolist()
