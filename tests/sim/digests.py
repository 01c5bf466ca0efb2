"""Reading what the services did in a SimCluster: the ``applied`` rows, per-position state digests,
and the committed log decoded message by message.

Every service in the cluster reports one ``AppliedEntry`` per log entry it applies (and one
``Snapshot`` row when it starts from a snapshot). Agreement is the property the whole protocol exists
for: at each log position, every member and every incarnation that applied it must hold the same
entry and end up in the same state. ``assert_digests_agree_at_every_position`` checks exactly that,
position by position, not only at the end.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any, TypeVar

from clusterlab.core.codec.framing import HDR_TYPE_PAD
from clusterlab.core.codec.message import Message
from clusterlab.core.codec.registry import decode
from clusterlab.core.consensus.context import SECOND
from clusterlab.core.service.agent import AppliedEntry, EntryType
from clusterlab.harness.sim import SimCluster

M = TypeVar("M", bound=Message)


# ---------------------------------------------------------------------------------- applied rows


def rows(
    c: SimCluster,
    *,
    member_id: int | None = None,
    incarnation: int | None = None,
    entry_type: EntryType | None = None,
) -> list[AppliedEntry]:
    """The applied entries, in the order they were applied, optionally of one member / incarnation /
    entry type."""
    return [
        r["entry"]
        for r in c.applied
        if (member_id is None or r["member_id"] == member_id)
        and (incarnation is None or r["incarnation"] == incarnation)
        and (entry_type is None or r["entry"].entry_type == entry_type)
    ]


def incarnations(c: SimCluster) -> list[tuple[int, int]]:
    """Every (member, incarnation) that applied something, in first-seen order."""
    seen: dict[tuple[int, int], None] = {}
    for r in c.applied:
        seen.setdefault((r["member_id"], r["incarnation"]), None)
    return list(seen)


def assert_digests_agree_at_every_position(c: SimCluster) -> dict[int, bytes]:
    """At every log position applied anywhere, every (member, incarnation) that applied it holds the
    same entry (same entry digest; a ``Snapshot`` row has no log entry) and the same state digest.
    Returns {log position: state digest}."""
    by_position: dict[int, list[tuple[int, int, AppliedEntry]]] = defaultdict(list)
    for r in c.applied:
        by_position[r["entry"].log_position].append((r["member_id"], r["incarnation"], r["entry"]))
    states: dict[int, bytes] = {}
    for position in sorted(by_position):
        seen = by_position[position]
        state_digests = {e.state_digest for _, _, e in seen}
        assert len(state_digests) == 1, f"state digests differ at log position {position}: " + "; ".join(
            f"member {m}/{i}: {e.describe()}" for m, i, e in seen
        )
        entry_digests = {e.entry_digest for _, _, e in seen if e.entry_type != EntryType.SNAPSHOT}
        assert len(entry_digests) <= 1, f"different entries applied at log position {position}: " + "; ".join(
            f"member {m}/{i}: {e.describe()}" for m, i, e in seen
        )
        states[position] = state_digests.pop()
    return states


def assert_contiguous(c: SimCluster) -> None:
    """Each incarnation applied the log in order without gaps: an entry starts where the previous
    one (or the snapshot it started from) ended, and its first entry starts at 0 or at its snapshot."""
    for member_id, incarnation in incarnations(c):
        end = 0
        for e in rows(c, member_id=member_id, incarnation=incarnation):
            if e.entry_type == EntryType.SNAPSHOT:
                end = e.log_position
                continue
            start = e.log_position - e.length
            assert start == end, (
                f"member {member_id}/{incarnation} applied {e.describe()} starting at {start}, expected {end}"
            )
            end = e.log_position


def service_digests(c: SimCluster, members: Iterable[int] | None = None) -> dict[int, bytes]:
    """{member: its service's current state digest} for the live (or given) members."""
    return {m: c.service(m).service.state_digest() for m in (c.members_alive() if members is None else members)}


def assert_services_agree(c: SimCluster, members: Iterable[int] | None = None) -> bytes:
    """Every live (or given) member's service is at the same log position with the same state digest;
    returns the digest."""
    members = list(c.members_alive() if members is None else members)
    where = {m: (c.service(m).log_position, c.service(m).service.state_digest().hex()) for m in members}
    assert len(set(where.values())) == 1, f"services disagree (position, digest): {where}; {c.status_line()}"
    return c.service(members[0]).service.state_digest()


def await_services_at(
    c: SimCluster, position: int, members: Iterable[int] | None = None, timeout_ns: int = 5 * SECOND
) -> None:
    """Wait until the live (or given) members' services have applied the log up to ``position``."""
    members = list(c.members_alive() if members is None else members)
    c.await_condition(
        lambda: all(c.service(m).log_position >= position for m in members),
        timeout_ns,
        f"services of members {members} at log position {position}",
    )


def await_services_caught_up(c: SimCluster, timeout_ns: int = 5 * SECOND) -> int:
    """Wait until every live member's service has applied everything the leader committed; returns
    that position."""
    leader = c.await_leader(timeout_ns)

    def caught_up() -> bool:
        lead = c.leader_id()
        if lead is None:
            return False
        target = c.member(lead).commit_position
        return c.member(lead).append_position == target and all(
            c.service(m).log_position >= target for m in c.members_alive()
        )

    c.await_condition(caught_up, timeout_ns, "every live service applied the leader's whole log")
    return c.member(c.leader_id() or leader).commit_position


# ---------------------------------------------------------------------------------- the log itself


def log_messages(c: SimCluster, member_id: int, to_position: int | None = None) -> list[tuple[int, Message]]:
    """The member's log up to its commit position (or ``to_position``), decoded: (end position, message)."""
    m = c.member(member_id)
    end = m.commit_position if to_position is None else to_position
    out: list[tuple[int, Message]] = []
    for f in m.archive.read_frames(0, end):
        if f.frame_type == HDR_TYPE_PAD:
            continue
        out.append((f.end_position, decode(f.payload)))
    return out


def logged(c: SimCluster, member_id: int, cls: type[M], to_position: int | None = None) -> list[tuple[int, M]]:
    """The ``cls`` messages in the member's committed log, with their end positions."""
    return [(p, msg) for p, msg in log_messages(c, member_id, to_position) if isinstance(msg, cls)]


def logged_everywhere(c: SimCluster, cls: type[M], members: Iterable[int] | None = None) -> list[tuple[int, M]]:
    """The ``cls`` messages of the committed log, asserting every live (or given) member's committed
    log holds the same ones at the same positions (up to the shortest commit position)."""
    members = list(c.members_alive() if members is None else members)
    common = min(c.member(m).commit_position for m in members)
    per_member: dict[int, Any] = {m: logged(c, m, cls, common) for m in members}
    first = per_member[members[0]]
    for m, found in per_member.items():
        assert found == first, f"member {m} logged {found}, member {members[0]} logged {first}"
    return first
