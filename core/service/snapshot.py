"""Service snapshots (docs/protocol.md c.7, c.12): what the agent writes and reads, and the writer/image
the user's service sees.

A service snapshot is a list of records stored by ``SnapshotStore`` as one snapshot recording:

    SnapshotMarker BEGIN (type SERVICE, log_position, leadership_term_id, index 0, time_unit, app_version)
    ClientSession ...          one per open session, ascending cluster_session_id
    SnapshotMarker END         same fields as BEGIN
    application records ...    whatever the service wrote in on_take_snapshot, opaque bytes

In Aeron the application writes onto the snapshot publication after the END marker and reads its part
back from the same image in ``onStart``; here it writes and reads a list of byte records.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from clusterlab.core.codec import ClientSession as ClientSessionRecord
from clusterlab.core.codec import ClusterTimeUnit, DecodeError, SnapshotMark, SnapshotMarker, SnapshotTypeId
from clusterlab.core.codec.registry import decode


class SnapshotWriter:
    """Collects the application's snapshot records (handed to ``ClusteredService.on_take_snapshot``)."""

    __slots__ = ("_records",)

    def __init__(self) -> None:
        self._records: list[bytes] = []

    def write(self, record: bytes) -> None:
        """Append one record; records come back in the same order in ``SnapshotImage.records``."""
        if not isinstance(record, bytes | bytearray | memoryview):
            raise TypeError(f"snapshot record must be bytes, not {type(record).__name__}")
        self._records.append(bytes(record))

    @property
    def records(self) -> list[bytes]:
        """The records written so far."""
        return list(self._records)


@dataclass(frozen=True, slots=True)
class SnapshotImage:
    """A loaded snapshot as the service sees it in ``on_start``: its application records and where
    in the log it was taken."""

    records: tuple[bytes, ...]
    log_position: int
    leadership_term_id: int
    time_unit: ClusterTimeUnit = ClusterTimeUnit.MILLIS
    app_version: int = 0


class SnapshotFormatError(ValueError):
    """A snapshot recording does not hold a well-formed service snapshot."""


@dataclass(frozen=True, slots=True)
class ServiceSnapshot:
    """A decoded service snapshot: the marker fields, the client sessions and the application part."""

    log_position: int
    leadership_term_id: int
    time_unit: ClusterTimeUnit
    app_version: int
    sessions: tuple[ClientSessionRecord, ...]
    app_records: tuple[bytes, ...]

    def image(self) -> SnapshotImage:
        """The part the user's service reads."""
        return SnapshotImage(
            self.app_records, self.log_position, self.leadership_term_id, self.time_unit, self.app_version
        )


def _marker(
    mark: SnapshotMark, log_position: int, leadership_term_id: int, time_unit: ClusterTimeUnit, app_version: int
) -> bytes:
    return SnapshotMarker(
        type_id=SnapshotTypeId.SERVICE,
        log_position=log_position,
        leadership_term_id=leadership_term_id,
        index=0,
        mark=mark,
        time_unit=time_unit,
        app_version=app_version,
    ).encode()


def encode_service_snapshot(
    log_position: int,
    leadership_term_id: int,
    time_unit: ClusterTimeUnit,
    app_version: int,
    sessions: Iterable[ClientSessionRecord],
    app_records: Iterable[bytes],
) -> list[bytes]:
    """The records of a service snapshot, in the order of the module docstring."""
    records = [_marker(SnapshotMark.BEGIN, log_position, leadership_term_id, time_unit, app_version)]
    records.extend(s.encode() for s in sorted(sessions, key=lambda s: s.cluster_session_id))
    records.append(_marker(SnapshotMark.END, log_position, leadership_term_id, time_unit, app_version))
    records.extend(app_records)
    return records


def decode_service_snapshot(records: Sequence[bytes]) -> ServiceSnapshot:
    """Parse what :func:`encode_service_snapshot` wrote; SnapshotFormatError if it is not that."""
    if not records:
        raise SnapshotFormatError("empty snapshot: no BEGIN marker")
    try:
        begin = decode(records[0])
    except DecodeError as e:
        raise SnapshotFormatError(f"record 0 is not a SnapshotMarker: {e}") from e
    if not isinstance(begin, SnapshotMarker) or begin.mark is not SnapshotMark.BEGIN:
        raise SnapshotFormatError(f"record 0 is not a BEGIN SnapshotMarker: {type(begin).__name__}")
    if begin.type_id != SnapshotTypeId.SERVICE:
        raise SnapshotFormatError(f"snapshot type {begin.type_id}, expected SERVICE ({SnapshotTypeId.SERVICE})")
    sessions: list[ClientSessionRecord] = []
    for index in range(1, len(records)):
        try:
            record = decode(records[index])
        except DecodeError as e:
            raise SnapshotFormatError(f"record {index} before the END marker is undecodable: {e}") from e
        if isinstance(record, ClientSessionRecord):
            sessions.append(record)
            continue
        if isinstance(record, SnapshotMarker) and record.mark is SnapshotMark.END:
            if (record.type_id, record.log_position, record.leadership_term_id) != (
                begin.type_id,
                begin.log_position,
                begin.leadership_term_id,
            ):
                raise SnapshotFormatError(f"END marker {record.describe()} does not match BEGIN {begin.describe()}")
            time_unit = begin.time_unit
            if time_unit is ClusterTimeUnit.NULL_VAL:
                time_unit = ClusterTimeUnit.MILLIS
            return ServiceSnapshot(
                log_position=begin.log_position,
                leadership_term_id=begin.leadership_term_id,
                time_unit=time_unit,
                app_version=begin.app_version,
                sessions=tuple(sessions),
                app_records=tuple(records[index + 1 :]),
            )
        raise SnapshotFormatError(f"unexpected {type(record).__name__} at record {index} before the END marker")
    raise SnapshotFormatError("snapshot has no END marker")
