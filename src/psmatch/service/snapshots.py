"""Index snapshots: a worker's matcher and notification heads saved in a file, so that a
worker that starts (or falls behind the change log) loads it and replays the change log
from the snapshot's version instead of parsing every subscription again.

Owns the snapshot file: its name, header, claims and checks; the payload is
:mod:`psmatch.service.snapshot_codec`'s. One file per (Redis key prefix, matcher kind,
shard of shard count, see :mod:`psmatch.service.shards`), in a directory every executor
reaches (see ``snapshot_dir`` in :mod:`psmatch.service.job`)::

    <dir>/<sha256(prefix)[:16]>-<matcher>-<shard>of<shards>.snapshot

    {"format": "psmatch-index-snapshot", "format_version": 9,
     "code": {<module>: <sha256 of its source>, ..., "psmatch/core/**/*.[ch]": <sha256>},
     "prefix_sha256": <sha256 of the Redis key prefix>, "matcher": ..., "shard": i,
     "shards": n, "version": <state version>, "last_change": <sha256 of the change at
     that version>, "description_bytes": d, "payload_bytes": n,
     "payload_sha256": ..., "header_sha256": <of the other fields>}<spaces up to 16383
     bytes>\n
    <payload: the codec's JSON description of the graph (matcher, heads) (d bytes), then
     its numpy buffers, each at a file offset aligned to 64 bytes>

``code`` names exactly the code the payload's layout depends on
(:func:`psmatch.service.snapshot_codec.code_digests`): the modules of the classes stored
and of their psmatch bases, and the core's C sources. A snapshot whose ``code`` differs
from the running code's is refused (the worker rebuilds); a change to any other module
leaves it valid. The format version counts changes of this file's layout and of the
codec's.

The payload is streamed to the file (the header line is reserved first and filled in
once the payload's size and checksum are known) from the index's own arrays, and read
back straight into new arrays, checksummed on the way: neither writing nor loading holds
a second copy of the index in memory, so a worker's peak stays near its index's size.

A snapshot is written to a temporary file in the same directory and renamed over the
previous one (atomic on POSIX), so readers never see half a file. A writer first claims
the snapshot with ``<file>.writing``, created exclusively: workers of one shard that
decide to write at the same time (they catch up together) write it once, and a claim
left by a writer that died is taken over once it is :data:`CLAIM_STALE_SECONDS` old.

:func:`load_snapshot` trusts nothing: a missing, truncated or corrupt file, another
format version, a snapshot of other code, another prefix, matcher kind, shard or shard
count, a payload whose size or SHA-256 differs from the header, or one the codec refuses
is a :class:`SnapshotError` (the caller ignores it and reloads from Redis); a stale
snapshot (newer than the state, or older than the change log reaches) is the caller's to
detect from its ``version``.

Threat model: whoever can write the snapshot directory cannot run code in a worker
through it. Loading executes no pickle, marshal or eval: the codec instantiates only
classes of psmatch modules the worker has imported, sets their attributes, and checks
every size against the file's before allocating, whatever the bytes. The checksum is not
a signature, though: such a writer can forge a consistent file, and so make a worker
load a wrong index: wrong matches, or arrays that break invariants the compiled loops
trust without checking them, which can crash the worker. Keep the directory writable by
the service's user alone to be sure of the index; the checksums (the payload's, and the
header's own over its fields) protect against corruption and truncation, the header's
fields against another state's, shard's or code's snapshot.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from psmatch import Matcher, make_matcher
from psmatch.adapters.state import Change
from psmatch.errors import PsmatchError
from psmatch.service.records.notifications import NotificationHeads
from psmatch.service.shards import WHOLE, Shard
from psmatch.service.snapshot_codec import (
    DecodeError,
    StaleCodeError,
    check_code,
    code_digests,
    encode,
)
from psmatch.service.snapshot_decoder import Decoder

FORMAT = "psmatch-index-snapshot"
FORMAT_VERSION = 9
MAX_HEADER_BYTES = 16384
"""The header line's length, newline included (padded with spaces): a multiple of the
codec's alignment, so that the payload's buffers are aligned in the file too."""
CLAIM_STALE_SECONDS = 600.0
"""Age after which a writer's claim on a snapshot is taken to be a dead writer's: a
snapshot of 1M PSTHash subscriptions takes a few seconds to write."""


class SnapshotError(PsmatchError):
    """A snapshot that cannot be used (missing, corrupt, foreign); the worker reloads."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A loaded snapshot: the matcher and notification heads at state ``version``."""

    version: int
    matcher: Matcher
    heads: NotificationHeads
    last_change: str | None  # change_digest of the state's change at ``version``


