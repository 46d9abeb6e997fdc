"""The codec of index snapshots: an object graph of psmatch classes, numpy arrays and
Python values written as a JSON description plus raw buffers, and read back without
running anything the file names. :mod:`psmatch.service.snapshots` owns the file around it.

**What is stored.** :func:`encode` walks the graph from its root, each object once
(shared references and cycles are references by number), and accepts: ``None``, ``bool``,
``int`` (any size), ``float``, ``str`` inline; ``list``, ``tuple``, ``dict``, ``set``,
``frozenset``; numpy arrays of a fixed dtype (bool, int, uint, float, complex, or records
of them: raw buffers) or of ``object`` dtype (their items, as a list); ``bytes``,
``bytearray`` and ``array.array`` (raw buffers); and instances of classes of modules
``psmatch.*``: an enum member by its value, a named tuple by its fields, any other by
its ``__dict__`` and ``__slots__`` attributes as they are, except that a class which
defines both ``__getstate__`` and ``__setstate__`` itself is stored as what its
``__getstate__`` returns (:class:`psmatch.core.columns.GrowableArray`: its live values,
not its spare capacity or memory map). Anything else, a function, bound method, lambda,
``functools.partial``, compiled regex, module, class object, ``memoryview``, ``mmap``,
numpy scalar or a class of another package, is refused by :class:`EncodeError` naming
its type and the attribute path to it: the matchers hold none, and a cache that held one
would have to say how it is rebuilt rather than have it stored. So is a class that
defines ``__del__`` or ``__reduce__`` (loading would run its code on the file's values,
or skip the rule it declares) and a cycle through a tuple.

**The description** (JSON, :data:`GRAPH_VERSION`)::

    {"classes": [[module, qualname, kind, attribute names | null], ...],
     "buffers": [[kind, dtype | typecode | null, shape, offset, nbytes], ...],
     "objects": [entry, ...], "root": value}

A *value* is ``null``, ``true``, ``false``, an int below 2**63 in magnitude, a float, a
string, ``["int", hex]`` or ``["ref", n]`` (entry ``n``). Entries are ``["list"|"tuple"|
"set"|"frozenset", [values]]``, ``["dict", [keys], [values]]``, ``["object"|"namedtuple",
class, [values]]`` (values in the order of that class entry's names), ``["enum", class,
value]``, ``["state", class, value]``, ``["buffer", n]`` and ``["objects", shape,
[values]]``. Entries come children first: a tuple, frozenset or named tuple refers only
to entries before it (or to a container or instance, created empty first, in a cycle).
Buffers follow the description, each at an offset (from the payload's start) aligned to
:data:`ALIGN` bytes, so they are read straight into numpy arrays (or memory-mapped).

**What loading runs.** :class:`Decoder` parses the description with :func:`json.loads`,
resolves each class by plain dictionary lookups in a module under ``psmatch.`` that is
already imported (it never imports one), checks that the name is a class of that module
and qualname, of the kind stored, with no ``__del__``, and only ``object``, ``abc.ABC``
or ``typing.Generic`` outside psmatch in its MRO (``tuple`` for a named tuple, the enum
machinery for an enum); checks every buffer's size against the payload's before
allocating it; then creates instances with ``object.__new__`` (``tuple.__new__`` for a
named tuple, the enum's lookup by value) and sets their attributes through their slots'
descriptors or ``__dict__``, calling only the stored class's own ``__setstate__`` for a
``"state"`` entry. Nesting is bounded (:data:`MAX_NESTING`): no recursion of the decoder,
no tuple deep enough to overflow C hashing. A file that breaks any rule is a
:class:`DecodeError`.

**Versions.** :func:`code_digests` names the code whose layout a graph depends on: the
SHA-256 of the source of each module of a stored class and of its psmatch base classes,
and of the core's C sources (``psmatch/core/**/*.c`` and ``*.h``: their loops compute
stored values, the id table's hashes for one). A snapshot is read only while those are
unchanged; editing any other module does not invalidate it.
"""

from __future__ import annotations

import abc
import array
import contextlib
import enum
import functools
import hashlib
import json
import math
import re
import sys
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import numpy as np

import psmatch
from psmatch.errors import PsmatchError

