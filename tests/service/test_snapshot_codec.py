"""The snapshot codec (:mod:`psmatch.service.snapshot_codec` and its decoder): every
matcher family and every kind of value round-trips, shared references and cycles
included; what the codec does not store is refused with its path; the code versions
cover exactly the stored classes' modules and the core's C sources; and a hostile
description is a :class:`DecodeError`, never code run, a crash or a huge allocation."""

from __future__ import annotations

import array
import contextlib
import functools
import io
import json
import math
import mmap
import re
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psmatch import MATCHERS, make_matcher
from psmatch.begen import BEGenParams, generate
from psmatch.core.columns import GrowableArray
from psmatch.service import snapshot_codec
from psmatch.service.records.notifications import NotificationHeads
from psmatch.service.snapshot_codec import (
    KERNELS,
    MAX_NESTING,
    DecodeError,
    EncodeError,
    StaleCodeError,
    check_code,
    code_digests,
    encode,
    sources_digest,
)
from psmatch.service.snapshot_decoder import Decoder
from psmatch.service.snapshots import load_snapshot, save_snapshot

PROBE = '''
import dataclasses, enum
from typing import NamedTuple

class Node:
    def __init__(self, value):
        self.value, self.next = value, None

class Slotted:
    __slots__ = ("a", "__b", "unset")

    def __init__(self, a, b):
        self.a, self.__b = a, b

    def b(self):
        return self.__b

@dataclasses.dataclass(frozen=True, slots=True)
class Frozen:
    x: int
    y: tuple

class Pair(NamedTuple):
    left: object
    right: object

class Colour(enum.Enum):
    RED = "red"
    BLUE = 2

class Dying:
    def __del__(self):
        pass

class Pickly:
    def __reduce__(self):
        return (Pickly, ())

def function():
    pass
'''


def load_module(name: str, path: Path, source: str) -> types.ModuleType:
    path.write_text(source)
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module  # before its body runs: dataclasses look it up
    exec(compile(source, str(path), "exec"), module.__dict__)
    return module


@pytest.fixture
def probe(tmp_path: Path) -> Iterator[types.ModuleType]:
    """A module ``psmatch.snapshot_probe`` of test classes, as if it were psmatch's."""
    module = load_module("psmatch.snapshot_probe", tmp_path / "probe.py", PROBE)
    yield module
    del sys.modules["psmatch.snapshot_probe"]
    snapshot_codec.module_digest.cache_clear()


def encoded_bytes(root: object) -> tuple[bytes, bytes]:
    encoded = encode(root)
    out = io.BytesIO()
    encoded.write(out)
    return encoded.description, out.getvalue()


def decode(description: bytes, payload: bytes) -> object:
    decoder = Decoder(description, len(payload))
    decoder.read_buffers(io.BytesIO(payload[len(description):]), len(description))
    return decoder.build()


def round_trip(root: object) -> Any:
    return decode(*encoded_bytes(root))