def snapshot_path(
    directory: str | Path, prefix: str, matcher: str, shard: Shard = WHOLE
) -> Path:
    """The file of the snapshot of ``matcher`` holding ``shard`` of the state under
    ``prefix``."""
    digest = _digest(prefix)[:16]
    return Path(directory) / f"{digest}-{matcher}-{shard.number}of{shard.count}.snapshot"


def change_digest(change: Change) -> str:
    """What identifies the state a snapshot was taken of: the SHA-256 of its last change
    (version, op, id, record). Versions alone do not: a state rebuilt after Redis lost
    its data counts its versions again from where it restarted."""
    text = json.dumps([change.version, change.op, change.sub_id, change.record])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def save_snapshot(
    directory: str | Path,
    prefix: str,
    version: int,
    matcher: Matcher,
    heads: NotificationHeads,
    last_change: str | None,
    shard: Shard = WHOLE,
) -> Path | None:
    """Write the snapshot of ``matcher`` (of kind ``matcher.name``, holding ``shard``)
    and ``heads`` at state ``version`` (``last_change``: :func:`change_digest` of the
    change at ``version``, ``None`` at version 0), atomically replacing any previous one
    of that shard; returns its path, or ``None`` when another writer holds the claim on
    it (it is writing one: see the module docstring).

    Cost: one walk of the matcher's objects (a few thousand for a PS-Tree family,
    whatever its size; one per subscription's parts for ``scan`` and the baselines), then
    its arrays written as they are and checksummed on the way; the file is about
    ``matcher.stats().estimated_bytes`` plus the ids and heads (``bench/bench_snapshots.py``
    measures it). :class:`psmatch.service.snapshot_codec.EncodeError` if the matcher holds
    an object the codec does not store (a bug of the index code).
    """
    path = snapshot_path(directory, prefix, matcher.name, shard)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _claim(path) as claimed:
        if not claimed:
            return None
        encoded = encode((matcher, heads))
        code = code_digests(encoded.classes)
        fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                # the header names the payload's size and checksum, known once it is
                # written: its line is reserved first, padded, and filled in at the end
                out.write(b" " * (MAX_HEADER_BYTES - 1) + b"\n")
                payload = _HashingWriter(out)
                encoded.write(payload)
                fields = {
                    "format": FORMAT, "format_version": FORMAT_VERSION, "code": code,
                    "prefix_sha256": _digest(prefix), "matcher": matcher.name,
                    "shard": shard.number, "shards": shard.count,
                    "version": version, "last_change": last_change,
                    "description_bytes": len(encoded.description),
                    "payload_bytes": payload.size,
                    "payload_sha256": payload.sha256.hexdigest(),
                }  # fmt: skip
                fields["header_sha256"] = header_digest(fields)
                header = json.dumps(fields, sort_keys=True).encode("utf-8")
                # bounded: digests, the matcher's name and a module list of the code
                assert len(header) < MAX_HEADER_BYTES, "the header outgrew its line"
                out.seek(0)
                out.write(header.ljust(MAX_HEADER_BYTES - 1))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return path


