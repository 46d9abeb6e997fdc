"""The notification records of a worker's matches with ``tenancy = "topics"``: each to
its subscription's tenant's notifications topic, keyed and written with the tenant's own
id (:mod:`psmatch.service.records.tenants`), so that a tenant reads its notifications
alone and sees no other tenant's name or id.

The matches of a chunk are put in tenant order (stable: each tenant's in the order
matched), so that each tenant's records are one run of one topic for the sink
(:func:`psmatch.adapters.kafka.sink.topic_runs`). Cost O(matches) in numpy and
compiled copies, a topic name made per tenant of the chunk, nothing per match in Python.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from psmatch.adapters.arrow import STRING, binary_column
from psmatch.core.slot_bytes import copy_ranges, joined
from psmatch.service.records.tenants import own_ids, tenant_runs, tenant_topic
from psmatch.service.task_contract import output_batches
from psmatch.service.worker_index import WorkerIndex


def tenant_notification_records(
    base: str, events: np.ndarray, slots: np.ndarray, index: WorkerIndex, tails: list[bytes],
) -> list[pa.RecordBatch]:
    """:func:`psmatch.service.tasks.notification_records` for scoped ids: the records of
    matches ``(events[i], slots[i])``, each to ``<base>.<tenant>``."""
    ids = index.matcher.internal.ids_utf8(slots)
    order, names, counts = tenant_runs(*ids)
    if len(names) > 1:
        events, slots = events[order], slots[order]
        ids = index.matcher.internal.ids_utf8(slots)
    topics = _topics([tenant_topic(base, name) for name in names], counts)
    own = own_ids(*ids)
    return output_batches(topics, binary_column(*own),
                          index.heads.join(slots, own, tails, events))  # fmt: skip


def _topics(names: list[str], counts: np.ndarray) -> pa.Array:
    """A ``string`` column of ``names[i]`` ``counts[i]`` times each, in order: each name's
    bytes copied into place by the compiled ``copy_ranges``, O(rows + bytes)."""
    data, offsets = joined([name.encode() for name in names])
    which = np.repeat(np.arange(len(names)), counts)
    lengths = np.diff(offsets)[which]
    out_offsets = np.zeros(len(which) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out_offsets[1:])
    out = np.empty(int(out_offsets[-1]), dtype=np.uint8)
    copy_ranges(data, offsets[:-1][which], lengths, out, out_offsets[:-1])
    return binary_column(out_offsets, out, arrow_type=STRING)
