"""The codec of index snapshots: an object graph of psmatch classes, numpy arrays and
Python values written as a JSON description plus raw buffers, and read back without
running anything the file names.

Owns the codec's format and rules, the encoder and the code versions; the decoder is
:mod:`psmatch.service.snapshot_decoder`, the file around the payload
:mod:`psmatch.service.snapshots`.

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

**The description** (JSON; its version is the snapshot file's format version)::

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
Buffers follow the description (from its end rounded up to :data:`ALIGN` bytes), each
at an offset from there aligned to :data:`ALIGN`, so they are read straight into numpy
arrays (or could be memory-mapped).

**What loading runs.** The decoder parses the description with :func:`json.loads`,
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
import re
import sys
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

import psmatch
from psmatch.errors import PsmatchError

ALIGN = 64
"""Each buffer's offset is a multiple of this: a cache line, and numpy's alignment."""
MAX_NESTING = 100
"""The deepest chain of tuples, frozensets and named tuples (a normal form nests 4)."""
KERNELS = "psmatch/core/**/*.[ch]"
"""The key of :func:`code_digests` naming the core's C sources."""
ARRAY_TYPECODES = frozenset("bBhHiIlLqQfd")
"""The ``array.array`` typecodes stored (fixed-size numbers: not ``u`` or ``w``)."""
DTYPE_CODE = re.compile(r"[<>|=][biufc][0-9]{1,2}\Z")
"""A fixed dtype as ``dtype.str`` names it (a record dtype is a list of these)."""
MODULE_NAME = re.compile(r"psmatch(\.[A-Za-z_][A-Za-z0-9_]*)+\Z")
SHELL_KINDS = frozenset({"list", "dict", "set", "object", "state", "objects", "buffer", "enum"})
"""Entries created before any is filled: an entry may refer to these before their place."""
NESTED_KINDS = frozenset({"tuple", "frozenset", "namedtuple"})
"""Entries built from their values, so only from entries before them."""
_INLINE = frozenset({bool, int, float, str})
_SMALL_INT = 1 << 63  # larger ints are written in hex: JSON readers differ beyond 64 bits
_FOREIGN_BASES = frozenset({object, abc.ABC, typing.Generic})


class EncodeError(PsmatchError, TypeError):
    """An object the codec does not store (a programming error of the index code)."""


class DecodeError(PsmatchError, ValueError):
    """A description or buffer that breaks the codec's rules."""


class StaleCodeError(DecodeError):
    """A snapshot of code that changed since it was written."""


# -- versions ----------------------------------------------------------------------


