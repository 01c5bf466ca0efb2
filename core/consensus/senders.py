"""The member a member-to-member message's body names as its sender, bound to the message's source.

The runtime proves who sent a message: the header's source member must be the connection's (its
routing id ``node-<i>``, and on a secured cluster its CURVE key's ZAP User-Id ``member-<i>``;
core/runtime/security.py). The handlers, as Aeron's, act on the member id inside the body: the
AppendPosition's follower is the one whose position the leader counts, the Vote's voter the one
whose ballot is counted. So the dispatcher (``ConsensusModule._dispatch``) accepts a message whose
body names its sender only when that id is the proven source; anything else is dropped, counted
(``ModuleState.body_member_mismatch_count``, ``body_member_mismatch=`` in a node's status detail),
logged and traced (a ``body_member_mismatch`` event). A member's stolen key then speaks for that
member, never for another.

Each message that names its sender, and the field that does (Aeron's senders, ConsensusPublisher):

| message | sender field | sent by |
|---|---|---|
| CanvassPosition | follower_member_id | every member while canvassing |
| RequestVote | candidate_member_id | the candidate |
| Vote | follower_member_id | the voter |
| NewLeadershipTerm | leader_member_id | the (new) leader |
| AppendPosition | follower_member_id | the follower |
| CommitPosition | leader_member_id | the leader |
| CatchupPosition | follower_member_id | the catching-up follower |
| TerminationAck | member_id | the follower that reached the termination position |
| LogBlock | leader_member_id | the leader (log and catch-up channels) |
| LogEndOfStream | leader_member_id | the leader |
| ReplayRequest | requester_member_id | the replicating member |

Fields that name another member are not the sender's and are not bound here (:data:`ADDRESSEE_FIELD`):
a Vote's ``candidate_member_id`` and a StopCatchup's ``follower_member_id`` name the member the message
is for, and their handlers drop one that is not for this member (Election.on_vote,
Catchup.on_stop_catchup). TerminationPosition, StopCatchup, ReplayBlock and ArchiveError name no sender.
No message is relayed: every one of them travels from the member that wrote it to the member it names
or serves, so an honest member never sends a mismatch (the check changes no correct run).
"""

from __future__ import annotations

from typing import Final

from clusterlab.core.codec.consensus import (
    AppendPosition,
    CanvassPosition,
    CatchupPosition,
    CommitPosition,
    NewLeadershipTerm,
    RequestVote,
    StopCatchup,
    TerminationAck,
    Vote,
)
from clusterlab.core.codec.message import Message
from clusterlab.core.codec.transport import LogBlock, LogEndOfStream, ReplayRequest

# Event kind and status-detail counter name of a dropped mismatch.
BODY_MEMBER_MISMATCH: Final = "body_member_mismatch"

SENDER_FIELD: Final[dict[type[Message], str]] = {
    CanvassPosition: "follower_member_id",
    RequestVote: "candidate_member_id",
    Vote: "follower_member_id",
    NewLeadershipTerm: "leader_member_id",
    AppendPosition: "follower_member_id",
    CommitPosition: "leader_member_id",
    CatchupPosition: "follower_member_id",
    TerminationAck: "member_id",
    LogBlock: "leader_member_id",
    LogEndOfStream: "leader_member_id",
    ReplayRequest: "requester_member_id",
}

ADDRESSEE_FIELD: Final[dict[type[Message], str]] = {
    Vote: "candidate_member_id",
    StopCatchup: "follower_member_id",
}


def body_sender(msg: Message) -> int | None:
    """The member ``msg``'s body names as its sender, or None if its body names none."""
    field = SENDER_FIELD.get(type(msg))
    if field is None:
        return None
    sender: int = getattr(msg, field)
    return sender
