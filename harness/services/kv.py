"""A key-value store service: put / get / cas / delete, with etcd-style revisions.

Commands and replies are UTF-8 JSON objects (compact, sorted keys), one per session message:

==========  ================================================================  ======================================
op          request                                                           reply ``ok`` / ``value``
==========  ================================================================  ======================================
put         ``{"id": 7, "op": "put", "key": "k", "value": "v"}``              true / previous value (null if absent)
            (``"prev": false``: null, as etcd without ``prev_kv``)
get         ``{"id": 7, "op": "get", "key": "k"}``                            key present / current value or null
cas         ``{"id": 7, "op": "cas", "key": "k", "expected": "a",             swapped / value after the op
            "value": "b"}`` (``expected`` null: only if the key is absent)
delete      ``{"id": 7, "op": "delete", "key": "k"}``                         key existed / previous value
==========  ================================================================  ======================================

Commands are parsed with orjson (strict RFC 8259: UTF-8, integers within 64 bits, no NaN), the
same parser on every member; what it refuses is answered as "not JSON". Every reply is
``{"id", "ok", "value", "revision"}`` (the store's revision after the op); a request
that cannot be parsed gets ``{"id": <id or null>, "ok": false, "error": "..."}`` and changes nothing,
so a client's garbage never stops the cluster. The store's revision counts successful mutations and
every key remembers the revision that last wrote it, so two different histories that happen to end
with the same key/value pairs still have different states (and digests). A command in a
service-originated message (session None) is applied without a reply.

Exactly once: a request that names its ``client`` (an int unique among the run's clients, e.g.
``{"client": 3, "id": 7, ...}``) is remembered with its reply; the same (client, id) again — a
client resending after a timeout or a leader change — gets the remembered reply and changes nothing.
The last ``REMEMBERED_PER_CLIENT`` replies of each client are kept, in the snapshot too, so a member
restored from a snapshot deduplicates exactly like one that applied the whole log.

Snapshot: a header record ``{"revision": n, "replies": [[client, id, reply], ...]}`` then records of
up to 256 ``[key, value, mod_revision]`` triples, in key order.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from json.encoder import encode_basestring_ascii
from typing import Any

import orjson
import xxhash
from clusterlab.core.codec import CloseReason
from clusterlab.core.service.api import ClientSession, Cluster, ClusteredService, Role, SnapshotImage, SnapshotWriter
from clusterlab.harness.services.digest import (
    MODULUS,
    MultisetDigest,
    counter_item_hash,
    str_item_head,
)
from clusterlab.harness.services.kvdigest import KeyDigests
from mypy_extensions import mypyc_attr

DOMAIN = b"clusterlab-kv"
SNAPSHOT_BATCH = 256
REMEMBERED_PER_CLIENT = 1024  # replies kept per client for deduplicating resends


_ENTRY_HEAD = str_item_head(DOMAIN, "entry")  # items ("entry", key, value, mod_revision): kvdigest.KeyDigests
_REVISION_CONSTANT = counter_item_hash(DOMAIN, "revision", 1)  # revision n's item hash is n times it
# Strings that JSON writes as they are (printable ASCII without quote or backslash): put() and the
# replies format those directly; anything else goes through json.dumps. Same bytes either way.
_PLAIN = re.compile(r"[ !#-\[\]-~]*\Z")


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def _json_str(value: str | None) -> str:
    return "null" if value is None else encode_basestring_ascii(value)


@lru_cache(maxsize=4096)
def _is_plain(text: str) -> bool:
    # Cached: a pipelined client reuses its keys and values (and a str caches its own hash).
    return _PLAIN.match(text) is not None


def put(request_id: int, key: str, value: str, prev: bool = True) -> bytes:
    """An encoded put command; ``prev=False`` asks for a reply without the previous value (a
    write-only client then does not get its value bytes back)."""
    if type(request_id) is int and _is_plain(key) and _is_plain(value):
        flag = "" if prev else '"prev":false,'
        return f'{{"id":{request_id},"key":"{key}","op":"put",{flag}"value":"{value}"}}'.encode("ascii")
    command: dict[str, Any] = {"id": request_id, "op": "put", "key": key, "value": value}
    if not prev:
        command["prev"] = False
    return _dumps(command)


def encode_reply(reply: dict[str, Any]) -> bytes:
    """A reply's bytes: ``_dumps(reply)``, with the usual four-field reply formatted directly."""
    if len(reply) == 4 and "error" not in reply:
        request_id, ok, value, revision = reply["id"], reply["ok"], reply["value"], reply["revision"]
        if type(request_id) is int and type(revision) is int and (value is None or type(value) is str):
            return _answer(request_id, bool(ok), value, revision)
    return _dumps(reply)