def module_source(module: str) -> Path:
    """The source file of the psmatch module named ``module``: the imported module's, else
    the one under the package's directory, found without importing anything;
    :class:`StaleCodeError` if there is none."""
    if not MODULE_NAME.match(module):
        raise DecodeError(f"{module!r} is not the name of a psmatch module")
    loaded = getattr(sys.modules.get(module), "__file__", None)
    if loaded is not None:
        return Path(loaded)
    base = Path(psmatch.__file__).parent.joinpath(*module.split(".")[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    raise StaleCodeError(f"module {module} no longer exists")


@functools.cache
def module_digest(module: str) -> str:
    """SHA-256 of the source of ``module`` (computed once per process)."""
    return hashlib.sha256(module_source(module).read_bytes()).hexdigest()


def sources_digest(root: Path) -> str:
    """SHA-256 of the C sources (``.c``, ``.h``) under ``root``, by relative path."""
    digest = hashlib.sha256()
    for path in sorted(p for pattern in ("*.c", "*.h") for p in root.rglob(pattern)):
        digest.update(path.relative_to(root).as_posix().encode("utf-8") + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


@functools.cache
def kernels_digest() -> str:
    """:func:`sources_digest` of ``psmatch/core`` (computed once per process)."""
    return sources_digest(Path(psmatch.__file__).parent / "core")


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
def slot_members(cls: type) -> dict[str, Any]:
    """The slot descriptors of ``cls`` by attribute name (mangled names included)."""
    return {name: member for base in reversed(cls.__mro__)
            for name, member in base.__dict__.items()
            if isinstance(member, types.MemberDescriptorType)}  # fmt: skip


# -- encoding ----------------------------------------------------------------------


def _dtype_code(dtype: np.dtype) -> str | list[list[str]] | None:
    """How a fixed dtype is named in the description; None for one the codec refuses."""
    if dtype.fields is None:
        return dtype.str if DTYPE_CODE.match(dtype.str) and not dtype.shape else None
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


_Trail = tuple[Any, Any] | None  # the path to an object, as (parent's path, step)
_Children = Iterable[tuple[Any, object]]  # (step, child) pairs


def _render(path: _Trail) -> str:
    """``root`` and the steps to an object: ``[i]`` an item, ``[key]`` a dict's value,
    ``.name`` an attribute (steps are ints, 1-tuples of the key, or the text)."""
    steps: list[str] = []
    while path is not None:
        path, step = path
        steps.append(f"[{step}]" if type(step) is int else f"[{step[0]!r}]"
                     if type(step) is tuple else step)  # fmt: skip
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
            elif id(obj) not in self.number and not self._inline(obj):
                if id(obj) in self.started:
                    if self.started[id(obj)][0] in NESTED_KINDS:
                        raise EncodeError(f"a cycle through a tuple at {_render(path)}")
                    continue
                kind, held, children = self._start(obj, path)
                self.started[id(obj)] = (kind, held)
                self.keep.append(obj)
                stack.append((True, obj, path))
                stack.extend((False, child, (path, step)) for step, child in children
                             if child is not None and type(child) not in _INLINE)  # fmt: skip
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
        return obj is None or type(obj) in _INLINE

    def _value(self, obj: object) -> object:
        if type(obj) is int and not -_SMALL_INT < obj < _SMALL_INT:  # type: ignore[operator]
            return ["int", hex(obj)]  # type: ignore[arg-type]
        if self._inline(obj):
            return obj
        return ["ref", self.number[id(obj)]]

    def _layout(self, cls: type, names: tuple[str, ...] | None) -> int:
        return self.classes.setdefault((cls, names), len(self.classes))

    def _start(self, obj: object, path: _Trail) -> tuple[str, Any, _Children]:
        """The entry kind of ``obj``, what its entry holds, and its children by step."""
        cls = type(obj)
        if cls in (list, tuple, set, frozenset):
            items = list(obj)  # type: ignore[call-overload]
            return cls.__name__, items, enumerate(items)
        if cls is dict:
            pairs = list(obj.items())  # type: ignore[attr-defined]
            return "dict", pairs, [((k,), x) for k, v in pairs for x in (k, v)]
        if cls is np.ndarray:
            return self._array(obj, path)  # type: ignore[arg-type]
        if cls in (bytes, bytearray):
            return "buffer", self._buffer(cls.__name__, None, [len(obj)], memoryview(obj)), []  # type: ignore[arg-type]
        if cls is array.array and obj.typecode in ARRAY_TYPECODES:  # type: ignore[attr-defined]
            view = memoryview(obj).cast("B")  # type: ignore[arg-type]
            return "buffer", self._buffer("array", obj.typecode, [len(obj)], view), []  # type: ignore[attr-defined]
        if not isinstance(obj, type) and cls.__module__.startswith("psmatch."):
            return self._instance(obj, path)
        raise EncodeError(f"cannot store {cls.__module__}.{cls.__qualname__} at "
                          f"{_render(path)}")  # fmt: skip

    def _array(self, obj: np.ndarray, path: _Trail) -> tuple[str, Any, _Children]:
        if obj.dtype == object:
            items = obj.reshape(-1).tolist() if obj.ndim else [obj.item()]
            return "objects", (list(obj.shape), items), enumerate(items)
        code = _dtype_code(obj.dtype)
        if code is None:
            raise EncodeError(f"cannot store an array of dtype {obj.dtype} at {_render(path)}")
        data = obj if obj.flags.c_contiguous else obj.copy(order="C")
        flat = data.reshape(-1).view(np.uint8)
        return "buffer", self._buffer("ndarray", code, list(obj.shape), flat.data), []

    def _buffer(self, kind: str, code: Any, shape: list[int], view: memoryview) -> int:
        self.buffers.append((kind, code, shape, view))
        return len(self.buffers) - 1

    def _instance(self, obj: Any, path: _Trail) -> tuple[str, Any, _Children]:
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
            for name, member in slot_members(cls).items():
                with contextlib.suppress(AttributeError):  # an unset slot stays unset
                    attrs[name] = member.__get__(obj)
            names, values = tuple(attrs), list(attrs.values())
        return kind, (self._layout(cls, names), values), [
            (f".{n}", v) for n, v in zip(names, values, strict=True)]

    def _finish(self, obj: object, path: _Trail) -> None:
        kind, held = self.started[id(obj)]
        if kind in NESTED_KINDS:
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
