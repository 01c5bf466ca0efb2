"""Malformed bytes on every bound socket are ignored with a logged reason; the cluster keeps serving.

Each socket gets the same battery: wrong frame counts, a short header, an unknown channel code,
another channel's header, a source that may not use the channel, an undecodable payload, a
decodable message that does not belong there, and an oversized frame."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from clusterlab.core.codec.consensus import Vote
from clusterlab.core.codec.enums import BooleanType
from clusterlab.core.consensus.context import Channel
from clusterlab.core.runtime.probe import send_raw
from clusterlab.core.runtime.transport import HEADER, MAX_MESSAGE_BYTES, header
from clusterlab.harness.local import LocalCluster

from tests.cluster.helpers import assert_services_agree, await_caught_up, node_log, running_cluster, service_log

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]

VOTE = Vote(
    candidate_term_id=99, log_leadership_term_id=0, log_position=0, candidate_member_id=1, follower_member_id=2,
    vote=BooleanType.TRUE,
).encode()  # fmt: skip


def battery(channel: Channel, src: int, foreign_src: int) -> list[list[bytes]]:
    """Messages that must all be ignored by a socket for ``channel`` whose legitimate senders use ``src``."""
    other = Channel.CONSENSUS if channel is not Channel.CONSENSUS else Channel.LOG
    return [
        [b"just one frame"],
        [header(channel, src), b"x", b"a third frame"],
        [b"\x01", os.urandom(40)],  # short header
        [HEADER.pack(250, src), VOTE],  # unknown channel code
        [header(other, src), VOTE],  # another channel's header
        [header(channel, foreign_src), VOTE],  # a source that may not send here
        [header(channel, src), b""],  # empty payload
        [header(channel, src), os.urandom(7)],  # shorter than a message header
        [header(channel, src), b"\x08\x00\xd2\x04\x6f\x00\x0c\x00" + os.urandom(8)],  # unknown template 1234
        [header(channel, src), VOTE[:20]],  # truncated message
        [header(channel, src), os.urandom(200)],
    ]


def _ignored_total(cluster: LocalCluster) -> dict[str, int]:
    """Every node's and service's ignored count, once all of them answer (a service process started
    on a loaded machine may take seconds to answer its first status request)."""

    def answered() -> dict[str, int] | None:
        out = {}
        for i in range(cluster.member_count):
            status, service = cluster.status(i), cluster.service_status(i)
            if status is None or service is None:
                return None
            out[f"node-{i}"] = status.ignored_count
            out[f"service-{i}"] = service.ignored_count
        return out

    counts: dict[str, int] = cluster.await_condition(answered, 30.0, "every node and service answers its status")
    return counts


def test_malformed_bytes_on_every_socket_are_ignored_and_the_cluster_keeps_serving(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        client = c.client()
        assert client.put("before", "junk")["ok"]
        before = _ignored_total(c)
        pids = set(c.running_pids())
        sent = 0
        for i in range(c.member_count):
            m = c.config.member(i)
            peer = (i + 1) % c.member_count
            targets = [
                (m.ingress, Channel.INGRESS, -1, "push", 7),  # any source may send ingress
                (m.consensus, Channel.CONSENSUS, peer, "dealer", i),  # a member may not send to itself
                (m.log, Channel.LOG, peer, "dealer", 77),
                (m.catchup, Channel.CATCHUP, peer, "dealer", -1),
                (m.archive, Channel.ARCHIVE, peer, "dealer", 12345),
                (m.from_service, Channel.SERVICE, i, "dealer", peer),  # only its own service
                (m.to_service, Channel.SERVICE, i, "dealer", peer),  # only its own node
                (m.control, Channel.CONTROL, -1, "dealer", -1),
                (m.service_control, Channel.CONTROL, -1, "dealer", -1),
            ]
            for endpoint, channel, src, kind, foreign in targets:
                messages = battery(channel, src, foreign)
                if kind == "dealer":
                    messages.append([header(channel, src), VOTE])  # decodable, but not a control request
                sent += send_raw(c.zctx, endpoint, messages, socket=kind)
            # A frame over the size limit: ZeroMQ drops that connection; the socket keeps serving.
            send_raw(
                c.zctx, m.consensus, [[header(Channel.CONSENSUS, peer), bytes(MAX_MESSAGE_BYTES + 1)]], socket="dealer"
            )
        assert sent > 250

        def all_seen() -> bool:
            after = _ignored_total(c)
            return all(after[k] > before[k] for k in after)

        c.await_condition(all_seen, 10.0, "every process counted ignored input")
        # Every process is still the same process, and the cluster serves.
        assert set(c.running_pids()) == pids
        assert c.leader_id() is not None
        assert client.put("after", "junk")["ok"]
        assert client.get("before")["value"] == "junk"
        await_caught_up(c)
        assert_services_agree(c)
        # Reasons are logged, in words.
        logs = "\n".join(node_log(c, i) + service_log(c, i) for i in range(c.member_count))
        for reason in (
            "expected 2 frames (header, payload), got 1",
            "header of 1 bytes, expected 3",
            "unknown channel code 250",
            "channel log on the consensus socket",
            "may not send on consensus",
            "malformed",
            "unknown template id 1234",
            "unexpected Vote",
            "on a connection announced as",  # a claimed source that is not its connection's
        ):
            assert reason in logs, reason