@contextlib.contextmanager
def _claim(path: Path) -> Iterator[bool]:
    """Claim the right to write the snapshot at ``path`` by creating ``<path>.writing``
    exclusively; yields whether this writer holds it (then it removes it on leaving). A
    claim :data:`CLAIM_STALE_SECONDS` old is removed and claimed again."""
    claim = path.with_name(path.name + ".writing")
    taken = _create(claim)
    if not taken:
        try:
            stale = time.time() - claim.stat().st_mtime >= CLAIM_STALE_SECONDS
            if stale:
                claim.unlink(missing_ok=True)
        except FileNotFoundError:  # its writer just finished: claim it again
            stale = True
        taken = stale and _create(claim)
    try:
        yield taken
    finally:
        if taken:
            claim.unlink(missing_ok=True)


def _create(path: Path) -> bool:
    """Create the empty file ``path``; False if it exists already."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    return True


def snapshot_state(
    directory: str | Path, prefix: str, matcher: str, shard: Shard = WHOLE
) -> tuple[int, str | None] | None:
    """The state version and ``last_change`` named by the header of the snapshot of
    ``matcher`` holding ``shard`` for ``prefix``, or ``None`` when there is no such
    snapshot of this index code, or its header names no valid state. The payload is not
    checked (:func:`load_snapshot` does that): what a worker that keeps its index up to
    date reads to decide whether the snapshot needs refreshing. Cost: one line read."""
    path = snapshot_path(directory, prefix, matcher, shard)
    try:
        with path.open("rb") as file:
            header = _header(file.readline(MAX_HEADER_BYTES), path, prefix, matcher, shard)
        return _state(header, path)
    except (OSError, SnapshotError):
        return None


def header_digest(fields: dict[str, Any]) -> str:
    """The SHA-256 of a header's fields but ``header_sha256`` itself, in sorted JSON: a
    changed version, size or code digest is corruption, not another snapshot."""
    rest = {name: value for name, value in fields.items() if name != "header_sha256"}
    return hashlib.sha256(json.dumps(rest, sort_keys=True).encode("utf-8")).hexdigest()


def _digest(prefix: str) -> str:
    """SHA-256 of a Redis key prefix: names the prefix in file names and headers, whose
    length it bounds (a prefix may be long)."""
    return hashlib.sha256(prefix.encode("utf-8")).hexdigest()


class _HashingWriter:
    """A binary file's writer that also counts and checksums what goes through it."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.size = 0
        self.sha256 = hashlib.sha256()

    def write(self, data: bytes | memoryview) -> int:
        self.sha256.update(data)
        self.size += memoryview(data).nbytes
        return self.out.write(data)


class _HashingReader:
    """A binary file's reader that also checksums what it reads."""

    def __init__(self, file: BinaryIO) -> None:
        self.file = file
        self.sha256 = hashlib.sha256()

    def readinto(self, buffer: Any) -> int:
        read = self.file.readinto(buffer)  # type: ignore[attr-defined]
        self.sha256.update(memoryview(buffer)[:read])
        return read


def _state(header: dict[str, Any], path: Path) -> tuple[int, str | None]:
    """The state version and ``last_change`` a snapshot's header names;
    :class:`SnapshotError` unless the version is a non-negative int and the last change a
    digest (or none, at version 0 only)."""
    version, last_change = header.get("version"), header.get("last_change")
    identified = isinstance(last_change, str) or (version == 0 and last_change is None)
    if not isinstance(version, int) or version < 0 or not identified:
        raise SnapshotError(f"{path} has no valid state version")
    return version, last_change