GRAPH_VERSION = 1
ALIGN = 64
"""Each buffer's offset is a multiple of this: a cache line, and numpy's alignment."""
MAX_NESTING = 100
"""The deepest chain of tuples, frozensets and named tuples (a normal form nests 4)."""
KERNELS = "psmatch/core/**/*.[ch]"
"""The key of :func:`code_digests` naming the core's C sources."""
_SMALL_INT = 1 << 63
_ARRAY_TYPECODES = frozenset("bBhHiIlLqQfd")
_DTYPE = re.compile(r"[<>|=][biufc][0-9]{1,2}\Z")
_MODULE = re.compile(r"psmatch(\.[A-Za-z_][A-Za-z0-9_]*)+\Z")
_FOREIGN_BASES = frozenset({object, abc.ABC, typing.Generic})
_SHELLS = frozenset({"list", "dict", "set", "object", "state", "objects", "buffer", "enum"})
"""Entries created before any is filled: an entry may refer to these before their place."""
_NESTED = frozenset({"tuple", "frozenset", "namedtuple"})


class EncodeError(PsmatchError, TypeError):
    """An object the codec does not store (a programming error of the index code)."""


class DecodeError(PsmatchError, ValueError):
    """A description or buffer that breaks the codec's rules."""


class StaleCodeError(DecodeError):
    """A snapshot of code that changed since it was written."""


class Reader(Protocol):
    def readinto(self, buffer: Any) -> int: ...


# -- versions ----------------------------------------------------------------------


