"""Members and clients prove who they are; a cluster directory has one owner.

A forger here is a process that can reach a member's sockets but holds
none of the cluster's keys (on a secured cluster it brings a CURVE key pair of its own and the
member's public key, as a network peer could), or, on an unsecured ipc cluster, a process whose
connection is not the member it claims to be. Each test checks the forger actually reached the
socket (the refusal or the drop is counted) and that the cluster kept its promises."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import zmq
from clusterlab.core.client.errors import ConnectError
from clusterlab.core.codec.consensus import AppendPosition, RequestVote
from clusterlab.core.codec.control import GateRule
from clusterlab.core.codec.message import Message
from clusterlab.core.codec.registry import REGISTRY
from clusterlab.core.codec.selfcheck import sample
from clusterlab.core.codec.transport import LogBlock, ReplayRequest
from clusterlab.core.consensus.context import SECOND, Channel, Role, Timeouts
from clusterlab.core.consensus.senders import BODY_MEMBER_MISMATCH, SENDER_FIELD
from clusterlab.core.runtime.config import ClusterConfig
from clusterlab.core.runtime.dirlock import DirectoryLockError
from clusterlab.core.runtime.node import AUTH_REFUSED, SOURCE_REJECTED
from clusterlab.core.runtime.probe import send_raw
from clusterlab.core.runtime.security import (
    ClientCredentials,
    load_key_pair,
    load_public_keys,
    member_key_name,
    node_routing_id,
)
from clusterlab.core.runtime.transport import header
from clusterlab.harness.local import LocalClient, LocalClientTimeout, LocalCluster, pid_alive, wait_until
from clusterlab.harness.services import kv

from clusterlab.cli.cluster import ClusterTool
from tests.cluster.helpers import LEADER_S, assert_services_agree, await_caught_up, running_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]

FORGED_COPIES = 20  # a forger repeats itself: one lucky message would be enough for it


def _counter(cluster: LocalCluster, member_id: int, name: str) -> int:
    """A node's security counter, from its status detail (``name=value``)."""
    status = cluster.status(member_id, timeout_s=2.0)
    assert status is not None, cluster.status_line()
    for word in status.detail.split():
        if word.startswith(f"{name}="):
            return int(word.split("=", 1)[1])
    raise AssertionError(f"no {name} in the status of member {member_id}: {status.detail!r}")


def _stranger(server_key: bytes) -> Callable[[zmq.Socket], None]:
    """CURVE options of a forger with a key pair of its own (not the cluster's) and the server's
    public key (public: a network peer can know it)."""
    public, secret = zmq.curve_keypair()

    def setup(sock: zmq.Socket) -> None:
        sock.setsockopt(zmq.CURVE_SERVERKEY, server_key)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
        sock.setsockopt(zmq.CURVE_SECRETKEY, secret)

    return setup


def _forge(
    cluster: LocalCluster, endpoint: str, frames: list[bytes], *, target: int, routing_id: bytes | None = None
) -> None:
    """Send ``frames`` FORGED_COPIES times to ``endpoint`` (member ``target``'s) as a forger: a
    stranger's CURVE key on a secured cluster, none otherwise."""
    setup = _stranger(load_public_keys(cluster.directory)[member_key_name(target)]) if cluster.config.secure else None
    send_raw(cluster.zctx, endpoint, [frames] * FORGED_COPIES, socket="dealer", routing_id=routing_id, setup=setup)


def _await_counter_above(cluster: LocalCluster, member_id: int, name: str, before: int, what: str) -> int:
    found: list[int] = []

    def grew() -> bool:
        found.append(_counter(cluster, member_id, name))
        return found[-1] > before

    cluster.await_condition(grew, 15.0, what)
    return found[-1]