def _answer(request_id: int, ok: bool, value: str | None, revision: int) -> bytes:
    """The bytes of the usual four-field reply (``_dumps`` of it, formatted directly)."""
    return (
        f'{{"id":{request_id},"ok":{"true" if ok else "false"},"revision":{revision},"value":{_json_str(value)}}}'
    ).encode("ascii")


def _not_json(error: orjson.JSONDecodeError) -> dict[str, Any]:
    return {"id": None, "ok": False, "error": f"bad request: not JSON: {error}"}


def get(request_id: int, key: str) -> bytes:
    """An encoded get command."""
    return _dumps({"id": request_id, "op": "get", "key": key})


def cas(request_id: int, key: str, expected: str | None, value: str) -> bytes:
    """An encoded compare-and-set command (``expected`` None: set only if absent)."""
    return _dumps({"id": request_id, "op": "cas", "key": key, "expected": expected, "value": value})


def delete(request_id: int, key: str) -> bytes:
    """An encoded delete command."""
    return _dumps({"id": request_id, "op": "delete", "key": key})


def decode_reply(payload: bytes) -> dict[str, Any]:
    """A reply as a dict."""
    reply = json.loads(payload.decode("utf-8"))
    if not isinstance(reply, dict):
        raise ValueError(f"kv reply is not an object: {payload!r:.80}")
    return reply


def reply_outcome(payload: bytes) -> tuple[Any, bool]:
    """``(id, is_error)`` of a reply without decoding all of it (a pipelined client's hot path).

    Replies are compact JSON with sorted keys, so an answer starts ``{"id":<id>,`` and an error reply
    with ``{"error":``; anything else is decoded in full (ValueError if it is not a kv reply)."""
    if payload.startswith(b'{"id":'):
        end = payload.find(b",", 6)
        if end > 6 and payload[6:end].isdigit():
            return int(payload[6:end]), False
    reply = decode_reply(payload)
    return reply.get("id"), "error" in reply


class BadRequest(ValueError):
    """A command that cannot be executed; answered with an error reply."""


def _field(command: dict[str, Any], name: str, kind: type, nullable: bool = False) -> Any:
    if name not in command:
        raise BadRequest(f"missing {name!r}")
    value = command[name]
    if value is None and nullable:
        return None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise BadRequest(f"{name!r} must be {kind.__name__}")
    return value