def module_source(module: str) -> Path:
    """The source file of the psmatch module named ``module``, found from the package's
    directory without importing anything; :class:`StaleCodeError` if there is none."""
    if not _MODULE.match(module):
        raise DecodeError(f"{module!r} is not the name of a psmatch module")
    base = Path(psmatch.__file__).parent.joinpath(*module.split(".")[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    raise StaleCodeError(f"module {module} no longer exists")


@functools.cache
def module_digest(module: str) -> str:
    """SHA-256 of the source of ``module`` (computed once per process)."""
    return hashlib.sha256(module_source(module).read_bytes()).hexdigest()


@functools.cache
def kernels_digest() -> str:
    """SHA-256 of the core's C sources by relative path (computed once per process)."""
    root = Path(psmatch.__file__).parent / "core"
    digest = hashlib.sha256()
    for path in sorted(p for pattern in ("*.c", "*.h") for p in root.rglob(pattern)):
        digest.update(path.relative_to(root).as_posix().encode("utf-8") + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def code_digests(classes: list[type]) -> dict[str, str]:
    """The digests of the code the layout of instances of ``classes`` depends on: each
    module of theirs and of their psmatch bases, and the core's C sources
    (:data:`KERNELS`). Cost: one read of each module's source the first time."""
    modules = {base.__module__ for cls in classes for base in cls.__mro__
               if base.__module__.startswith("psmatch.")}  # fmt: skip
    return {**{m: module_digest(m) for m in sorted(modules)}, KERNELS: kernels_digest()}


def check_code(code: object) -> None:
    """:class:`StaleCodeError` (naming what changed) unless ``code`` is what
    :func:`code_digests` gives for the same modules now."""
    if not isinstance(code, dict) or code.get(KERNELS) is None:
        raise StaleCodeError("it names no code version")
    changed = [name for name, digest in code.items()
               if digest != (kernels_digest() if name == KERNELS else module_digest(name))]
    if changed:
        raise StaleCodeError(f"{', '.join(sorted(changed))} changed")


# -- classes -----------------------------------------------------------------------


def _own(cls: type, name: str) -> type | None:
    """The psmatch class of ``cls``'s MRO that defines ``name``, if one does."""
    for base in cls.__mro__:
        if name in base.__dict__:
            return base if base.__module__.startswith("psmatch.") else None
    return None


@functools.cache
def class_kind(cls: type) -> str:
    """How instances of ``cls`` are stored: ``"enum"``, ``"namedtuple"``, ``"state"`` or
    ``"object"``; :class:`EncodeError` (saying why) for a class the codec refuses."""
    where = f"{cls.__module__}.{cls.__qualname__}"
    if not cls.__module__.startswith("psmatch.") or "<locals>" in cls.__qualname__:
        raise EncodeError(f"{where} is not a class of a psmatch module")
    if any("__del__" in base.__dict__ for base in cls.__mro__):
        raise EncodeError(f"{where} defines __del__")
    if issubclass(cls, enum.Enum):
        return "enum"
    foreign = {base for base in cls.__mro__ if not base.__module__.startswith("psmatch.")}
    if issubclass(cls, tuple) and isinstance(cls.__dict__.get("_fields"), tuple):
        if foreign <= _FOREIGN_BASES | {tuple}:
            return "namedtuple"
    elif foreign <= _FOREIGN_BASES:
        if any(_own(cls, name) for name in ("__reduce__", "__reduce_ex__", "__getnewargs__")):
            raise EncodeError(f"{where} defines its own pickling, which the codec ignores")
        if _own(cls, "__getstate__") and _own(cls, "__setstate__"):
            return "state"
        return "object"
    raise EncodeError(f"{where} derives from {sorted(b.__qualname__ for b in foreign)}")


@functools.cache
def _slots(cls: type) -> dict[str, Any]:
    """The slot descriptors of ``cls`` by attribute name (mangled names included)."""
    return {name: member for base in reversed(cls.__mro__)
            for name, member in base.__dict__.items()
            if isinstance(member, types.MemberDescriptorType)}  # fmt: skip


def resolve(module: object, qualname: object, kind: object) -> type:
    """The class ``module.qualname`` if it is one the codec stores as ``kind``, looked up
    in the already imported ``module`` by dictionary lookups only; else
    :class:`DecodeError`."""
    name = f"{module}.{qualname}"
    if not isinstance(module, str) or not isinstance(qualname, str) or not _MODULE.match(module):
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


# -- encoding ----------------------------------------------------------------------


def _dtype_code(dtype: np.dtype) -> str | list[list[str]] | None:
    """How a fixed dtype is named in the description; None for one the codec refuses."""
    if dtype.fields is None:
        return dtype.str if _DTYPE.match(dtype.str) and not dtype.shape else None
    names = [(name, _dtype_code(dtype.fields[name][0])) for name in dtype.names or ()]
    simple = all(isinstance(code, str) for _, code in names)
    packed = simple and np.dtype([(n, c) for n, c in names]) == dtype
    return [[n, c] for n, c in names] if packed else None  # type: ignore[misc]


class Encoded:
    """A graph ready to be written: its description and buffers (the objects' own
    memory, not copies, except for a non-contiguous array). Cost O(objects) to build."""

    def __init__(self, description: bytes, buffers: list[memoryview], classes: list[type]
                 ) -> None:  # fmt: skip
        self.description = description
        self.buffers = buffers
        self.classes = classes

    def write(self, out: BinaryIO) -> None:
        """Write the description, then each buffer at its aligned offset."""
        out.write(self.description)
        out.write(b"\0" * (-len(self.description) % ALIGN))
        at = 0
        for buffer in self.buffers:
            out.write(b"\0" * (-at % ALIGN))
            at += -at % ALIGN
            out.write(buffer)
            at += buffer.nbytes


def encode(root: object) -> Encoded:
    """The graph of objects reachable from ``root``; :class:`EncodeError` (naming the
    attribute path from the root) for an object the codec does not store."""
    return _Encoder().run(root)


_Trail = tuple[Any, str] | None  # the path to an object, as (parent's path, step)


def _render(path: _Trail) -> str:
    steps: list[str] = []
    while path is not None:
        path, step = path
        steps.append(step)
    return "root" + "".join(reversed(steps))


class _Encoder:
    """The walk of :func:`encode`: depth first with an explicit stack, each object
    numbered when it is finished (children first), its entry built once every number
    is known."""

    def __init__(self) -> None:
        self.number: dict[int, int] = {}  # id -> entry number, once finished
        self.started: dict[int, tuple[str, Any]] = {}  # id -> (kind, what it holds)
        self.order: list[int] = []  # ids by entry number
        self.keep: list[object] = []  # the walked objects (and states): their ids stay theirs
        self.classes: dict[tuple[type, tuple[str, ...] | None], int] = {}
        self.buffers: list[tuple[str, Any, list[int], memoryview]] = []
        self.depth: dict[int, int] = {}

    def run(self, root: object) -> Encoded:
        stack: list[tuple[bool, object, _Trail]] = [(False, root, None)]
        while stack:
            finish, obj, path = stack.pop()
            if finish:
                self._finish(obj, path)
            elif not self._inline(obj) and id(obj) not in self.number:
                if id(obj) in self.started:
                    if self.started[id(obj)][0] in _NESTED:
                        raise EncodeError(f"a cycle through a tuple at {_render(path)}")
                    continue
                kind, held, children = self._start(obj, path)
                self.started[id(obj)] = (kind, held)
                self.keep.append(obj)
                stack.append((True, obj, path))
                stack.extend((False, child, (path, step)) for step, child in children)
        entries = [self._entry(*self.started[i]) for i in self.order]
        layouts = sorted(self.classes, key=self.classes.__getitem__)
        description = {
            "classes": [[cls.__module__, cls.__qualname__, class_kind(cls),
                         None if names is None else list(names)] for cls, names in layouts],
            "buffers": self._buffer_table(),
            "objects": entries, "root": self._value(root),
        }  # fmt: skip
        text = json.dumps(description, separators=(",", ":"), allow_nan=True).encode("ascii")
        return Encoded(text, [b for *_, b in self.buffers], sorted({c for c, _ in layouts},
                                                                   key=str))  # fmt: skip

    @staticmethod
    def _inline(obj: object) -> bool:
        return obj is None or type(obj) in (bool, int, float, str)

    def _value(self, obj: object) -> object:
        if type(obj) is int and not -_SMALL_INT < obj < _SMALL_INT:  # type: ignore[operator]
            return ["int", hex(obj)]  # type: ignore[arg-type]
        if self._inline(obj):
            return obj
        return ["ref", self.number[id(obj)]]

    def _layout(self, cls: type, names: tuple[str, ...] | None) -> int:
        return self.classes.setdefault((cls, names), len(self.classes))

    def _start(self, obj: object, path: _Trail) -> tuple[str, Any, list[tuple[str, object]]]:
        """The entry kind of ``obj``, what its entry holds, and its children by step."""
        cls = type(obj)
        if cls in (list, tuple, set, frozenset):
            items = list(obj)  # type: ignore[call-overload]
            return cls.__name__, items, [(f"[{i}]", x) for i, x in enumerate(items)]
        if cls is dict:
            pairs = list(obj.items())  # type: ignore[attr-defined]
            return "dict", pairs, [(f"[{k!r}]", x) for k, v in pairs for x in (k, v)]
        if cls is np.ndarray:
            return self._array(obj, path)  # type: ignore[arg-type]
        if cls in (bytes, bytearray):
            return "buffer", self._buffer(cls.__name__, None, [len(obj)], memoryview(obj)), []  # type: ignore[arg-type]
        if cls is array.array and obj.typecode in _ARRAY_TYPECODES:  # type: ignore[attr-defined]
            view = memoryview(obj).cast("B")  # type: ignore[arg-type]
            return "buffer", self._buffer("array", obj.typecode, [len(obj)], view), []  # type: ignore[attr-defined]
        if not isinstance(obj, type) and cls.__module__.startswith("psmatch."):
            return self._instance(obj, path)
        raise EncodeError(f"cannot store {cls.__module__}.{cls.__qualname__} at "
                          f"{_render(path)}")  # fmt: skip

    def _array(self, obj: np.ndarray, path: _Trail) -> tuple[str, Any, list[tuple[str, object]]]:
        if obj.dtype == object:
            items = obj.reshape(-1).tolist() if obj.ndim else [obj.item()]
            return "objects", (list(obj.shape), items), [(f"[{i}]", x) for i, x in
                                                        enumerate(items)]  # fmt: skip
        code = _dtype_code(obj.dtype)
        if code is None:
            raise EncodeError(f"cannot store an array of dtype {obj.dtype} at {_render(path)}")
        data = obj if obj.flags.c_contiguous else obj.copy(order="C")
        flat = data.reshape(-1).view(np.uint8)
        return "buffer", self._buffer("ndarray", code, list(obj.shape), flat.data), []

    def _buffer(self, kind: str, code: Any, shape: list[int], view: memoryview) -> int:
        self.buffers.append((kind, code, shape, view))
        return len(self.buffers) - 1

    def _instance(self, obj: Any, path: _Trail) -> tuple[str, Any, list[tuple[str, object]]]:
        cls = type(obj)
        kind = class_kind(cls)
        if kind == "enum":
            if not self._inline(obj.value):
                raise EncodeError(f"the value of {obj!r} at {_render(path)} is not a scalar")
            return "enum", (self._layout(cls, None), obj.value), []
        if kind == "state":
            state = obj.__getstate__()
            self.keep.append(state)
            return "state", (self._layout(cls, None), state), [(".__getstate__()", state)]
        if kind == "namedtuple":
            names, values = cls._fields, list(obj)
            if getattr(obj, "__dict__", None):
                raise EncodeError(f"the named tuple at {_render(path)} has attributes")
        else:
            attrs = dict(getattr(obj, "__dict__", {}))
            for name, member in _slots(cls).items():
                with contextlib.suppress(AttributeError):  # an unset slot stays unset
                    attrs[name] = member.__get__(obj)
            names, values = tuple(attrs), list(attrs.values())
        return kind, (self._layout(cls, names), values), [
            (f".{n}", v) for n, v in zip(names, values, strict=True)]

    def _finish(self, obj: object, path: _Trail) -> None:
        kind, held = self.started[id(obj)]
        if kind in _NESTED:
            values = held[1] if kind == "namedtuple" else held
            depth = 1 + max((self.depth.get(id(v), 0) for v in values), default=0)
            if depth > MAX_NESTING:
                raise EncodeError(f"tuples nested deeper than {MAX_NESTING} at {_render(path)}")
            self.depth[id(obj)] = depth
        self.number[id(obj)] = len(self.order)
        self.order.append(id(obj))

    def _entry(self, kind: str, held: Any) -> list[object]:
        value = self._value
        if kind in ("list", "tuple", "set", "frozenset"):
            return [kind, [value(x) for x in held]]
        if kind == "dict":
            return ["dict", [value(k) for k, _ in held], [value(v) for _, v in held]]
        if kind == "buffer":
            return ["buffer", held]
        if kind == "objects":
            return ["objects", held[0], [value(x) for x in held[1]]]
        if kind in ("enum", "state"):
            return [kind, held[0], value(held[1])]
        return [kind, held[0], [value(x) for x in held[1]]]

    def _buffer_table(self) -> list[list[object]]:
        """Each buffer's row: its offset from the start of the buffers (the description's
        end, aligned), each aligned."""
        table, at = [], 0
        for kind, code, shape, view in self.buffers:
            at += -at % ALIGN
            table.append([kind, code, shape, at, view.nbytes])
            at += view.nbytes
        return table


# -- decoding ----------------------------------------------------------------------


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
    if kind == "array" and isinstance(code, str) and code in _ARRAY_TYPECODES:
        return code
    if kind == "ndarray":
        if isinstance(code, str) and _DTYPE.match(code):
            return np.dtype(code)
        if isinstance(code, list) and code and all(
                isinstance(f, list) and len(f) == 2 and isinstance(f[0], str) and f[0]
                and isinstance(f[1], str) and _DTYPE.match(f[1]) for f in code) and len(
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
        slots, has_dict = _slots(cls), cls.__dictoffset__ != 0
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
        """The buffer rows, checked: each allowed, its size its shape's, aligned, in order,
        within the ``space`` the payload has after the description, which they fill."""
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
            if type(offset) is not int or type(nbytes) is not int or offset % ALIGN or not (
                    end <= offset and nbytes == math.prod(shape) * itemsize
                    and offset + nbytes <= space):  # fmt: skip
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
                    if v[1] >= index and kinds[v[1]] not in _SHELLS:
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
                if kinds[index] in _NESTED:
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
        except (TypeError, ValueError, AttributeError, KeyError, IndexError, OverflowError,
                RecursionError) as exc:  # fmt: skip
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
        if kind in _NESTED:
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