def _forged_append_position_scenario(cluster: LocalCluster, *, routing_id: bytes | None) -> None:
    """The forged-ack scenario: the leader's outbound links cut, a put appended on the leader alone, a
    forged AppendPosition(term, 10**12, from a follower): the leader must not commit the put on it;
    after SIGKILL of that leader, every acknowledged write is still there."""
    client = cluster.client()
    assert client.put("before", "1")["ok"]
    await_caught_up(cluster)
    leader = cluster.leader_id()
    assert leader is not None
    followers = [i for i in range(cluster.member_count) if i != leader]
    for f in followers:
        cluster.block(leader, f)
    status = cluster.status(leader)
    assert status is not None
    term, appended = status.leadership_term_id, status.append_position
    rid = client.submit(lambda r: kv.put(r, "contested", "x"))
    # The put is in the leader's log (its followers cannot get it): now forge their acknowledgement.
    cluster.await_condition(
        lambda: (s := cluster.status(leader)) is not None and s.append_position > appended,
        10.0,
        "the put appended on the cut-off leader",
    )
    counter = AUTH_REFUSED if cluster.config.secure else SOURCE_REJECTED
    before = _counter(cluster, leader, counter)
    forged = AppendPosition(term, 10**12, followers[0], 0).encode()
    _forge(
        cluster,
        cluster.config.member(leader).consensus,
        [header(Channel.CONSENSUS, followers[0]), forged],
        target=leader,
        routing_id=routing_id,
    )
    _await_counter_above(cluster, leader, counter, before, f"leader {leader} refusing the forger ({counter})")
    leader_status = cluster.status(leader)
    assert leader_status is not None
    follower_appends = [s.append_position for f in followers if (s := cluster.status(f)) is not None]
    assert follower_appends, cluster.status_line()
    # Committed only what a majority has: not the put that only the leader holds.
    assert leader_status.commit_position <= max(follower_appends), (leader_status, follower_appends)
    client.pump(0.2)
    acked_during_cut = client.replies.get(rid, {}).get("ok") is True
    # The cut-off leader dies; the survivors elect; every acknowledged write is there.
    cluster.kill(leader)
    cluster.heal()
    cluster.await_leader(LEADER_S, exclude={leader})
    assert client.get("before")["value"] == "1"
    if acked_during_cut:
        assert client.get("contested")["value"] == "x", "an acknowledged write was lost"
    assert client.put("after", "2")["ok"]
    cluster.restart(leader)
    await_caught_up(cluster)
    assert_services_agree(cluster)


@pytest.mark.parametrize("tcp", [True, False], ids=["tcp", "secure-ipc"])
def test_forged_append_position_from_a_process_without_keys_is_refused(tmp_path: Path, tcp: bool) -> None:
    with running_cluster(tmp_path, tcp=tcp, secure=True) as c:
        assert c.config.secure
        _forged_append_position_scenario(c, routing_id=None)


def test_unsecured_ipc_forged_source_not_matching_its_connection_is_dropped(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        assert not c.config.secure
        _forged_append_position_scenario(c, routing_id=b"forger")


WRITES_DURING_CUT = 10
# Long enough that the cut-off leader still leads when the forgery arrives on a loaded machine (it steps
# down one heartbeat timeout after its followers fell silent).
PATIENT_TIMEOUTS = dataclasses.replace(
    Timeouts.fast(), leader_heartbeat_timeout_ns=5 * SECOND, startup_canvass_timeout_ns=10 * SECOND
)


def _holding_member_key(cluster: LocalCluster, member_id: int, target: int) -> Callable[[zmq.Socket], None] | None:
    """CURVE options of a process holding member ``member_id``'s own key pair (stolen), connecting to
    member ``target``; None on an unsecured cluster."""
    if not cluster.config.secure:
        return None
    pair = load_key_pair(cluster.directory, member_key_name(member_id))
    server = load_public_keys(cluster.directory)[member_key_name(target)]

    def setup(sock: zmq.Socket) -> None:
        sock.setsockopt(zmq.CURVE_SERVERKEY, server)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, pair.public)
        sock.setsockopt(zmq.CURVE_SECRETKEY, pair.secret)

    return setup