# mypyc compiles this module (setup.py COMPILED): tests, golden variants and the planted bugs
# (planted.py) subclass the service.
@mypyc_attr(allow_interpreted_subclasses=True)
class KeyValueService(ClusteredService):
    """The key-value store; state = {key: (value, mod_revision)} and the store revision."""

    # Several services per member: acts on messages addressed to it (clusterlab.core.service.addressed).
    SHARES_LOG_BY_ADDRESS = True

    def __init__(self) -> None:
        self.cluster: Cluster | None = None
        self.entries: dict[str, tuple[str, int]] = {}
        self.revision = 0
        # The digest is the multiset sum of every item's hash (digest.py), kept incrementally and
        # lazily by a KeyDigests (kvdigest.py, compiled): a write costs no hashing until a digest is
        # asked for (per entry only when applied entries are recorded), the ("revision", n) item is
        # a counter item (a multiply: digest.counter_item_hash). The same value as a MultisetDigest
        # kept item by item.
        self._digests = KeyDigests(_ENTRY_HEAD, _REVISION_CONSTANT, xxhash.xxh3_128_intdigest)
        # client -> {request id: reply}, insertion-ordered: the oldest is evicted first.
        self.replies: dict[int, dict[int, dict[str, Any]]] = {}

    # --- state ---------------------------------------------------------------------------------------

    def _set(self, key: str, value: str) -> None:
        self.revision += 1
        self.entries[key] = (value, self.revision)
        self._digests.written(key)

    def _delete(self, key: str) -> None:
        del self.entries[key]
        self._digests.deleted(key)
        self.revision += 1

    def state_digest(self) -> bytes:
        return self._digests.digest(self.entries, self.revision)

    def recompute_digest(self) -> bytes:
        """The digest computed from scratch over the current state (tests compare it with the
        incremental one)."""
        d = MultisetDigest.of(DOMAIN, [("entry", k, v, rev) for k, (v, rev) in self.entries.items()])
        d.value = (d.value + counter_item_hash(DOMAIN, "revision", self.revision)) % MODULUS
        return d.digest()

    def execute(self, payload: bytes) -> dict[str, Any]:
        """Apply one command and return the reply (a remembered one for a resent request)."""
        try:
            command: Any = orjson.loads(payload)
        except orjson.JSONDecodeError as e:
            return _not_json(e)
        return self._execute_command(command)

    def _execute_command(self, command: Any) -> dict[str, Any]:
        """:meth:`execute` of a parsed command."""
        if type(command) is not dict:
            return self._execute(command)
        client = command.get("client")
        request_id = command.get("id")
        if client is None and command.get("op") == "put":
            reply = self._plain_put(command)
            if reply is not None:
                return reply
        if not isinstance(client, int) or not isinstance(request_id, int):
            return self._execute(command)
        remembered = self.replies.setdefault(client, {})
        if request_id in remembered:
            return remembered[request_id]
        reply = self._execute(command)
        remembered[request_id] = reply
        if len(remembered) > REMEMBERED_PER_CLIENT:
            del remembered[next(iter(remembered))]
        return reply

    def _plain_put(self, command: dict[str, Any]) -> dict[str, Any] | None:
        """The common command (a well-formed put), checked exactly as ``_execute`` checks it, without
        the general path's calls; None and nothing changed if it is not well formed (the general path
        says why)."""
        request_id, key, value = command.get("id"), command.get("key"), command.get("value")
        prev = command.get("prev", True)
        if type(request_id) is int and type(key) is str and type(value) is str and type(prev) is bool:
            previous = self.entries.get(key) if prev else None
            self._set(key, value)
            return self._reply(request_id, True, None if previous is None else previous[0])
        return None

    def _execute(self, command: Any) -> dict[str, Any]:
        if type(command) is dict and command.get("op") == "put":
            reply = self._plain_put(command)
            if reply is not None:
                return reply
        request_id: Any = None
        try:
            if not isinstance(command, dict):
                raise BadRequest("not a JSON object")
            request_id = command.get("id")
            if not isinstance(request_id, int) or isinstance(request_id, bool):
                request_id = None
                raise BadRequest("'id' must be int")
            op = command.get("op")
            key = _field(command, "key", str)
            if op == "put":
                value = _field(command, "value", str)
                prev = command.get("prev", True)
                if type(prev) is not bool:
                    raise BadRequest("'prev' must be true or false")
                previous = self.entries.get(key) if prev else None
                self._set(key, value)
                return self._reply(request_id, True, None if previous is None else previous[0])
            if op == "get":
                current = self.entries.get(key)
                return self._reply(request_id, current is not None, None if current is None else current[0])
            if op == "cas":
                expected = _field(command, "expected", str, nullable=True)
                value = _field(command, "value", str)
                current = self.entries.get(key)
                if (None if current is None else current[0]) != expected:
                    return self._reply(request_id, False, None if current is None else current[0])
                self._set(key, value)
                return self._reply(request_id, True, value)
            if op == "delete":
                current = self.entries.get(key)
                if current is None:
                    return self._reply(request_id, False, None)
                self._delete(key)
                return self._reply(request_id, True, current[0])
            raise BadRequest(f"unknown op {op!r}")
        except BadRequest as e:
            return {"id": request_id, "ok": False, "error": f"bad request: {e}"}

    def _reply(self, request_id: int, ok: bool, value: str | None) -> dict[str, Any]:
        return {"id": request_id, "ok": ok, "value": value, "revision": self.revision}

    # --- ClusteredService ----------------------------------------------------------------------------

    def on_start(self, cluster: Cluster, snapshot: SnapshotImage | None) -> None:
        self.cluster = cluster
        self.entries = {}
        self.revision = 0
        self.replies = {}
        if snapshot is not None and snapshot.records:
            header = json.loads(snapshot.records[0])
            self.revision = int(header["revision"])
            for client, request_id, reply in header.get("replies", []):
                self.replies.setdefault(client, {})[request_id] = reply
            for record in snapshot.records[1:]:
                for key, value, mod_revision in json.loads(record):
                    self.entries[key] = (value, mod_revision)
        self._digests.reset(self.entries)

    def on_session_open(self, session: ClientSession, timestamp: int) -> None:
        pass

    def on_session_close(self, session: ClientSession, timestamp: int, close_reason: CloseReason) -> None:
        pass

    def on_session_message(self, session: ClientSession | None, timestamp: int, payload: bytes) -> None:
        reply = self.execute(payload)
        if session is not None and self._answers():
            session.offer(encode_reply(reply))

    def _answers(self) -> bool:
        """Whether replies are sent: a follower's offer goes nowhere (Aeron mocks it), so only a
        leader encodes its replies."""
        return self.cluster is None or self.cluster.role is Role.LEADER

    def on_timer_event(self, correlation_id: int, timestamp: int) -> None:
        pass

    def on_take_snapshot(self, writer: SnapshotWriter) -> None:
        replies = [[c, rid, r] for c, remembered in sorted(self.replies.items()) for rid, r in remembered.items()]
        writer.write(_dumps({"revision": self.revision, "replies": replies}))
        keys = sorted(self.entries)
        for start in range(0, len(keys), SNAPSHOT_BATCH):
            batch = [[k, *self.entries[k]] for k in keys[start : start + SNAPSHOT_BATCH]]
            writer.write(_dumps(batch))

    def on_role_change(self, new_role: Role) -> None:
        pass

    def on_terminate(self, cluster: Cluster) -> None:
        pass
