"""Faulty variants of the key-value service, for proving that a golden diff finds what changed and
where: each differs from the real service at one chosen log position (or everywhere)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from clusterlab.core.service.api import ClientSession
from clusterlab.harness.services.kv import KeyValueService


def _position(service: KeyValueService) -> int:
    assert service.cluster is not None
    return service.cluster.log_position  # type: ignore[attr-defined]  # the agent: end of the entry applied


def wrong_digest_once(position: int) -> Callable[[], KeyValueService]:
    """Reports a wrong state digest after the entry ending at ``position`` only (a one-off
    nondeterministic digest); the state itself is right, so the next position agrees again."""

    class WrongDigestOnce(KeyValueService):
        def state_digest(self) -> bytes:
            real = super().state_digest()
            return hashlib.blake2b(real, digest_size=16).digest() if _position(self) == position else real

    return WrongDigestOnce


def wrong_value_at(position: int) -> Callable[[], KeyValueService]:
    """Writes a wrong value for the put ending at ``position``: the state differs from there on (until
    that key is written again)."""

    class WrongValueAt(KeyValueService):
        def on_session_message(self, session: ClientSession | None, timestamp: int, payload: bytes) -> None:
            if _position(self) == position:
                command: dict[str, Any] = json.loads(payload)
                command["value"] = f"{command.get('value')}-WRONG"
                payload = json.dumps(command).encode()
            super().on_session_message(session, timestamp, payload)

    return WrongValueAt


class DigestChanged(KeyValueService):
    """The same states under a different digest function: every position differs."""

    def state_digest(self) -> bytes:
        return hashlib.blake2b(super().state_digest() + b"v2", digest_size=16).digest()