def _forged_body_member_scenario(cluster: LocalCluster) -> None:
    """A forger takes member ``stolen``'s identity while it is down (its routing id, and on a secured
    cluster its own key) and tells the leader, cut off from member ``named``, that ``named`` appended
    everything: AppendPosition(term, 1<<40, follower_member_id=named). It passes the runtime's checks
    (it is who its header says); the module drops it for the body's member. No write is acknowledged
    without a real quorum, and none acknowledged is lost at the next failover."""
    client = cluster.client()
    assert client.put("before", "1")["ok"]
    await_caught_up(cluster)
    leader = cluster.await_leader()
    named, stolen = [i for i in range(cluster.member_count) if i != leader]
    cluster.kill(stolen)
    cluster.block(leader, named)
    cluster.block(named, leader)
    status = cluster.status(leader)
    assert status is not None
    term, committed, appended = status.leadership_term_id, status.commit_position, status.append_position
    counters = (BODY_MEMBER_MISMATCH, SOURCE_REJECTED, AUTH_REFUSED)
    before = {name: _counter(cluster, leader, name) for name in counters}
    rids = [client.submit(lambda r, i=i: kv.put(r, f"cut-{i}", "x")) for i in range(WRITES_DURING_CUT)]
    cluster.await_condition(
        lambda: (s := cluster.status(leader)) is not None and s.append_position > appended,
        10.0,
        "the writes appended on the cut-off leader",
    )
    forged = AppendPosition(term, 1 << 40, named, 0).encode()
    send_raw(
        cluster.zctx,
        cluster.config.member(leader).consensus,
        [[header(Channel.CONSENSUS, stolen), forged]] * FORGED_COPIES,
        socket="dealer",
        routing_id=node_routing_id(stolen),
        setup=_holding_member_key(cluster, stolen, leader),
    )
    _await_counter_above(cluster, leader, BODY_MEMBER_MISMATCH, before[BODY_MEMBER_MISMATCH], "the body check")
    # The forgery got through the runtime (the right connection and key for its header), to the module.
    assert _counter(cluster, leader, SOURCE_REJECTED) == before[SOURCE_REJECTED]
    assert _counter(cluster, leader, AUTH_REFUSED) == before[AUTH_REFUSED]
    status = cluster.status(leader)
    assert status is not None
    assert status.role == int(Role.LEADER), f"the leader stepped down before the forgery: {cluster.status_line()}"
    assert status.commit_position == committed, "the leader committed writes only it holds"
    log = cluster.directory / "logs" / f"member-{leader}-node-{cluster.incarnation(leader)}.log"
    assert f"AppendPosition: body names member {named}, sent by member {stolen}" in log.read_text()
    client.pump(0.5)
    assert not any(rid in client.replies for rid in rids), "a write acknowledged without a quorum"
    # The cut-off leader dies, the forger is gone, the members it impersonated and cut off elect.
    cluster.kill(leader)
    cluster.heal()
    cluster.restart(stolen)
    cluster.await_leader(LEADER_S, exclude={leader})
    assert client.get("before")["value"] == "1"
    for i, rid in enumerate(rids):  # anything acknowledged since (by the new leader) is there
        if client.replies.get(rid, {}).get("ok") is True:
            assert client.get(f"cut-{i}")["value"] == "x", "an acknowledged write was lost"
    assert client.put("after", "2")["ok"]
    cluster.restart(leader)
    await_caught_up(cluster)
    assert_services_agree(cluster)


@pytest.mark.parametrize(
    "transport", [{}, {"secure": True}, {"tcp": True, "secure": True}], ids=["ipc", "secure-ipc", "tcp"]
)
def test_a_stolen_identity_cannot_acknowledge_writes_in_another_members_name(
    tmp_path: Path, transport: dict[str, bool]
) -> None:
    with running_cluster(tmp_path, timeouts=PATIENT_TIMEOUTS, **transport) as c:
        assert c.config.secure == bool(transport)
        _forged_body_member_scenario(c)


# The member channel each message travels on; the rest go on the consensus channel.
BODY_CHANNEL = {LogBlock: Channel.LOG, ReplayRequest: Channel.ARCHIVE}


