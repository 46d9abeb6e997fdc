"""Index snapshots: a worker's matcher and notification heads saved in a file, so that a
worker that starts (or falls behind the change log) loads it and replays the change log
from the snapshot's version instead of parsing every subscription again.

Owns the snapshot file format. One file per (Redis key prefix, matcher kind, shard of
shard count, see :mod:`psmatch.service.shards`), in a directory every executor reaches (see
``snapshot_dir`` in :mod:`psmatch.service.job`)::

    <dir>/<sha256(prefix)[:16]>-<matcher>-<shard>of<shards>.snapshot

    {"format": "psmatch-index-snapshot", "format_version": 5, "index_code": <sha256 of
     the index package's source>, "prefix_sha256": <sha256 of the Redis key prefix>,
     "matcher": ..., "shard": i, "shards": n,
     "version": <state version>, "last_change": <sha256 of the change at that version>,
     "payload_bytes": n, "payload_sha256": ...}<spaces up to 4095 bytes>\\n
    <payload: pickle of (matcher, heads)>

The payload is streamed to and from the file (the header line is reserved first and
filled in once the payload's size and checksum are known), so neither writing nor
loading holds a second copy of the index in memory: a worker's peak stays near its
index's size.

A snapshot is written to a temporary file in the same directory and renamed over the
previous one (atomic on POSIX), so readers never see half a file. A writer first claims
the snapshot with ``<file>.writing``, created exclusively: workers of one shard that
decide to write at the same time (they catch up together) write it once, and a claim
left by a writer that died is taken over once it is :data:`CLAIM_STALE_SECONDS` old.

:func:`load_snapshot` trusts nothing: a missing, truncated or corrupt file, another
format version, a snapshot written by other index code (the pickle holds the matcher's
internals, whose layout changes with the code), another prefix, matcher kind, shard or
shard count, or a payload whose size or SHA-256 differs from the header is a
:class:`SnapshotError` (the caller ignores it and reloads from Redis); a stale snapshot
(newer than the state, or older than the change log reaches) is the caller's to detect
from its ``version``. The checksum detects corruption, not forgery: the payload is a
pickle, so the directory must be writable by the service's user only.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import pickle
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import psmatch
from psmatch import Matcher
from psmatch.adapters.state import Change
from psmatch.errors import PsmatchError
from psmatch.service.heads import NotificationHeads
from psmatch.service.shards import WHOLE, Shard

FORMAT = "psmatch-index-snapshot"
FORMAT_VERSION = 8
MAX_HEADER_BYTES = 4096
"""The header line's length, newline included (padded with spaces)."""
CHUNK_BYTES = 8 << 20
"""Read at a time while the payload's checksum is checked."""
CLAIM_STALE_SECONDS = 600.0
"""Age after which a writer's claim on a snapshot is taken to be a dead writer's: a
snapshot of 1M PSTHash subscriptions takes a few seconds to write."""


@functools.cache
def index_code_digest() -> str:
    """:func:`source_digest` of the ``index`` package: a snapshot is only loaded by the
    code that pickled it. Computed once per process."""
    return source_digest(Path(psmatch.__file__).parent)


def source_digest(root: Path) -> str:
    """SHA-256 of the source under ``root``: every ``.py`` and ``.c`` file, by relative
    path. The C counts as much as the Python: its loops compute what the pickled columns
    hold (the id table's hashes, for one)."""
    digest = hashlib.sha256()
    for path in sorted(path for pattern in ("*.py", "*.c") for path in root.rglob(pattern)):
        digest.update(path.relative_to(root).as_posix().encode("utf-8") + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


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

    Cost: one pickle of the matcher, streamed to the file (its numpy columns are written
    as they are) and checksummed on the way; the file is about
    ``matcher.stats().estimated_bytes`` plus the ids and heads (0.5 s of CPU for 138 MiB,
    300,000 BE-Gen PSTHash subscriptions).
    """
    path = snapshot_path(directory, prefix, matcher.name, shard)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _claim(path) as claimed:
        if not claimed:
            return None
        fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                # the header names the payload's size and checksum, known once it is
                # written: its line is reserved first, padded, and filled in at the end
                out.write(b" " * (MAX_HEADER_BYTES - 1) + b"\n")
                payload = _HashingWriter(out)
                pickle.dump((matcher, heads), payload, protocol=pickle.HIGHEST_PROTOCOL)
                header = json.dumps({
                    "format": FORMAT, "format_version": FORMAT_VERSION,
                    "index_code": index_code_digest(), "prefix_sha256": _digest(prefix),
                    "matcher": matcher.name, "shard": shard.number, "shards": shard.count,
                    "version": version, "last_change": last_change,
                    "payload_bytes": payload.size,
                    "payload_sha256": payload.sha256.hexdigest(),
                }, sort_keys=True).encode("utf-8")  # fmt: skip
                assert len(header) < MAX_HEADER_BYTES, "every header field is of bounded length"
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
    for ``prefix``, written by this index code; else :class:`SnapshotError`."""
    try:
        header = json.loads(line) if line.endswith(b"\n") else None
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise SnapshotError(f"{path} is not a psmatch index snapshot")
    if header.get("format_version") != FORMAT_VERSION:
        raise SnapshotError(f"{path} has format version {header.get('format_version')!r}, "
                            f"this service reads {FORMAT_VERSION}")  # fmt: skip
    if header.get("index_code") != index_code_digest():
        raise SnapshotError(f"{path} was written by another version of the index code")
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

    Cost: one read and one SHA-256 of the file in chunks of :data:`CHUNK_BYTES`, then
    one unpickle streamed from it (no copy of the file in memory).
    """
    path = snapshot_path(directory, prefix, matcher, shard)
    try:
        file = path.open("rb")
    except OSError as exc:
        raise SnapshotError(f"no snapshot at {path}: {exc.strerror}") from None
    with file:
        header = _header(file.readline(MAX_HEADER_BYTES), path, prefix, matcher, shard)
        start = file.tell()
        checksum, size = hashlib.sha256(), 0
        chunk = bytearray(CHUNK_BYTES)  # one buffer reused: a read never holds two chunks
        while read := file.readinto(chunk):
            checksum.update(memoryview(chunk)[:read])
            size += read
        del chunk
        if size != header.get("payload_bytes") or checksum.hexdigest() != header.get(
                "payload_sha256"):  # fmt: skip
            raise SnapshotError(f"{path} is corrupt (its size or checksum differs from its "
                                "header)")  # fmt: skip
        version, last_change = _state(header, path)
        # the open file still holds what was checked: a newer snapshot is another file,
        # renamed over this one's name
        file.seek(start)
        loaded, heads = pickle.load(file)
    if (not isinstance(loaded, Matcher) or loaded.name != matcher
            or not isinstance(heads, NotificationHeads)):
        raise SnapshotError(f"{path} does not hold a {matcher!r} matcher and its heads")
    return Snapshot(version, loaded, heads, last_change)