def same(a: object, b: object) -> bool:
    """Equal and of the same types all the way down (NaN equal to NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))  # type: ignore[arg-type]
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)  # type: ignore[index]
    return a == b


# -- every matcher -----------------------------------------------------------------

EXTRA = [("x1", "a1 like 'ab%' and a2 = 'q'"), ("x2", "a3 not in (1, 2) or a4 between 3 and 9"),
         ("x3", "not (a5 = 1.5 and a6 != 'z')"), ("x4", "a7 like '%oo%'"),
         ("x5", "a8 >= 2.5 or s like '%x'"), ("x6", "a9 = true and a10 in ('u', 'v')")]


@pytest.fixture(scope="module")
def workload() -> Any:
    return generate(BEGenParams(subscriptions=400, events=30, matching_probability=0.05))


def built(name: str, workload: Any) -> tuple[Any, NotificationHeads]:
    matcher = make_matcher(name)
    matcher.add_many(workload.subscriptions + EXTRA)
    matcher.remove_many([sub_id for sub_id, _ in workload.subscriptions[:20]])
    matcher.match_batch(workload.events[:5])
    matcher.add("late", "a1 = 3")  # staged, not yet filed: stored as it is
    heads = NotificationHeads()
    heads.put_many(matcher.internal.slots_of(["x1", "x2", "x3"]), [',"s":1,', ',"s":1,', ',"t":2,'])
    return matcher, heads


@pytest.mark.parametrize("name", MATCHERS)
def test_every_matcher_round_trips_and_keeps_working(name: str, workload: Any) -> None:
    matcher, heads = built(name, workload)
    loaded, loaded_heads = round_trip((matcher, heads))
    assert type(loaded) is type(matcher)
    loaded.check()
    loaded_heads.check()
    assert loaded.match_batch(workload.events) == matcher.match_batch(workload.events)
    assert [loaded_heads.get(s) for s in range(8)] == [heads.get(s) for s in range(8)]
    for index in (matcher, loaded):  # the loaded index takes changes as the original does
        index.remove_many(["x1", "late"])
        index.add_many([("n1", "a2 < 50"), ("x2", "a3 = 7")])
    loaded.check()
    assert loaded.match_batch(workload.events) == matcher.match_batch(workload.events)


def test_a_fresh_process_loads_every_family_without_the_codec_importing(
    tmp_path: Path, workload: Any,
) -> None:
    """The decoder resolves classes only in modules already imported: what a new worker
    imports for the matcher it loads (``make_matcher``) is enough for every family."""
    expected = {}
    for name in MATCHERS:
        matcher, heads = built(name, workload)
        save_snapshot(tmp_path, "p:", 3, matcher, heads, "digest")
        expected[name] = [sorted(ids) for ids in matcher.match_batch(workload.events)]
    script = (
        "import json, sys\n"
        "from psmatch.service.snapshots import load_snapshot\n"
        "events = json.loads(sys.argv[2])\n"
        "print(json.dumps({name: [sorted(ids) for ids in load_snapshot(sys.argv[1], 'p:', name)"
        ".matcher.match_batch(events)] for name in sys.argv[3:]}))\n"
    )
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path),
                          json.dumps(workload.events), *MATCHERS],
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == expected


def test_a_growable_array_is_stored_as_its_live_values_not_its_map() -> None:
    column = GrowableArray(np.int64)
    column.extend(np.arange(1 << 16))  # large enough to live in a memory map
    column.append(-1)  # pending
    loaded = round_trip(column)
    assert np.array_equal(loaded.view(), np.append(np.arange(1 << 16), -1))
    loaded.append(5)
    assert loaded.view()[-1] == 5 and len(loaded) == (1 << 16) + 2


# -- values ------------------------------------------------------------------------

keys = (st.none() | st.booleans() | st.integers() | st.integers(-2**70, 2**70)
        | st.integers(min_value=2**200) | st.floats(allow_nan=False) | st.text())  # fmt: skip
scalars = keys | st.floats()
hashables = st.recursive(keys, lambda inner: st.tuples(inner, inner)
                         | st.frozensets(inner, max_size=3), max_leaves=8)  # fmt: skip
values = st.recursive(
    scalars | st.binary(max_size=40) | st.binary(max_size=8).map(bytearray),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(hashables, inner, max_size=4) | st.sets(hashables, max_size=4)
    | st.frozensets(hashables, max_size=4),
    max_leaves=30,
)


@given(values)
@settings(max_examples=300, deadline=None)
def test_any_value_round_trips(value: object) -> None:
    assert same(round_trip(value), value)


def test_special_numbers_and_strings_round_trip() -> None:
    value = [2**63, -2**63, 2**63 - 1, -(2**63) + 1, 10**5000, -10**5000, 0.1, -0.0,
             float("inf"), float("-inf"), 1e308, 5e-324, "\ud800 lone surrogate", "é\x00",
             True, 1, 1.0]  # fmt: skip
    loaded = round_trip(value)
    assert same(loaded, value) and math.copysign(1, loaded[7]) == -1
    assert math.isnan(round_trip(float("nan")))


@pytest.mark.parametrize("array_", [
    np.arange(10, dtype=np.int8), np.arange(7, dtype=">i4"), np.linspace(0, 1, 9),
    np.array([True, False]), np.arange(6, dtype=np.uint64).reshape(2, 3),
    np.arange(12, dtype=np.float32)[::3], np.asfortranarray(np.arange(6).reshape(2, 3)),
    np.array(3.5), np.zeros(0, dtype=np.int32), np.array([1 + 2j], dtype=np.complex64),
    np.zeros(3, dtype=[("tree", "<i4"), ("lo", "<i4"), ("hi", "<i4")]),
    np.array([1, "a", 2.5, None, (1, 2)], dtype=object),
    np.array([["a", 1], ["b", 2]], dtype=object), np.array("x", dtype=object),
])  # fmt: skip
def test_arrays_round_trip_as_aligned_writable_arrays_of_their_own(array_: np.ndarray) -> None:
    loaded = round_trip(array_)
    assert loaded.dtype == array_.dtype and loaded.shape == array_.shape
    assert np.array_equal(loaded, array_) if array_.dtype != object else (
        loaded.tolist() == array_.tolist())  # fmt: skip
    assert loaded.flags.aligned and loaded.flags.writeable and loaded.flags.c_contiguous


def test_buffers_lie_at_aligned_offsets() -> None:
    description, payload = encoded_bytes([np.arange(3, dtype=np.int8), np.arange(5)])
    rows = json.loads(description)["buffers"]
    start = len(description) + -len(description) % 64
    assert [row[3] % 64 for row in rows] == [0, 0] and start % 64 == 0
    (row,) = [row for row in rows if row[1] == "<i8"]
    assert payload[start + row[3]:][:40] == np.arange(5).tobytes()


def test_python_arrays_and_byte_strings_round_trip() -> None:
    value = [array.array("q", [1, -2, 3]), array.array("d", [0.5]), array.array("B"),
             b"\x00\xff" * 100, bytearray(b"mutable")]  # fmt: skip
    loaded = round_trip(value)
    assert loaded == value and [type(x) for x in loaded] == [type(x) for x in value]
    assert [x.typecode for x in loaded[:3]] == ["q", "d", "B"]


def test_shared_references_and_cycles_round_trip(probe: types.ModuleType) -> None:
    shared_list, shared_array = [1, 2], np.arange(4)
    cyclic: list[Any] = ["head"]
    cyclic.append(cyclic)
    first, second = probe.Node(1), probe.Node(2)
    first.next, second.next = second, first  # a cycle of instances
    pair = probe.Pair(first, shared_array)
    root = {"a": shared_list, "b": shared_list, "arrays": (shared_array, shared_array),
            "cyclic": cyclic, "pair": pair, "again": pair, "self": None}  # fmt: skip
    root["self"] = root
    loaded = round_trip(root)
    assert loaded["a"] is loaded["b"] and loaded["a"] == [1, 2]
    assert loaded["arrays"][0] is loaded["arrays"][1] is loaded["pair"].right
    assert loaded["cyclic"][1] is loaded["cyclic"] and loaded["self"] is loaded
    node = loaded["pair"].left
    assert type(node) is probe.Node and node.next.next is node and node.next.value == 2
    assert loaded["again"] is loaded["pair"] and type(loaded["pair"]) is probe.Pair


def test_psmatch_classes_round_trip_by_their_own_rules(probe: types.ModuleType) -> None:
    slotted = probe.Slotted("a", probe.Frozen(1, ("x", probe.Colour.BLUE)))
    loaded = round_trip([slotted, probe.Colour.RED, {probe.Frozen(2, ()): "key"}])
    assert type(loaded[0]) is probe.Slotted and loaded[0].a == "a"
    assert loaded[0].b() == probe.Frozen(1, ("x", probe.Colour.BLUE))
    assert not hasattr(loaded[0], "unset")
    assert loaded[1] is probe.Colour.RED and loaded[0].b().y[1] is probe.Colour.BLUE
    assert loaded[2] == {probe.Frozen(2, ()): "key"}


# -- what is refused when saving ---------------------------------------------------


@pytest.mark.parametrize(("make", "says"), [
    (lambda p: [lambda: 1], r"builtins\.function at root\[0\]"),
    (lambda p: {"k": functools.partial(print)}, r"functools\.partial at root\['k'\]"),
    (lambda p: [p.Node([1]).__init__], r"builtins\.method at root\[0\]"),
    (lambda p: [re.compile("a+")], r"re\.Pattern at root\[0\]"),
    (lambda p: [math], r"builtins\.module"), (lambda p: [p.Node], r"builtins\.type"),
    (lambda p: [memoryview(b"x")], r"builtins\.memoryview"),
    (lambda p: [mmap.mmap(-1, 16)], r"mmap\.mmap"), (lambda p: [np.int64(1)], r"numpy\.int64"),
    (lambda p: [Path("x")], r"pathlib\.PosixPath"), (lambda p: [p.Dying()], "defines __del__"),
    (lambda p: [p.Pickly()], "its own pickling"),
    (lambda p: [np.array(["a"])], "dtype <U1"), (lambda p: [array.array("u", "x")], "array"),
    (lambda p: [np.zeros(2, dtype="datetime64[s]")], "dtype datetime64"),
])  # fmt: skip
def test_what_the_codec_does_not_store_is_refused_with_its_path(
    probe: types.ModuleType, make: Any, says: str,
) -> None:
    with pytest.raises(EncodeError, match=says):
        encode(make(probe))


def test_a_value_nested_in_an_instance_is_refused_with_the_attribute_path(
    probe: types.ModuleType,
) -> None:
    node = probe.Node(probe.Node({"cache": re.compile("x")}))
    with pytest.raises(EncodeError, match=r"re\.Pattern at root\[1\]\.value\.value\['cache'\]"):
        encode([0, node])


def test_a_cycle_through_a_tuple_or_too_deep_a_tuple_is_refused() -> None:
    inner: list[object] = []
    outer = (inner,)
    inner.append(outer)
    with pytest.raises(EncodeError, match="a cycle through a tuple"):
        encode(outer)
    deep: tuple[object, ...] = ()
    for _ in range(MAX_NESTING + 1):
        deep = (deep,)
    with pytest.raises(EncodeError, match="nested deeper"):
        encode(deep)
    assert round_trip([[[[[[]]]]]] * 3)[0] == [[[[[]]]]]  # lists nest freely


# -- versions ----------------------------------------------------------------------


def test_the_code_digests_cover_the_stored_classes_modules_and_bases_only(
    workload: Any,
) -> None:
    matcher, heads = built("psthash", workload)
    code = code_digests(encode((matcher, heads)).classes)
    assert {"psmatch.pstree.psthash", "psmatch.pstree.matcher", "psmatch.core.pipeline",
            "psmatch.core.matcher", "psmatch.core.columns", KERNELS} <= set(code)  # fmt: skip
    assert type(heads).__module__ in code
    unrelated = {"psmatch.explain", "psmatch.matchers", "psmatch.service.snapshots",
                 "psmatch.service.snapshot_codec", "psmatch.begen.generator"}  # fmt: skip
    assert not unrelated & set(code)
    check_code(code)


def test_a_change_to_a_stored_class_s_module_is_stale_and_another_module_s_is_not(
    probe: types.ModuleType, tmp_path: Path,
) -> None:
    other = load_module("psmatch.snapshot_other", tmp_path / "other.py", "X = 1\n")
    try:
        code = code_digests(encode([probe.Node(1)]).classes)
        assert "psmatch.snapshot_probe" in code and "psmatch.snapshot_other" not in code
        Path(other.__file__ or "").write_text("X = 2\n")
        snapshot_codec.module_digest.cache_clear()
        check_code(code)  # an unrelated module changed: still valid
        Path(probe.__file__ or "").write_text(PROBE + "\n# changed\n")
        snapshot_codec.module_digest.cache_clear()
        with pytest.raises(StaleCodeError, match=re.escape("psmatch.snapshot_probe changed")):
            check_code(code)
    finally:
        del sys.modules["psmatch.snapshot_other"]
    with pytest.raises(StaleCodeError, match="no code version"):
        check_code({"psmatch.core.columns": code_digests([GrowableArray])[
            "psmatch.core.columns"]})  # fmt: skip
    with pytest.raises(StaleCodeError, match=re.escape("psmatch.gone no longer exists")):
        check_code({**code_digests([GrowableArray]), "psmatch.gone": "0"})


def test_the_c_sources_digest_covers_every_c_and_h_file_under_the_core(tmp_path: Path) -> None:
    (tmp_path / "kernels").mkdir()
    (tmp_path / "_kernels.c").write_text("int x = 1;\n")
    (tmp_path / "kernels" / "args.h").write_text("#define A 1\n")
    before = sources_digest(tmp_path)
    (tmp_path / "notes.txt").write_text("not code")
    (tmp_path / "columns.py").write_text("X = 1\n")  # Python is covered per module
    assert sources_digest(tmp_path) == before
    (tmp_path / "kernels" / "args.h").write_text("#define A 2\n")
    after_h = sources_digest(tmp_path)
    (tmp_path / "kernels" / "split.c").write_text("int y;\n")  # a file split off
    assert len({before, after_h, sources_digest(tmp_path)}) == 3


# -- hostile descriptions ----------------------------------------------------------


def hostile(graph: dict[str, Any], space: int = 0) -> object:
    """Decode a forged description with ``space`` zero bytes of buffers after it."""
    description = json.dumps({"classes": [], "buffers": [], "objects": [], "root": None,
                              **graph}).encode()  # fmt: skip
    payload = description + bytes(-len(description) % 64 + space)
    return decode(description, payload)


@pytest.mark.parametrize(("row", "says"), [
    (["os", "system", "object", []], "not in a psmatch module"),
    (["builtins", "eval", "object", []], "not in a psmatch module"),
    (["subprocess", "Popen", "object", []], "not in a psmatch module"),
    (["psmatch.matchers", "make_matcher", "object", []], "is not a class of psmatch"),
    (["psmatch.service.snapshots", "Path", "object", []], "is not a class of psmatch"),
    (["psmatch.service.snapshots", "os.system", "object", []], "is not a class of psmatch"),
    (["psmatch.service.snapshots", "json", "object", []], "is not a class of psmatch"),
    (["psmatch.__main__", "main", "object", []], "has not imported"),
    (["psmatch.snapshot_probe", "Dying", "object", []], "defines __del__"),
    (["psmatch.snapshot_probe", "Pickly", "object", []], "its own pickling"),
    (["psmatch.snapshot_probe", "Colour", "object", []], "stored as 'enum', not 'object'"),
    (["psmatch.snapshot_probe", "Node", "state", None], "stored as 'object', not 'state'"),
    (["psmatch.snapshot_probe", "Pair", "namedtuple", ["right", "left"]], "has fields"),
    (["psmatch.snapshot_probe", "Slotted", "object", ["a", "nope"]], "no attribute 'nope'"),
    (["psmatch.snapshot_probe", "Node.__init__", "object", []], "not a class of psmatch"),
    (["psmatch.snapshot_probe", "Node.__class__", "object", []], "not a class of psmatch"),
    (["psmatch.snapshot_probe", "Node", "object", ["a", "a"]], "distinct attribute names"),
    (["psmatch.snapshot_probe", "Node"], "is not [module, qualname, kind, names]"),
])  # fmt: skip
def test_only_allowed_psmatch_classes_are_resolved(
    probe: types.ModuleType, row: list[object], says: str,
) -> None:
    with pytest.raises(DecodeError, match=re.escape(says)):
        hostile({"classes": [row]})


def test_nothing_named_by_a_file_runs(probe: types.ModuleType, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    for row in (["os", "system", "object", []], ["builtins", "exec", "object", []]):
        with pytest.raises(DecodeError):
            hostile({"classes": [row], "objects": [["object", 0, []]],
                     "root": f"import os; os.system('touch {marker}')"})  # fmt: skip
    assert not marker.exists()


def test_an_abstract_class_is_not_instantiated() -> None:
    with pytest.raises(DecodeError, match="abstract"):
        hostile({"classes": [["psmatch.core.matcher", "Matcher", "object", []]],
                 "objects": [["object", 0, []]], "root": ["ref", 0]})  # fmt: skip


@pytest.mark.parametrize(("rows", "space", "says"), [
    ([["ndarray", "<i8", [2**40], 0, 2**43]], 64, "does not fit"),
    ([["ndarray", "<i8", [2**62, 2**62], 0, 0]], 64, "does not fit"),
    ([["ndarray", "<i8", [-1], 0, -8]], 64, "no valid shape"),
    ([["ndarray", "<i8", [1], 8, 8]], 64, "does not fit"),  # misaligned
    ([["ndarray", "<i8", [1], 128, 8]], 136, "does not fit"),  # a gap before it
    ([["ndarray", "<i8", [1], 0.0, 8]], 8, "does not fit"),
    ([["ndarray", "<i8", [8], 0, 64], ["bytes", None, [1], 32, 1]], 128, "does not fit"),
    ([["ndarray", "<i8", [1], 0, 8]], 4, "does not fit"),
    ([["ndarray", "<i8", [1], 0, 8]], 64, "the buffers take 8 bytes, the file holds 64"),
    ([["ndarray", "|O8", [1], 0, 8]], 8, "not allowed"),
    ([["ndarray", "<U4", [1], 0, 16]], 16, "not allowed"),
    ([["ndarray", [["a", "|O8"]], [1], 0, 8]], 8, "not allowed"),
    ([["ndarray", [["a", "<i4"], ["a", "<i4"]], [1], 0, 8]], 8, "not allowed"),
    ([["array", "u", [1], 0, 4]], 4, "not allowed"),
    ([["pickle", None, [1], 0, 1]], 1, "not allowed"),
    ([["bytes", None, [1, 1], 0, 1]], 1, "no valid shape"), ([[1, 2]], 1, "is not [kind"),
])  # fmt: skip
def test_buffer_rows_are_checked_against_the_payload_before_allocating(
    rows: list[object], space: int, says: str,
) -> None:
    with pytest.raises(DecodeError, match=re.escape(says)):
        hostile({"buffers": rows}, space)


@pytest.mark.parametrize(("objects", "root", "says"), [
    ([["tuple", [["ref", 1]]], ["tuple", []]], ["ref", 0], "before it is built"),
    ([["tuple", [["ref", 0]]]], ["ref", 0], "before it is built"),
    ([["list", [["ref", 5]]]], ["ref", 0], "is not a value"),
    ([["list", [{"a": 1}]]], ["ref", 0], "is not a value"),
    ([["eval", "1"]], None, "is not a kind of entry"),
    ([["objects", [10**12], [1]]], ["ref", 0], "object array of shape"),
    ([["dict", [1, 2], [3]]], ["ref", 0], "differ in number"),
    ([["list", []], ["dict", [["ref", 0]], [1]]], ["ref", 1], "unhashable"),
    ([["buffer", 0]], None, "is not a buffer of its own"),
    ([["enum", 0, 1]], None, "is not in the class table"),
    ([7], None, "is not a list of its kind first"),
    ([["list", 5]], ["ref", 0], "its values are not a list"),
])  # fmt: skip
def test_object_entries_break_no_rule(objects: list[object], root: object, says: str) -> None:
    with pytest.raises(DecodeError, match=re.escape(says)):
        hostile({"objects": objects, "root": root})


def test_deep_nesting_is_refused_without_recursion() -> None:
    with pytest.raises(DecodeError, match="not JSON"):
        decode(b"[" * 100_000 + b"]" * 100_000, b"[" * 100_000 + b"]" * 100_000)
    chain: list[object] = [["tuple", []]] + [["tuple", [["ref", i]]] for i in range(10_000)]
    with pytest.raises(DecodeError, match="nested deeper"):
        hostile({"objects": chain, "root": ["ref", len(chain) - 1]})
    lists: list[object] = [["list", []]] + [["list", [["ref", i]]] for i in range(100_000)]
    assert isinstance(hostile({"objects": lists, "root": ["ref", len(lists) - 1]}), list)


def test_a_state_entry_calls_only_its_class_s_own_setstate() -> None:
    loaded = hostile({"classes": [["psmatch.core.columns", "GrowableArray", "state", None]],
                      "objects": [["list", [1, 2]], ["state", 0, ["ref", 0]]],
                      "root": ["ref", 1]})  # fmt: skip
    assert type(loaded) is GrowableArray
    with pytest.raises(DecodeError, match="TypeError"):
        hostile({"classes": [["psmatch.core.columns", "GrowableArray", "state", None]],
                 "objects": [["state", 0, 5]], "root": ["ref", 0]})  # fmt: skip


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
    | st.sampled_from(["ref", "int", "list", "tuple", "dict", "object", "buffer", "enum",
                       "state", "objects", "namedtuple", "ndarray", "<i8", "psmatch.core.columns",
                       "GrowableArray", "0x10"]),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.sampled_from(
        ["classes", "buffers", "objects", "root"]) | st.text(max_size=4), inner, max_size=4),
    max_leaves=40,
)  # fmt: skip


@given(json_values, st.integers(0, 256))
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_json_description_is_decoded_or_refused(graph: object, space: int) -> None:
    description = json.dumps(graph).encode()
    payload = description + bytes(-len(description) % 64 + space)
    with contextlib.suppress(DecodeError):
        decode(description, payload)


@given(st.binary(max_size=300))
@settings(max_examples=300, deadline=None)
def test_any_bytes_as_a_description_are_refused(data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode(data, data + bytes(-len(data) % 64))


def test_save_and_load_go_through_the_codec(tmp_path: Path, workload: Any) -> None:
    matcher, heads = built("pstbloom", workload)
    path = save_snapshot(tmp_path, "p:", 4, matcher, heads, "digest")
    assert path is not None and b"pickle" not in path.read_bytes()[:16384]
    snap = load_snapshot(tmp_path, "p:", "pstbloom")
    assert snap.matcher.match_batch(workload.events) == matcher.match_batch(workload.events)