def _naming(cls: type[Message], member_id: int, term: int) -> bytes:
    """A ``cls`` whose body names ``member_id`` as its sender, in a term above ``term`` (a message the
    members would act on: elect, follow, count a position)."""
    terms = {f.name: term + 3 for f in dataclasses.fields(cls) if f.name.endswith("term_id")}
    msg: Message = dataclasses.replace(sample(cls), **terms, **{SENDER_FIELD[cls]: member_id})
    return msg.encode()


def _terms(cluster: LocalCluster, members: list[int]) -> dict[int, int]:
    """The leadership term of each answering member."""
    return {i: s.leadership_term_id for i in members if (s := cluster.status(i)) is not None}


@pytest.mark.parametrize(
    "transport", [{}, {"secure": True}, {"tcp": True, "secure": True}], ids=["ipc", "secure-ipc", "tcp"]
)
def test_every_message_naming_another_member_from_a_stolen_identity_is_dropped_and_counted(
    tmp_path: Path, transport: dict[str, bool]
) -> None:
    """Member ``stolen``'s identity (down; its routing id and own key) sends every message whose body
    names a sender, naming the other live member, to each live member on the message's own channel:
    each is counted once as a body mismatch, and the cluster keeps its leader and term."""
    with running_cluster(tmp_path, **transport) as c:
        client = c.client()
        assert client.put("k", "v")["ok"]
        await_caught_up(c)
        leader = c.await_leader()
        stolen = (leader + 1) % c.member_count
        c.kill(stolen)
        live = [i for i in range(c.member_count) if i != stolen]
        terms = _terms(c, live)
        assert len(terms) == len(live), c.status_line()
        rejected = {i: _counter(c, i, SOURCE_REJECTED) for i in live}
        expected: dict[int, int] = {}
        for target in live:
            other = next(i for i in live if i != target)
            m = c.config.member(target)
            endpoints = {Channel.CONSENSUS: m.consensus, Channel.LOG: m.log, Channel.ARCHIVE: m.archive}
            batches: dict[Channel, list[list[bytes]]] = {}
            for cls in SENDER_FIELD:
                channel = BODY_CHANNEL.get(cls, Channel.CONSENSUS)
                body = _naming(cls, other, terms[target])
                batches.setdefault(channel, []).append([header(channel, stolen), body])
            before = _counter(c, target, BODY_MEMBER_MISMATCH)
            for channel, batch in batches.items():
                send_raw(
                    c.zctx,
                    endpoints[channel],
                    batch,
                    socket="dealer",
                    routing_id=node_routing_id(stolen),
                    setup=_holding_member_key(c, stolen, target),
                )
            expected[target] = before + len(SENDER_FIELD)
        for target, want in expected.items():
            c.await_condition(
                lambda t=target, w=want: _counter(c, t, BODY_MEMBER_MISMATCH) >= w,
                15.0,
                f"member {target} dropping every message naming another member",
            )
            assert _counter(c, target, BODY_MEMBER_MISMATCH) == want
            assert _counter(c, target, SOURCE_REJECTED) == rejected[target]  # the runtime let it through
        assert client.put("k2", "v2")["ok"]
        assert _terms(c, live) == terms
        assert c.leader_id() == leader
        c.restart(stolen)
        await_caught_up(c)
        assert_services_agree(c)


def test_secured_forged_vote_is_refused_and_no_election_starts(tmp_path: Path) -> None:
    with running_cluster(tmp_path, secure=True) as c:
        client = c.client()
        assert client.put("k", "v")["ok"]
        leader = c.await_leader()
        leader_status = c.status(leader)
        assert leader_status is not None
        term = leader_status.leadership_term_id
        candidate = (leader + 1) % c.member_count
        vote = RequestVote(term, 10**9, term + 5, candidate, 0).encode()
        for i in range(c.member_count):
            if i == candidate:
                continue
            before = _counter(c, i, AUTH_REFUSED)
            _forge(c, c.config.member(i).consensus, [header(Channel.CONSENSUS, candidate), vote], target=i)
            _await_counter_above(c, i, AUTH_REFUSED, before, f"member {i} refusing the forged vote")
        assert client.put("k2", "v2")["ok"]
        after = {i: c.status(i) for i in range(c.member_count)}
        assert all(s is not None and s.leadership_term_id == term for s in after.values()), c.status_line()
        assert c.leader_id() == leader


