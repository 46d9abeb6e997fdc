"""The reading side of :mod:`psmatch.service.snapshot_codec`: a graph's description and
buffers turned back into objects, under that module's rules, running nothing the file
names.

Owns the checks a hostile file meets: :func:`resolve` (the allow-list of classes),
:class:`Decoder`'s checks of every buffer's size and place against the payload before
anything is allocated, the order of the entries, and the nesting bound. Every breach is
a :class:`psmatch.service.snapshot_codec.DecodeError` saying which rule.
"""

from __future__ import annotations

import array
import functools
import json
import math
import sys
import types
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from psmatch.service.snapshot_codec import (
    ALIGN,
    ARRAY_TYPECODES,
    DTYPE_CODE,
    MAX_NESTING,
    MODULE_NAME,
    NESTED_KINDS,
    SHELL_KINDS,
    DecodeError,
    EncodeError,
    class_kind,
    slot_members,
)


class Reader(Protocol):
    def readinto(self, buffer: Any) -> int: ...


def resolve(module: object, qualname: object, kind: object) -> type:
    """The class ``module.qualname`` if it is one the codec stores as ``kind``, looked up
    in the already imported ``module`` by dictionary lookups only; else
    :class:`DecodeError`."""
    name = f"{module}.{qualname}"
    if not (isinstance(module, str) and isinstance(qualname, str) and MODULE_NAME.match(module)):
        raise DecodeError(f"class {name!r} is not in a psmatch module")
    found: Any = sys.modules.get(module)
    if found is None:
        raise DecodeError(f"class {name!r} is in a module this process has not imported")
    for part in qualname.split("."):
        namespace = found.__dict__ if isinstance(found, types.ModuleType | type) else {}
        found = namespace.get(part)
    if not isinstance(found, type) or (found.__module__, found.__qualname__) != (
            module, qualname) or issubclass(found, type):  # fmt: skip
        raise DecodeError(f"{name!r} is not a class of psmatch")
    try:
        actual = class_kind(found)
    except EncodeError as exc:
        raise DecodeError(f"class {name!r} is not allowed: {exc}") from None
    if actual != kind:
        raise DecodeError(f"class {name!r} is stored as {actual!r}, not {kind!r}")
    return found


def aligned(size: int) -> int:
    """``size`` rounded up to :data:`ALIGN`: where the buffers start after a description
    of ``size`` bytes."""
    return size + -size % ALIGN


def _read_exactly(reader: Reader, view: memoryview) -> None:
    while view.nbytes:
        read = reader.readinto(view)
        if not read:
            raise DecodeError("the file ends inside a buffer")
        view = view[read:]


def _dtype(kind: object, code: object) -> np.dtype | str:
    """The dtype (or ``array`` typecode, or ``"B"`` for bytes) a buffer row names."""
    if kind in ("bytes", "bytearray") and code is None:
        return "B"
    if kind == "array" and isinstance(code, str) and code in ARRAY_TYPECODES:
        return code
    if kind == "ndarray":
        if isinstance(code, str) and DTYPE_CODE.match(code):
            return np.dtype(code)
        if isinstance(code, list) and code and all(
                isinstance(f, list) and len(f) == 2 and isinstance(f[0], str) and f[0]
                and isinstance(f[1], str) and DTYPE_CODE.match(f[1]) for f in code) and len(
                {name for name, _ in code}) == len(code):  # fmt: skip
            return np.dtype([(name, c) for name, c in code])
    raise DecodeError(f"a buffer of kind {kind!r} and dtype {code!r} is not allowed")


