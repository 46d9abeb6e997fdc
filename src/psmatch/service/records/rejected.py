"""The rejected record of the ``psmatch.rejected`` topic: what the service could not use,
and why. Pure logic, no I/O.

Key = the original key (at most its first :data:`REJECT_PREFIX_BYTES`); value = JSON
``{"code", "reason", "topic", "partition", "offset", "key", "key_encoding", "key_size",
"key_sha256", "value", "value_encoding", "value_size", "value_sha256", "truncated",
"rejected_at"}``: ``code`` one of
:data:`~psmatch.service.records.common.REJECT_CODES`, ``reason`` the
:class:`~psmatch.service.records.common.RecordError`'s message (at most
:data:`MAX_REASON_CHARS`), the original's Kafka position, and its key and value each as
text when UTF-8, else base64 (``*_encoding``), cut to :data:`REJECT_PREFIX_BYTES`
(``truncated``), with the original's size and SHA-256. Encoder :func:`rejected_value`
(key :func:`rejected_key`), decoder :func:`parse_rejected`. It always fits the Kafka
sink, whatever was rejected.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from psmatch.service.records.common import RecordError, RejectCode, now_iso

REJECT_PREFIX_BYTES = 64 * 1024
"""Most bytes of the original key, and of the original value, a rejected record embeds."""
MAX_REASON_CHARS = 1000
"""Longest reason message in a rejected record (messages may quote the record)."""


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _embed(data: bytes | None) -> tuple[str | None, str | None, int | None, str | None, bool]:
    """(text, encoding, size, sha256, truncated) of an original key or value."""
    if data is None:
        return None, None, None, None, False
    prefix = data[:REJECT_PREFIX_BYTES]
    truncated = len(prefix) < len(data)
    digest = hashlib.sha256(data).hexdigest()
    try:
        return prefix.decode("utf-8"), "utf-8", len(data), digest, truncated
    except UnicodeDecodeError as exc:
        # a valid text cut inside a character still goes as text (up to that character)
        if truncated and exc.reason == "unexpected end of data":
            text = prefix[: exc.start].decode("utf-8", errors="strict")
            return text, "utf-8", len(data), digest, truncated
        return base64.b64encode(prefix).decode(), "base64", len(data), digest, truncated


def rejected_value(
    error: RecordError,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
) -> bytes:
    """The JSON value of a rejected record.

    Fits the sink whatever the original: at most :data:`REJECT_PREFIX_BYTES` of the key
    and of the value (text when they are UTF-8, else base64; JSON escaping can grow a
    text six-fold), their sizes and sha256, and a reason cut to
    :data:`MAX_REASON_CHARS`: under 800 KB in all.
    """
    k_text, k_enc, k_size, k_sha, k_cut = _embed(key)
    v_text, v_enc, v_size, v_sha, v_cut = _embed(value)
    reason = str(error)
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[: MAX_REASON_CHARS - 1] + "\u2026"
    return _dumps(
        {
            "code": error.code, "reason": reason,
            "topic": topic, "partition": partition, "offset": offset,
            "key": k_text, "key_encoding": k_enc, "key_size": k_size, "key_sha256": k_sha,
            "value": v_text, "value_encoding": v_enc, "value_size": v_size, "value_sha256": v_sha,
            "truncated": k_cut or v_cut, "rejected_at": now_iso(),
        }
    ).encode("utf-8")  # fmt: skip


def rejected_key(key: bytes | None) -> bytes | None:
    """The Kafka key of a rejected record: the original key, cut to the embedded prefix."""
    return None if key is None else key[:REJECT_PREFIX_BYTES]


@dataclass(frozen=True, slots=True)
class RejectedRecord:
    """A decoded rejected record; ``key``/``value`` are the embedded prefixes as bytes
    (the whole original when ``truncated`` is false)."""

    code: RejectCode
    reason: str
    topic: str
    partition: int
    offset: int
    key: bytes | None
    key_size: int | None
    key_sha256: str | None
    value: bytes | None
    value_size: int | None
    value_sha256: str | None
    truncated: bool
    rejected_at: str


def _unembed(text: str | None, encoding: str | None) -> bytes | None:
    if text is None:
        return None
    return base64.b64decode(text) if encoding == "base64" else text.encode("utf-8")


def parse_rejected(value: bytes) -> RejectedRecord:
    """Decode a rejected record (:func:`rejected_value`)."""
    r = json.loads(value)
    return RejectedRecord(
        code=r["code"], reason=r["reason"], topic=r["topic"], partition=r["partition"],
        offset=r["offset"], key=_unembed(r["key"], r["key_encoding"]), key_size=r["key_size"],
        key_sha256=r["key_sha256"], value=_unembed(r["value"], r["value_encoding"]),
        value_size=r["value_size"], value_sha256=r["value_sha256"], truncated=r["truncated"],
        rejected_at=r["rejected_at"],
    )  # fmt: skip