def test_secured_forged_control_gate_rule_is_refused(tmp_path: Path) -> None:
    with running_cluster(tmp_path, secure=True) as c:
        client = c.client()
        assert client.put("k", "v")["ok"]
        isolate = GateRule(1, 0, -1, 1_000_000).encode()  # drop everything to every peer
        for i in range(c.member_count):
            before = _counter(c, i, AUTH_REFUSED)
            _forge(c, c.config.member(i).control, [header(Channel.CONTROL, -1), isolate], target=i)
            _await_counter_above(c, i, AUTH_REFUSED, before, f"member {i} refusing the forged control request")
        assert client.put("k2", "v2")["ok"]
        for i in range(c.member_count):
            s = c.status(i)
            assert s is not None and s.gate_dropped_count == 0, c.status_line()
        await_caught_up(c)


def _member_sockets(c: LocalCluster, i: int) -> list[tuple[str, Channel]]:
    m = c.config.member(i)
    return [
        (m.consensus, Channel.CONSENSUS),
        (m.log, Channel.LOG),
        (m.catchup, Channel.CATCHUP),
        (m.archive, Channel.ARCHIVE),
    ]


def test_unsecured_every_message_kind_with_a_forged_source_is_dropped_on_every_member_socket(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        client = c.client()
        assert client.put("k", "v")["ok"]
        await_caught_up(c)
        terms = {i: s.leadership_term_id for i in range(3) if (s := c.status(i)) is not None}
        messages = [sample(cls).encode() for _tid, cls in sorted(REGISTRY.items())]
        expected: dict[int, int] = {}
        for i in range(c.member_count):
            peer = (i + 1) % c.member_count
            before = _counter(c, i, SOURCE_REJECTED)
            frames = [[header(ch, peer), msg] for _endpoint, ch in _member_sockets(c, i) for msg in messages]
            sent = 0
            for endpoint, channel in _member_sockets(c, i):
                batch = [[header(channel, peer), msg] for msg in messages]
                sent += send_raw(c.zctx, endpoint, batch, socket="dealer", routing_id=b"forger")
            # Its own service's link, claimed by a stranger.
            m = c.config.member(i)
            service_batch = [[header(Channel.SERVICE, i), msg] for msg in messages]
            sent += send_raw(c.zctx, m.from_service, service_batch, socket="dealer", routing_id=b"service-9")
            assert sent == len(frames) + len(messages)
            expected[i] = before + sent
        for i, want in expected.items():
            c.await_condition(
                lambda i=i, want=want: _counter(c, i, SOURCE_REJECTED) >= want,
                15.0,
                f"member {i} dropping every forged message",
            )
            assert _counter(c, i, SOURCE_REJECTED) == want
        assert client.put("k2", "v2")["ok"]
        assert client.get("k")["value"] == "v"
        after = {i: s.leadership_term_id for i in range(3) if (s := c.status(i)) is not None}
        assert after == terms
        await_caught_up(c)
        assert_services_agree(c)


def test_secured_every_socket_refuses_a_stranger_and_a_member_key_cannot_speak_for_another(tmp_path: Path) -> None:
    with running_cluster(tmp_path, secure=True) as c:
        client = c.client()
        assert client.put("k", "v")["ok"]
        leader = c.await_leader()
        messages = [sample(cls).encode() for _tid, cls in sorted(REGISTRY.items())]
        for i in range(c.member_count):
            m = c.config.member(i)
            before = _counter(c, i, AUTH_REFUSED)
            node_sockets = [*_member_sockets(c, i), (m.from_service, Channel.SERVICE), (m.control, Channel.CONTROL)]
            for endpoint, channel in node_sockets:
                _forge(c, endpoint, [header(channel, (i + 1) % 3), messages[0]], target=i)
            send_raw(
                c.zctx,
                m.ingress,
                [[header(Channel.INGRESS, -1), msg] for msg in messages],
                setup=_stranger(load_public_keys(c.directory)[member_key_name(i)]),
            )
            # Each socket refused the stranger at least once (it reconnects and is refused again).
            _await_counter_above(c, i, AUTH_REFUSED, before + len(node_sockets), f"member {i} refusing on every socket")
        # A client's response channel (egress) admits members only: a forged reply is refused.
        refused_before = c.security.refused
        client_key = load_public_keys(c.directory)["client"]
        forged_reply = json.dumps({"id": 999, "ok": True, "value": "forged"}).encode()
        send_raw(
            c.zctx,
            client.conn.response_channel,
            [[header(Channel.EGRESS, -1), forged_reply]] * FORGED_COPIES,
            setup=_stranger(client_key),
        )
        c.await_condition(lambda: c.security.refused > refused_before, 15.0, "the client refusing forged egress")
        client.pump(0.2)
        assert 999 not in client.replies
        # A member's key speaks for that member only: member 2's key claiming member 1 (down).
        victim, holder = [i for i in range(3) if i != leader][:2]
        c.kill(victim)
        before = _counter(c, leader, SOURCE_REJECTED)
        status = c.status(leader)
        assert status is not None
        forged = AppendPosition(status.leadership_term_id, 10**12, victim, 0).encode()
        send_raw(
            c.zctx,
            c.config.member(leader).consensus,
            [[header(Channel.CONSENSUS, victim), forged]] * FORGED_COPIES,
            socket="dealer",
            routing_id=node_routing_id(victim),
            setup=_holding_member_key(c, holder, leader),
        )
        _await_counter_above(c, leader, SOURCE_REJECTED, before, "the leader dropping a member speaking for another")
        log = c.directory / "logs" / f"member-{leader}-node-{c.incarnation(leader)}.log"
        assert f"authenticated as '{member_key_name(holder)}'" in log.read_text()
        assert client.put("k2", "v2")["ok"]
        c.restart(victim)
        await_caught_up(c)
        assert_services_agree(c)


def test_secured_cluster_rejects_clients_without_credentials_or_key(tmp_path: Path) -> None:
    with running_cluster(tmp_path, secure=True) as c:
        assert c.client().put("k", "v")["ok"]  # the cluster's own credentials
        creds_file = c.directory / "keys" / "client.credentials"
        assert (creds_file.stat().st_mode & 0o777) == 0o600
        assert ((c.directory / "keys").stat().st_mode & 0o777) == 0o700
        assert all((p.stat().st_mode & 0o077) == 0 for p in (c.directory / "keys").iterdir())
        own = ClientCredentials.from_file(creds_file)
        for creds in (None, ClientCredentials(own.user, "wrong"), ClientCredentials("mallory", own.password)):
            client = c.client(connect=False, credentials=creds, anonymous=creds is None)
            with pytest.raises(ConnectError, match=r"(?i)authentication"):
                client.conn.connect(10.0)
        # The right credentials without the client's CURVE key: no session at all.
        keyless = LocalClient(dataclasses.replace(c.config, secure=False), zctx=c.zctx, credentials=own)
        try:
            with pytest.raises(LocalClientTimeout):
                keyless.connect(3.0)
        finally:
            keyless.close()
        assert c.client().get("k")["value"] == "v"


def test_cli_client_credentials_option(tmp_path: Path) -> None:
    with running_cluster(tmp_path, secure=True) as c:
        creds = tmp_path / "creds"
        creds.write_text((c.directory / "keys" / "client.credentials").read_text())
        cli = [sys.executable, "-m", "clusterlab.cli", "client", "--dir", str(c.directory)]
        ok = subprocess.run([*cli, "--credentials", str(creds), "put", "a", "1"], capture_output=True, text=True)
        assert ok.returncode == 0 and json.loads(ok.stdout)["ok"], ok.stderr
        creds.write_text("client:not-the-password\n")
        bad = subprocess.run([*cli, "--credentials", str(creds), "get", "a"], capture_output=True, text=True)
        assert bad.returncode == 1 and "Traceback" not in bad.stderr
        assert "authentication" in bad.stderr.lower(), bad.stderr
        creds.write_text("no colon here\n")
        malformed = subprocess.run([*cli, "--credentials", str(creds), "get", "a"], capture_output=True, text=True)
        assert malformed.returncode == 1 and "user:password" in malformed.stderr and "Traceback" not in malformed.stderr


# ------------------------------------------------------------------------------- one owner per directory
def test_second_start_on_a_running_directory_is_refused_at_once(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        with pytest.raises(DirectoryLockError, match=f"in use by PID {os.getpid()}.*kill {os.getpid()}"):
            LocalCluster(directory=c.directory)
        cli = subprocess.run(
            [sys.executable, "-m", "clusterlab.cli", "cluster", "start", "--dir", str(c.directory)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert cli.returncode == 1, cli
        assert f"in use by PID {os.getpid()}" in cli.stderr and "Traceback" not in cli.stderr
        assert len(cli.stderr.strip().splitlines()) == 1, cli.stderr
        # A member process started by hand beside the running one is refused too.
        node = subprocess.run(
            [sys.executable, "-m", "clusterlab.core.runtime.node", "--dir", str(c.directory), "--member-id", "0"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert node.returncode == 2 and "member 0's node" in node.stderr and "in use by PID" in node.stderr
        # The first cluster is untouched: same processes, still serving.
        assert c.client().put("k", "v")["ok"]


@contextlib.contextmanager
def _cli_cluster(directory: Path, *extra: str) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "clusterlab.cli", "cluster", "start", "--dir", str(directory), *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
        with contextlib.suppress(OSError, ValueError):
            for row in json.loads((directory / "processes.json").read_text()):
                if pid_alive(row["pid"]):
                    os.kill(row["pid"], signal.SIGKILL)


def test_a_directory_left_by_a_sigkilled_owner_restarts_normally(tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    with _cli_cluster(directory) as owner:

        def leader_answers() -> bool:
            if not (directory / "cluster.json").exists():
                return False
            tool = ClusterTool(ClusterConfig.load(directory))
            try:
                return any(s is not None and s.leader_member_id >= 0 for s in tool.statuses(0.5).values())
            finally:
                tool.close()

        wait_until(leader_answers, 60.0, "the cli cluster electing a leader")

        def all_launched() -> bool:  # no launch in flight (a forked child holds the lock too)
            rows = json.loads((directory / "processes.json").read_text())
            return len(rows) == 6 and all(r["running"] for r in rows)

        wait_until(all_launched, 60.0, "the cli cluster's six processes launched")
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(30)
        # The owner is dead, so processes.json is final: every process it started.
        members = [r["pid"] for r in json.loads((directory / "processes.json").read_text())]
        assert members
        for pid in members:  # what a crash leaves: every process gone, the lock file still there
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not any(pid_alive(p) for p in members), 30.0, "the killed cluster's processes gone")
        assert (directory / "cluster.lock").exists()
    with running_cluster(tmp_path, "cluster", members=None) as c:
        assert c.client().put("after", "restart")["ok"]


def test_cli_secure_ipc_cluster_serves_its_own_client_and_tool(tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    cli = [sys.executable, "-m", "clusterlab.cli"]
    with _cli_cluster(directory, "--secure") as owner:

        def listed() -> bool:
            if not (directory / "cluster.json").exists():
                return False
            r = subprocess.run([*cli, "tool", str(directory), "list-members"], capture_output=True, text=True)
            return r.returncode == 0 and "leader: none" not in r.stdout

        wait_until(listed, 60.0, "clusterlab tool listing the secured cluster with a leader")
        assert ClusterConfig.load(directory).secure
        assert (directory.stat().st_mode & 0o777) == 0o700
        put = subprocess.run([*cli, "client", "--dir", str(directory), "put", "k", "v"], capture_output=True, text=True)
        assert put.returncode == 0 and json.loads(put.stdout)["ok"], put.stderr
        owner.send_signal(signal.SIGTERM)  # a clean stop, as Ctrl-C
        assert owner.wait(60) == 0