class Decoder:
    """A snapshot's graph read back: :meth:`read_buffers` then :meth:`build`.

    The constructor parses and checks the description (``graph_bytes`` of the payload)
    against ``payload_bytes``: its classes (:func:`resolve`) and every buffer's dtype,
    shape, size and offset, so that nothing is allocated beyond what the file holds.
    Cost O(description)."""

    def __init__(self, description: bytes, payload_bytes: int) -> None:
        try:
            graph = json.loads(description)
        except (ValueError, RecursionError) as exc:
            raise DecodeError(f"its description is not JSON ({exc})") from None
        if not isinstance(graph, dict) or not all(
                isinstance(graph.get(k), list) for k in ("classes", "buffers", "objects")):
            raise DecodeError("its description lacks classes, buffers or objects")
        self.layouts = [self._layout(row) for row in graph["classes"]]
        self.classes = [cls for _, cls, _ in self.layouts]  # what the code versions cover
        self.rows = self._rows(graph["buffers"], payload_bytes - aligned(len(description)))
        self.objects: list[Any] = graph["objects"]
        self.root = graph.get("root")
        self.buffers: list[Any] = []

    @staticmethod
    def _layout(row: object) -> tuple[str, type, list[Callable[[object, object], None]]]:
        """A class row's kind, class and (object, named tuple) attribute setters."""
        if not isinstance(row, list) or len(row) != 4:
            raise DecodeError(f"class row {row!r} is not [module, qualname, kind, names]")
        module, qualname, kind, names = row
        cls = resolve(module, qualname, kind)
        if kind in ("enum", "state"):
            if names is not None:
                raise DecodeError(f"class row {row!r} names attributes")
            return kind, cls, []
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names) or len(
                set(names)) != len(names):  # fmt: skip
            raise DecodeError(f"class row {row!r} has no list of distinct attribute names")
        if kind == "namedtuple":
            if tuple(names) != cls._fields:  # type: ignore[attr-defined]
                raise DecodeError(f"{module}.{qualname} has fields {cls._fields}, "  # type: ignore[attr-defined]
                                  f"not {names}")  # fmt: skip
            return kind, cls, []
        slots, has_dict = slot_members(cls), cls.__dictoffset__ != 0
        setters: list[Callable[[object, object], None]] = []
        for name in names:
            if name in slots:
                setters.append(slots[name].__set__)
            elif has_dict:
                setters.append(functools.partial(_set_in_dict, name))
            else:
                raise DecodeError(f"{module}.{qualname} has no attribute {name!r}")
        return kind, cls, setters

    @staticmethod
    def _rows(rows: list[object], space: int) -> list[tuple[str, Any, list[int], int, int]]:
        """The buffer rows, checked: each allowed, its size its shape's, right after the
        one before it (at the next aligned offset), within the ``space`` the payload has
        after the description, which they fill."""
        checked, end = [], 0
        for row in rows:
            if not isinstance(row, list) or len(row) != 5:
                raise DecodeError(f"buffer row {row!r} is not [kind, dtype, shape, offset, "
                                  "nbytes]")  # fmt: skip
            kind, code, shape, offset, nbytes = row
            dtype = _dtype(kind, code)
            itemsize = array.array(dtype).itemsize if isinstance(dtype, str) else dtype.itemsize
            dims = range(33) if kind == "ndarray" else range(1, 2)
            if not isinstance(shape, list) or len(shape) not in dims or not all(
                    type(n) is int and n >= 0 for n in shape):  # fmt: skip
                raise DecodeError(f"buffer row {row!r} has no valid shape")
            if type(offset) is not int or offset != aligned(end) or type(nbytes) is not int or (
                    nbytes != math.prod(shape) * itemsize or offset + nbytes > space):  # fmt: skip
                raise DecodeError(f"buffer row {row!r} does not fit the file ({space} bytes "
                                  f"after the description, {end} taken)")  # fmt: skip
            checked.append((kind, dtype, shape, offset, nbytes))
            end = offset + nbytes
        if end != space:
            raise DecodeError(f"the buffers take {end} bytes, the file holds {space}")
        return checked

    def read_buffers(self, reader: Reader, description_bytes: int) -> None:
        """Read every buffer from ``reader``, placed just after the description (of
        ``description_bytes``), into memory of its own. Cost: one read of the payload."""
        at, pad = 0, bytearray(ALIGN)
        _read_exactly(reader, memoryview(pad)[: -description_bytes % ALIGN])
        for kind, dtype, shape, offset, nbytes in self.rows:
            _read_exactly(reader, memoryview(pad)[: offset - at])
            if kind == "ndarray":
                buffer: Any = np.empty(shape, dtype=dtype)
                _read_exactly(reader, memoryview(buffer.reshape(-1).view(np.uint8)))
            else:
                data = bytearray(nbytes)
                _read_exactly(reader, memoryview(data))
                buffer = {"bytes": bytes, "bytearray": lambda b: b}.get(kind, functools.partial(
                    array.array, dtype))(data)  # fmt: skip
            self.buffers.append(buffer)
            at = offset + nbytes

    def build(self) -> object:
        """The root object, every entry created and filled in order; :class:`DecodeError`
        for an entry that breaks the rules. Cost O(entries + values)."""
        entries = self.objects
        try:
            kinds = [entry[0] for entry in entries]
        except (TypeError, IndexError, KeyError):
            raise DecodeError("an object entry is not a list of its kind first") from None
        objects: list[Any] = [None] * len(entries)
        depth = [0] * len(entries)
        used: set[int] = set()
        step = "creating"
        index = -1

        def value(v: object) -> object:
            if type(v) is list and len(v) == 2:
                if v[0] == "ref" and type(v[1]) is int and 0 <= v[1] < len(entries):
                    if v[1] >= index and kinds[v[1]] not in SHELL_KINDS:
                        raise DecodeError(f"refers to entry {v[1]} before it is built")
                    return objects[v[1]]
                if v[0] == "int" and type(v[1]) is str:
                    return int(v[1], 16)
            if v is None or type(v) in (bool, int, float, str):
                return v
            raise DecodeError(f"{v!r} is not a value")

        try:
            for index, entry in enumerate(entries):
                objects[index] = self._create(kinds[index], entry, used, value)
            step = "filling"
            for index, entry in enumerate(entries):
                if kinds[index] in NESTED_KINDS:
                    refs = [v[1] for v in entry[-1] if type(v) is list and v[:1] == ["ref"]
                            and type(v[1]) is int and 0 <= v[1] < len(entries)]  # fmt: skip
                    depth[index] = 1 + max((depth[j] for j in refs), default=0)
                    if depth[index] > MAX_NESTING:
                        raise DecodeError(f"tuples nested deeper than {MAX_NESTING}")
                built = self._fill(kinds[index], entry, objects[index], value)
                if built is not None:
                    objects[index] = built
            index = len(entries)
            return value(self.root)
        except DecodeError as exc:
            raise DecodeError(f"object entry {index} ({step}): {exc}") from None
        except Exception as exc:  # what a psmatch class's __setstate__, __hash__ or __eq__
            # raises on a hostile entry's values is the file's fault, not the code's
            raise DecodeError(f"object entry {index} ({step}): {type(exc).__name__}: "
                              f"{exc}") from None  # fmt: skip

    def _class(self, layout: object, kind: str) -> tuple[type, list[Any]]:
        if type(layout) is not int or not 0 <= layout < len(self.layouts):
            raise DecodeError(f"class {layout!r} is not in the class table")
        stored, cls, setters = self.layouts[layout]
        if stored != kind:
            raise DecodeError(f"class {layout} is stored as {stored!r}, not {kind!r}")
        return cls, setters

    def _create(self, kind: object, entry: list[Any], used: set[int],
                value: Callable[[object], object]) -> object:  # fmt: skip
        """The shell of a container, instance, object array, buffer or enum member;
        None for the entries built from their values."""
        if kind in ("list", "dict", "set"):
            return {"list": list, "dict": dict, "set": set}[kind]()
        if kind in ("object", "state"):
            return object.__new__(self._class(entry[1], kind)[0])
        if kind == "objects":
            shape, items = entry[1], entry[2]
            if not isinstance(shape, list) or len(shape) > 32 or not all(
                    type(n) is int and n >= 0 for n in shape) or not isinstance(
                    items, list) or math.prod(shape) != len(items):  # fmt: skip
                raise DecodeError(f"object array of shape {shape!r} and {len(items)} items")
            return np.empty(shape, dtype=object)
        if kind == "buffer":
            if type(entry[1]) is not int or not 0 <= entry[1] < len(self.buffers) or (
                    entry[1] in used):  # fmt: skip
                raise DecodeError(f"buffer {entry[1]!r} is not a buffer of its own")
            used.add(entry[1])
            return self.buffers[entry[1]]
        if kind == "enum":
            member = value(entry[2])
            if type(member) not in (bool, int, float, str, type(None)):
                raise DecodeError(f"{member!r} is not an enum value")
            return self._class(entry[1], "enum")[0](member)
        if kind in NESTED_KINDS:
            return None
        raise DecodeError(f"{kind!r} is not a kind of entry")

    def _fill(self, kind: str, entry: list[Any], obj: Any, value: Callable[[object], object]
              ) -> object:  # fmt: skip
        """Fill a shell with its entry's values; the object built, for a tuple, frozenset
        or named tuple."""
        items = entry[-1]
        if kind in ("enum", "buffer", "state"):
            if kind == "state":
                cls, _ = self._class(entry[1], "state")
                cls.__setstate__(obj, value(entry[2]))  # type: ignore[attr-defined]
            return None
        if not isinstance(items, list):
            raise DecodeError("its values are not a list")
        values = [value(v) for v in items]
        if kind == "tuple":
            return tuple(values)
        if kind == "frozenset":
            return frozenset(values)
        if kind == "list":
            obj.extend(values)
        elif kind == "set":
            obj.update(values)
        elif kind == "dict":
            if not isinstance(entry[1], list) or len(entry[1]) != len(values):
                raise DecodeError("its keys and values differ in number")
            obj.update(zip([value(k) for k in entry[1]], values, strict=True))
        elif kind == "objects":
            flat = obj.reshape(-1)
            for i, item in enumerate(values):
                flat[i] = item
        else:
            cls, setters = self._class(entry[1], kind)
            if len(values) != (len(cls._fields) if kind == "namedtuple" else len(setters)):  # type: ignore[attr-defined]
                raise DecodeError(f"{len(values)} values for the attributes of {cls.__qualname__}")
            if kind == "namedtuple":
                return tuple.__new__(cls, values)  # type: ignore[type-var]
            for setter, item in zip(setters, values, strict=True):
                setter(obj, item)
        return None


def _set_in_dict(name: str, obj: object, value: object) -> None:
    object.__getattribute__(obj, "__dict__")[name] = value
