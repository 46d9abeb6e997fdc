"""Tenants in records: a tenant's name, its topics, and the id the service gives its
subscriptions. Pure logic, no I/O.

With ``tenancy = "topics"`` a tenant is known from the topic its records come in, whose
WRITE the broker grants to that tenant's principal alone, never from a record's content:
tenant ``alice`` writes ``<subscriptions topic>.alice`` and reads
``<notifications topic>.alice`` and ``<rejected topic>.alice`` (:func:`tenant_topic`).
A tenant's name is :data:`TENANT_PATTERN` (:func:`check_tenant`), so it holds no
:data:`SCOPE_SEPARATOR`: the service's id of alice's subscription ``s`` is ``alice/s``
(:func:`scoped_id`), in Redis, the change log, the index and its snapshots alike, and a
record of alice's topic keyed ``bob-1`` names ``alice/bob-1``, never bob's. Her
notifications carry ``s`` again (:func:`split_scoped`; for a worker's matches at once,
:func:`tenant_runs` and :func:`own_ids`, in numpy).
"""

from __future__ import annotations

import re

import numpy as np

TENANCY_MODES = ("single", "topics")
"""``single``: one tenant, the four topics as named (the default); ``topics``: a
subscriptions, notifications and rejected topic per tenant, one events topic."""
TENANT_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
"""A tenant's name: lower-case letters, digits, ``_`` and ``-``, at most 63 characters,
a letter or digit first (a valid part of a Kafka topic name and of a user name)."""
SCOPE_SEPARATOR = "/"
"""Between the tenant and its own id in the service's id: no tenant name holds it."""


def check_tenant(name: str) -> str:
    """``name`` if it is a tenant's name (:data:`TENANT_PATTERN`), else
    ``ValueError`` saying which names are (a name comes from an operator, never from a
    record)."""
    if TENANT_PATTERN.fullmatch(name) is None:
        raise ValueError(f"a tenant's name is 1 to 63 of a-z, 0-9, _ and -, a letter or "
                         f"digit first, not {name!r}")  # fmt: skip
    return name


def tenant_topic(base: str, tenant: str) -> str:
    """The topic of ``tenant`` for the topic ``base`` (subscriptions, notifications or
    rejected): ``<base>.<tenant>``."""
    return f"{base}.{tenant}"


def topic_pattern(base: str) -> str:
    """The Java regular expression of every tenant's topic of ``base`` (what Spark's
    ``subscribePattern`` reads)."""
    return re.escape(base) + r"\." + TENANT_PATTERN.pattern


def tenant_of_topic(topic: str, base: str) -> str | None:
    """The tenant whose topic of ``base`` is ``topic``; ``None`` if it is none's."""
    prefix = base + "."
    if not topic.startswith(prefix):
        return None
    tenant = topic[len(prefix) :]
    return tenant if TENANT_PATTERN.fullmatch(tenant) else None


def scoped_id(tenant: str, sub_id: str) -> str:
    """The service's id of ``tenant``'s subscription ``sub_id``."""
    return f"{tenant}{SCOPE_SEPARATOR}{sub_id}"


def split_scoped(scoped: str) -> tuple[str, str]:
    """``(tenant, id)`` of a scoped id (:func:`scoped_id`)."""
    tenant, _, sub_id = scoped.partition(SCOPE_SEPARATOR)
    return tenant, sub_id


_SEPARATOR_BYTE = ord(SCOPE_SEPARATOR)


def _separators(offsets: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The start of each scoped id of ``(offsets, data)`` and where its separator is."""
    starts = offsets[:-1]
    found = np.flatnonzero(data == _SEPARATOR_BYTE)
    return starts, found[np.searchsorted(found, starts)]


def tenant_runs(offsets: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, list[str], np.ndarray]:
    """For the scoped ids of ``(offsets, data)`` (int64 offsets from 0, UTF-8 data, as
    :meth:`psmatch.core.matcher.SlotPath.ids_utf8` gives them): a stable order of them
    that puts each tenant's together, the tenants in that order, and how many ids each
    has.

    Cost O(ids x the longest tenant name / 8) in numpy: each tenant's name read as up to
    eight 64-bit words and the ids sorted by them (``lexsort``, stable), no Python per id.
    """
    starts, ends = _separators(offsets, data)
    n = len(starts)
    if not n:
        return np.empty(0, dtype=np.int64), [], np.empty(0, dtype=np.int64)
    lengths = ends - starts
    width = max(8, -(-int(lengths.max()) // 8) * 8)
    columns = np.arange(width)
    inside = columns < lengths[:, None]
    names = np.zeros((n, width), dtype=np.uint8)  # no name holds a NUL byte
    names[inside] = data[(starts[:, None] + columns)[inside]]
    words = names.view(np.uint64)
    order = np.lexsort(words.T[::-1])
    ranked = words[order]
    first = np.ones(n, dtype=bool)
    first[1:] = (ranked[1:] != ranked[:-1]).any(axis=1)
    heads = np.flatnonzero(first)
    counts = np.diff(np.append(heads, n))
    return order, [bytes(row[row != 0]).decode() for row in names[order[heads]]], counts


def own_ids(offsets: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The scoped ids of ``(offsets, data)`` without their tenant: each tenant's own ids,
    in the same form. Cost O(ids + bytes) in numpy."""
    starts, ends = _separators(offsets, data)
    size = len(data) + 1
    edges = np.bincount(starts, minlength=size) - np.bincount(ends + 1, minlength=size)
    own = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(offsets[1:] - ends - 1, out=own[1:])
    return own, data[np.cumsum(edges[:-1]) == 0]
