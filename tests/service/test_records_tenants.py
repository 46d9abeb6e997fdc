"""Tenants in records: names, topics, scoped ids, and a tenant's records validated into
its own namespace, its rejects to its own topic; the matches' tenants and own ids in
numpy, the same as splitting each id in Python."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from psmatch.core.slot_bytes import joined
from psmatch.service.config import ServiceConfig
from psmatch.service.errors import ConfigError
from psmatch.service.records.common import DEFAULT_LIMITS
from psmatch.service.records.rejected import parse_rejected
from psmatch.service.records.subscriptions import parse_subscription_record, stored_fields
from psmatch.service.records.tenants import (
    check_tenant,
    own_ids,
    scoped_id,
    split_scoped,
    tenant_of_topic,
    tenant_runs,
    topic_pattern,
)
from psmatch.service.subscriptions import Tenancy, validate_records


@pytest.mark.parametrize("name", ["alice", "a", "0-team_x", "a" * 63])
def test_a_tenant_name_of_the_charset_is_accepted(name: str) -> None:
    assert check_tenant(name) == name
    assert tenant_of_topic(f"psmatch.subscriptions.{name}", "psmatch.subscriptions") == name


@pytest.mark.parametrize("name", ["", "Alice", "-a", "_a", "a/b", "a.b", "a b", "é", "a" * 64])
def test_any_other_name_is_refused_in_one_line(name: str) -> None:
    with pytest.raises(ValueError, match="a tenant's name is 1 to 63 of a-z"):
        check_tenant(name)
    assert tenant_of_topic(f"psmatch.subscriptions.{name}", "psmatch.subscriptions") is None
    with pytest.raises(ConfigError, match=r"^tenant: a tenant's name"):
        ServiceConfig(tenant=name or "-")


def test_the_tenancy_setting_is_checked() -> None:
    assert ServiceConfig().tenancy == "single"
    with pytest.raises(ConfigError, match=r"tenancy must be one of \('single', 'topics'\)"):
        ServiceConfig(tenancy="many")
    cfg = ServiceConfig(tenant="alice")
    assert cfg.own_topic(cfg.subscriptions_topic) == "psmatch.subscriptions.alice"
    assert ServiceConfig().own_topic("psmatch.notifications") == "psmatch.notifications"


def test_the_pattern_reads_every_tenants_topic_and_no_other() -> None:
    import re

    pattern = re.compile(topic_pattern("psmatch.subscriptions"))
    assert pattern.fullmatch("psmatch.subscriptions.alice")
    for other in ("psmatch.subscriptions", "psmatch.subscriptionsXalice",
                  "psmatch.subscriptions.Alice", "psmatch.subscriptions.a.b"):  # fmt: skip
        assert not pattern.fullmatch(other), other


def test_a_record_of_a_tenant_names_its_own_subscription_whatever_its_key() -> None:
    change = parse_subscription_record(b"bob-1", b'{"expr": "a = 1"}', DEFAULT_LIMITS, "alice")
    assert change.sub_id == "alice/bob-1" == scoped_id("alice", "bob-1")
    assert split_scoped(change.sub_id) == ("alice", "bob-1")
    assert change.stored is not None and stored_fields(change.stored)[1] == "bob-1"
    assert parse_subscription_record(b"bob-1", None, DEFAULT_LIMITS, "alice").sub_id == (
        "alice/bob-1")


def test_tenants_records_are_validated_into_their_namespace_and_rejected_to_their_topic() -> None:
    tenants = Tenancy("subs", "rej")
    validated = validate_records([
        (b"s1", b'{"expr": "a = 1"}', "subs.alice", 0, 0),
        (b"s1", b'{"expr": "a = 2"}', "subs.bob", 0, 0),
        (b"bad", b'{"expr": "a <"}', "subs.bob", 0, 1),
    ], DEFAULT_LIMITS, tenants)  # fmt: skip
    assert [c.sub_id for c in validated.changes] == ["alice/s1", "bob/s1"]
    assert [(code, key, topic) for code, key, _, topic in validated.rejects] == [
        ("invalid_expression", b"bad", "rej.bob")]
    by_topic = validated.rejects_by_topic("rej")
    assert list(by_topic) == ["rej.bob"]
    assert parse_rejected(by_topic["rej.bob"][0][1]).topic == "subs.bob"


def test_the_matches_tenants_and_own_ids_in_numpy_are_those_of_each_id() -> None:
    rng = np.random.default_rng(7)
    tenants = ["alice", "bob", "a-1", "zz_top"]
    ids = [scoped_id(tenants[rng.integers(4)], f"{'é' * int(rng.integers(3))}s{i}/x")
           for i in range(200)]  # fmt: skip
    data, offsets = joined([i.encode() for i in ids])
    order, names, counts = tenant_runs(offsets, data)
    assert sorted(names) == sorted({split_scoped(i)[0] for i in ids})
    in_runs = [ids[i] for i in order]
    assert [split_scoped(i)[0] for i in in_runs] == [
        name for name, n in zip(names, counts, strict=True) for _ in range(n)]
    for name in names:  # stable: each tenant's in the order given
        assert [i for i in in_runs if i.startswith(name + "/")] == [
            i for i in ids if i.startswith(name + "/")]
    own_offsets, own_data = own_ids(offsets, data)
    own = [bytes(own_data[a:b]).decode() for a, b in pairwise(own_offsets)]
    assert own == [split_scoped(i)[1] for i in ids]
    empty = np.zeros(1, np.int64), np.empty(0, np.uint8)
    assert tenant_runs(*empty)[1] == [] and own_ids(*empty)[0].tolist() == [0]


def test_a_worker_writes_each_tenants_notifications_to_its_topic_with_its_own_ids() -> None:
    """Matches of three tenants' subscriptions (two named alike, some with a subscriber
    of their own, even the scoped id, some defaulting to the key): each record to its
    tenant's topic, keyed and
    written with the tenant's own id, each tenant's records one run in the order matched;
    one tenant alone is one run too."""
    import pyarrow as pa

    from psmatch import make_matcher
    from psmatch.adapters.kafka.sink import topic_runs
    from psmatch.service.records.notifications import parse_notification
    from psmatch.service.task_contract import OUTPUT_SCHEMA, TaskMetrics, WorkerSettings
    from psmatch.service.tasks import match_rows
    from psmatch.service.worker_index import WorkerIndex

    settings = WorkerSettings("redis://unused", "p:", 10, "scan", "notif", "rej",
                              tenancy="topics", subscriptions_topic="subs")  # fmt: skip
    index = WorkerIndex(make_matcher("scan"))
    subs = [("bob", b"s1", b'{"expr": "a < 10"}'), ("alice", b"s1", b'{"expr": "a < 10"}'),
            ("alice", b"bob-1", b'{"expr": "a < 5", "subscriber": "al@x"}'),
            ("bob", b"b2", b'{"expr": "a = 3", "subscriber": "bob/b2"}'),
            ("carol", b"c", b'{"expr": "a > 100"}')]  # fmt: skip
    for tenant, key, value in subs:
        change = parse_subscription_record(key, value, DEFAULT_LIMITS, tenant)
        assert change.stored is not None
        index.put(change.sub_id, change.stored)
        index.check()
    rows = [(f"e{i}".encode(), f'{{"a": {i}}}'.encode(), "events", 0, i, 1000) for i in range(8)]
    out = pa.Table.from_batches(list(match_rows(index, settings, rows, TaskMetrics())),
                                OUTPUT_SCHEMA)  # fmt: skip
    records = out.to_pydict()
    runs = [t for t, _, _ in topic_runs(out.column("topic").combine_chunks())]
    assert sorted(runs) == ["notif.alice", "notif.bob"]  # one run each
    seen = []
    for topic, key, value in zip(records["topic"], records["key"], records["value"], strict=True):
        n = parse_notification(value)
        assert n.subscription_id == key.decode()
        seen.append((topic, n.subscription_id, n.subscriber, n.event_id))
    alice = [s for s in seen if s[0] == "notif.alice"]
    assert sorted(alice) == sorted(
        [("notif.alice", "s1", "s1", f"e{i}") for i in range(8)]
        + [("notif.alice", "bob-1", "al@x", f"e{i}") for i in range(5)])
    assert [e for _, sub, _, e in alice if sub == "s1"] == [f"e{i}" for i in range(8)]
    bobs = [s for s in seen if s[0] == "notif.bob"]
    assert [s for s in bobs if s[1] == "s1"] == [
        ("notif.bob", "s1", "s1", f"e{i}") for i in range(8)]
    assert [s for s in bobs if s[1] != "s1"] == [("notif.bob", "b2", "bob/b2", "e3")]
    index.delete(["alice/s1", "alice/bob-1"])
    index.check()
    records = pa.Table.from_batches(list(match_rows(index, settings, rows, TaskMetrics())),
                                    OUTPUT_SCHEMA).to_pydict()  # fmt: skip
    assert set(records["topic"]) == {"notif.bob"} and len(records["topic"]) == 9


def test_the_lag_of_every_tenants_subscriptions_topic_is_the_subscriptions_lag() -> None:
    from psmatch.service.metrics import ServiceMetrics

    progress = {"sources": [{
        "endOffset": {"ev": {"0": 20}, "subs.alice": {"0": 5}, "subs.bob": {"0": 1}},
        "latestOffset": {"ev": {"0": 25}, "subs.alice": {"0": 7}, "subs.bob": {"0": 4},
                         "other": {"0": 9}},
    }]}  # fmt: skip
    for tenants, behind in ((True, 5), (False, 0)):
        m = ServiceMetrics("subs", "ev", tenants=tenants)
        m.observe_progress(progress)
        sample = m.registry.get_sample_value
        assert sample("psmatch_input_offsets_behind_latest", {"input": "subscriptions"}) == behind
        assert sample("psmatch_input_offsets_behind_latest", {"input": "events"}) == 5
