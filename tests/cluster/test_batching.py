"""Batching end to end on a real cluster: several client requests per ZeroMQ message (ingress),
appended together, applied in log order, answered in batches (egress)."""

from __future__ import annotations

from pathlib import Path

import pytest
import zmq
from clusterlab.core.codec.session import encode_session_message
from clusterlab.core.consensus.context import Channel
from clusterlab.core.runtime.transport import MAX_BATCH, NO_MEMBER, batch_header, pack_batch
from clusterlab.harness.services import kv

from tests.cluster.helpers import assert_services_agree, await_caught_up, running_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]


def test_pipelined_requests_leave_in_batches_and_are_applied_in_order(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        client = c.client()
        n = MAX_BATCH + 500  # more than one batch's worth between two pumps
        before = client.conn.egress_messages
        ids = [client.submit(lambda rid, i=i: kv.put(rid, f"b{i % 7}", str(i))) for i in range(n)]
        replies = client.wait(ids, 30.0)
        assert len(replies) == n
        # Revisions follow the order of the offers: the log kept the batch's order.
        revisions = [replies[i]["revision"] for i in ids]
        assert revisions == sorted(revisions) and len(set(revisions)) == n
        assert client.get("b6")["value"] == str(max(i for i in range(n) if i % 7 == 6))
        # The replies came batched: fewer ZeroMQ messages than replies.
        assert client.conn.egress_messages - before < n
        await_caught_up(c)
        assert_services_agree(c)


def test_a_malformed_message_inside_an_ingress_batch_is_ignored_and_the_rest_applied(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        client = c.client()
        client.put("before", "1")
        leader = c.leader_id()
        assert leader is not None
        term, session = client.client.leadership_term_id, client.client.cluster_session_id
        ignored_before = c.status(leader).ignored_count
        payloads = [
            encode_session_message(term, session, 0, kv.put(9001, "x", "first")),
            b"\x08\x00\xd2\x04\x6f\x00\x0c\x00garbage",  # unknown template
            encode_session_message(term, session + 1000, 0, kv.put(9002, "x", "no such session")),
            encode_session_message(term, session, 0, kv.put(9003, "x", "second")),
        ]
        ctx = zmq.Context.instance()
        push = ctx.socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 1000)
        try:
            push.connect(c.config.member(leader).ingress)
            push.send_multipart([batch_header(Channel.INGRESS, NO_MEMBER), pack_batch(payloads)])
        finally:
            push.close()
        replies = client.wait([9001, 9003], 15.0)
        assert set(replies) == {9001, 9003}
        assert replies[9003]["value"] == "first" and replies[9003]["revision"] == replies[9001]["revision"] + 1
        assert client.get("x")["value"] == "second"
        status = c.status(leader)
        assert status is not None and status.ignored_count >= ignored_before + 2, c.status_line()
        await_caught_up(c)
        assert_services_agree(c)