def _header(line: bytes, path: Path, prefix: str, matcher: str, shard: Shard) -> dict[str, Any]:
    """The header of the snapshot at ``path`` if it is one of ``matcher`` holding ``shard``
    for ``prefix``, of the code running (each module its ``code`` names as it is now);
    else :class:`SnapshotError`."""
    try:
        header = json.loads(line) if line.endswith(b"\n") else None
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise SnapshotError(f"{path} is not a psmatch index snapshot")
    if header.get("format_version") != FORMAT_VERSION:
        raise SnapshotError(f"{path} has format version {header.get('format_version')!r}, "
                            f"this service reads {FORMAT_VERSION}")  # fmt: skip
    if header.get("header_sha256") != header_digest(header):
        raise SnapshotError(f"{path} is corrupt (its header's checksum differs)")
    try:
        check_code(header.get("code"))
    except DecodeError as exc:
        raise SnapshotError(f"{path} was written by another version of the index code "
                            f"({exc})") from None
    same_prefix = header.get("prefix_sha256") == _digest(prefix)
    if not same_prefix or header.get("matcher") != matcher:
        raise SnapshotError(
            f"{path} is the snapshot of matcher {header.get('matcher')!r} for "
            f"{'this' if same_prefix else 'another'} Redis prefix, not of {matcher!r} for "
            f"{prefix!r}"
        )
    if (header.get("shard"), header.get("shards")) != (shard.number, shard.count):
        raise SnapshotError(f"{path} holds shard {header.get('shard')!r} of "
                            f"{header.get('shards')!r}, not {shard}")  # fmt: skip
    return header


def load_snapshot(
    directory: str | Path, prefix: str, matcher: str, shard: Shard = WHOLE
) -> Snapshot:
    """The snapshot of ``matcher`` holding ``shard`` for ``prefix``;
    :class:`SnapshotError` if there is none or it is not exactly what
    :func:`save_snapshot` wrote for them.

    Cost: one read of the file, its arrays straight into new numpy arrays (no copy of
    the file in memory), and one SHA-256 of it on the way; then the objects the
    description names are created.
    """
    path = snapshot_path(directory, prefix, matcher, shard)
    try:
        file = path.open("rb")
    except OSError as exc:
        raise SnapshotError(f"no snapshot at {path}: {exc.strerror}") from None
    with file:
        header = _header(file.readline(MAX_HEADER_BYTES), path, prefix, matcher, shard)
        version, last_change = _state(header, path)
        size, described = header.get("payload_bytes"), header.get("description_bytes")
        if (type(size) is not int or type(described) is not int or not 0 <= described <= size
                or file.tell() + size != os.fstat(file.fileno()).st_size):  # fmt: skip
            raise SnapshotError(f"{path} is corrupt (its size differs from its header)")
        make_matcher(matcher)  # imports the matcher's modules: the codec imports none
        reader = _HashingReader(file)
        try:
            description = bytearray(described)
            if file.readinto(description) != described:
                raise DecodeError("the file ends inside the description")
            reader.sha256.update(description)
            decoder = Decoder(bytes(description), size)
            del description
            uncovered = set(code_digests(decoder.classes)) - set(header["code"])
            if uncovered:  # what the stored classes' layout depends on, unversioned
                raise StaleCodeError(f"{', '.join(sorted(uncovered))} not versioned")
            decoder.read_buffers(reader, described)
            if reader.sha256.hexdigest() != header.get("payload_sha256"):
                raise SnapshotError(f"{path} is corrupt (its checksum differs from its "
                                    "header)")  # fmt: skip
            loaded = decoder.build()
        except StaleCodeError as exc:
            raise SnapshotError(f"{path} was written by another version of the index code "
                                f"({exc})") from None
        except DecodeError as exc:
            raise SnapshotError(f"{path} is corrupt or foreign: {exc}") from None
    held = loaded if type(loaded) is tuple and len(loaded) == 2 else (None, None)
    if not isinstance(held[0], Matcher) or held[0].name != matcher or not isinstance(
            held[1], NotificationHeads):  # fmt: skip
        raise SnapshotError(f"{path} does not hold a {matcher!r} matcher and its heads")
    return Snapshot(version, held[0], held[1], last_change)
