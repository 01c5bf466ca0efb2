"""What Aeron's system tests get from ``TestCluster`` / ``TestNode``, on our SimCluster.

Aeron's cluster tests run a ``TestNode.TestService`` on every member: it counts the messages it
applied, echoes each one back to its session, remembers whether it took or loaded a snapshot and
every role change it was told of. :class:`AeronTestService` is that service (registered as
``aeron-test`` by tests/aeron/conftest.py). :class:`AeronCluster` is the part of ``TestCluster``
the ports use (``awaitLeader``,
``connectClient``, ``sendMessages``, ``awaitResponseMessageCount``, ``awaitServicesMessageCount``,
``takeSnapshot``, ``awaitSnapshotCount``, ``stopNode``, ``startStaticNode`` ...), with Aeron's
names in Python spelling; every wait is bounded in simulated time.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from clusterlab.core.codec import CloseReason
from clusterlab.core.consensus.context import SECOND, SERVICE_ID_CONSENSUS_MODULE, Role
from clusterlab.core.consensus.recording_log import EntryType, RecordingLog
from clusterlab.core.service.api import (
    ClientSession,
    Cluster,
    ClusteredService,
    ClusterTerminationException,
    SnapshotImage,
    SnapshotWriter,
)
from clusterlab.harness.services.digest import MultisetDigest
from clusterlab.harness.sim import SimCluster
from clusterlab.harness.sim_parts import SimClient

SERVICE_NAME = "aeron-test"
REGISTER_TIMER_MSG = b"register-timer"  # Aeron TestNode.REGISTER_TIMER_MSG
TERMINATE_MSG = b"Please terminate the clustered service"  # Aeron ClusterTests.TERMINATE_MSG
TIMER_CORRELATION_ID = 1
DOMAIN = b"aeron-test"


class AeronTestService(ClusteredService):
    """Aeron ``TestNode.TestService``: echo, count, remember snapshots and role changes.

    ``fail_snapshots`` (class attribute, set by a test) makes ``on_take_snapshot`` raise, the way
    Aeron's tests plant a failing snapshot."""

    fail_snapshots = False

    def __init__(self) -> None:
        self.cluster: Cluster | None = None
        self.message_count = 0
        self.was_snapshot_taken = False
        self.was_snapshot_loaded = False
        self.role_changes: list[Role] = []
        self.timer_count = 0
        self._digest = MultisetDigest(DOMAIN)

    def on_start(self, cluster: Cluster, snapshot: SnapshotImage | None) -> None:
        self.cluster = cluster
        if snapshot is not None and snapshot.records:
            self.message_count = int(json.loads(snapshot.records[0])["message_count"])
            self.was_snapshot_loaded = True
        self._digest = MultisetDigest(DOMAIN)
        self._digest.add("count", self.message_count)

    def on_session_open(self, session: ClientSession, timestamp: int) -> None:
        pass

    def on_session_close(self, session: ClientSession, timestamp: int, close_reason: CloseReason) -> None:
        pass

    def on_session_message(self, session: ClientSession | None, timestamp: int, payload: bytes) -> None:
        if payload == TERMINATE_MSG:
            raise ClusterTerminationException()  # Aeron TestService: throw new ClusterTerminationException(false)
        self._digest.replace(("count", self.message_count), ("count", self.message_count + 1))
        self.message_count += 1
        if payload == REGISTER_TIMER_MSG and self.cluster is not None:
            # Aeron TestService: the same correlation id every time, due at once.
            self.cluster.schedule_timer(TIMER_CORRELATION_ID, timestamp)
        if session is not None:
            session.offer(payload)

    def on_timer_event(self, correlation_id: int, timestamp: int) -> None:
        self.timer_count += 1

    def on_take_snapshot(self, writer: SnapshotWriter) -> None:
        if AeronTestService.fail_snapshots:
            raise RuntimeError("planted snapshot failure")
        writer.write(json.dumps({"message_count": self.message_count}).encode())
        self.was_snapshot_taken = True

    def on_role_change(self, new_role: Role) -> None:
        self.role_changes.append(new_role)

    def on_terminate(self, cluster: Cluster) -> None:
        pass

    def state_digest(self) -> bytes:
        return self._digest.digest()


def consensus_module_snapshots(c: SimCluster, member_id: int, valid_only: bool = True) -> list[Any]:
    """The member's consensus-module SNAPSHOT entries (read from its recording log in its storage)."""
    with RecordingLog.open(c.storage(member_id)) as recording_log:
        return [
            e
            for e in recording_log.entries()
            if e.type == EntryType.SNAPSHOT
            and e.service_id == SERVICE_ID_CONSENSUS_MODULE
            and (e.is_valid or not valid_only)
        ]


def service_snapshots(c: SimCluster, member_id: int, valid_only: bool = True) -> list[Any]:
    """The member's service (id 0) SNAPSHOT entries."""
    with RecordingLog.open(c.storage(member_id)) as recording_log:
        return [
            e
            for e in recording_log.entries()
            if e.type == EntryType.SNAPSHOT and e.service_id == 0 and (e.is_valid or not valid_only)
        ]


class AeronCluster:
    """Aeron ``TestCluster`` on a SimCluster running :class:`AeronTestService` on every member."""

    def __init__(self, c: SimCluster) -> None:
        self.c = c
        self.client: SimClient | None = None
        self.sent = 0
        self._next_message = 0

    # --- nodes
    def await_leader(self, timeout_ns: int = 10 * SECOND) -> int:
        return self.c.await_leader(timeout_ns)

    def followers(self) -> list[int]:
        leader = self.c.leader_id()
        return [m for m in self.c.members_alive() if m != leader]

    def service(self, member_id: int) -> AeronTestService:
        service = self.c.service(member_id).service
        assert isinstance(service, AeronTestService)
        return service

    def stop_node(self, member_id: int) -> None:
        self.c.stop(member_id)

    def kill_node(self, member_id: int) -> None:
        self.c.kill(member_id)

    def start_static_node(self, member_id: int, clean_start: bool = False) -> None:
        if clean_start:
            self.c.restart_wiped(member_id)
        else:
            self.c.restart(member_id)

    def stop_all_nodes(self) -> None:
        for m in self.c.members_alive():
            self.c.stop(m)

    def await_condition(self, predicate: Callable[[], bool], what: str, timeout_ns: int = 10 * SECOND) -> None:
        self.c.await_condition(predicate, timeout_ns, what)

    # --- client
    def connect_client(self) -> SimClient:
        self.client = self.c.connect_client()
        return self.client

    def reconnect_client(self) -> SimClient:
        if self.client is not None and self.client.client.is_connected:
            self.client.client.close(self.c.now_ns)
        self.client = None
        return self.connect_client()

    def send_messages(self, count: int) -> None:
        """Offer ``count`` messages (retried while the leader back-pressures)."""
        assert self.client is not None, "connect_client first"
        for _ in range(count):
            payload = f"msg-{self._next_message}".encode()
            self._next_message += 1
            self.c.await_condition(
                lambda p=payload: self.client is not None and self.client.client.offer(p, self.c.now_ns) > 0,  # type: ignore[union-attr]
                5 * SECOND,
                "message offered",
            )
            self.sent += 1

    def response_count(self) -> int:
        """Echoes received by every client so far (Aeron's TestCluster counts across reconnects)."""
        return sum(1 for client in self.c.clients for m in client.received if m.payload.startswith(b"msg-"))

    def await_response_message_count(self, count: int, timeout_ns: int = 10 * SECOND) -> None:
        self.await_condition(lambda: self.response_count() >= count, f"{count} responses", timeout_ns)

    def await_services_message_count(self, count: int, timeout_ns: int = 10 * SECOND) -> None:
        self.await_condition(
            lambda: all(self.service(m).message_count >= count for m in self.c.members_alive()),
            f"every live service applied {count} messages",
            timeout_ns,
        )

    def await_service_message_count(self, member_id: int, count: int, timeout_ns: int = 10 * SECOND) -> None:
        self.await_condition(
            lambda: self.c.is_alive(member_id) and self.service(member_id).message_count >= count,
            f"service {member_id} applied {count} messages",
            timeout_ns,
        )

    def send_and_await_messages(self, count: int, total: int | None = None) -> None:
        self.send_messages(count)
        self.await_response_message_count(total if total is not None else self.sent)
        self.await_services_message_count(total if total is not None else self.sent)

    def election_count(self, member_id: int) -> int:
        """Aeron's election counter: elections this incarnation entered."""
        return int(self.c.member(member_id).election_count)  # type: ignore[attr-defined]

    def leadership_term_id(self, member_id: int) -> int:
        return self.c.member(member_id).leadership_term_id

    def role(self, member_id: int) -> Role:
        return self.c.member(member_id).role

    def await_election_closed(self, member_id: int, timeout_ns: int = 10 * SECOND) -> None:
        self.await_condition(
            lambda: self.c.is_alive(member_id) and self.c.member(member_id).election_state is None,
            f"member {member_id}'s election closed",
            timeout_ns,
        )

    def await_leader_other_than(self, member_id: int, timeout_ns: int = 10 * SECOND) -> int:
        self.await_condition(
            lambda: self.c.leader_id() not in (None, member_id), f"a leader other than {member_id}", timeout_ns
        )
        leader = self.c.leader_id()
        assert leader is not None
        return leader

    def await_new_leadership_event(self, count: int, timeout_ns: int = 10 * SECOND) -> None:
        """The client saw ``count`` NewLeaderEvents (Aeron awaitNewLeadershipEvent)."""
        self.await_condition(
            lambda: self.client is not None and self.client.client.leader_changes >= count,
            f"{count} NewLeaderEvents at the client",
            timeout_ns,
        )

    def await_snapshots_loaded(self, timeout_ns: int = 10 * SECOND) -> None:
        self.await_condition(
            lambda: all(self.service(m).was_snapshot_loaded for m in self.c.members_alive()),
            "every live service loaded a snapshot",
            timeout_ns,
        )

    def await_commit_position(self, member_id: int, position: int, timeout_ns: int = 10 * SECOND) -> None:
        self.await_condition(
            lambda: self.c.is_alive(member_id) and self.c.member(member_id).commit_position >= position,
            f"member {member_id} committed {position}",
            timeout_ns,
        )

    def is_terminated(self, member_id: int) -> bool:
        return bool(self.c.member(member_id).terminated)  # type: ignore[attr-defined]

    def await_node_terminations(self, members: list[int] | None = None, timeout_ns: int = 10 * SECOND) -> None:
        targets = self.c.members_alive() if members is None else members
        self.await_condition(
            lambda: all(self.is_terminated(m) for m in targets), f"members {targets} terminated", timeout_ns
        )

    def shutdown_cluster(self) -> None:
        """ClusterControl SHUTDOWN through the leader: snapshot, then every member terminates."""
        self.await_condition(lambda: self.c.control("shutdown"), "the control toggle accepted SHUTDOWN")

    def abort_cluster(self) -> None:
        """ClusterControl ABORT through the leader: every member terminates without a snapshot."""
        self.await_condition(lambda: self.c.control("abort"), "the control toggle accepted ABORT")

    def restart_all_nodes(self, clean_start: bool = False) -> None:
        for m in range(self.c.member_count):
            self.start_static_node(m, clean_start)

    # --- control
    def take_snapshot(self) -> None:
        self.await_condition(lambda: self.c.control("snapshot"), "the control toggle accepted SNAPSHOT")

    def snapshot_count(self, member_id: int) -> int:
        return int(self.c.member(member_id).snapshot_count)  # type: ignore[attr-defined]

    def await_snapshot_count_everywhere(self, count: int, timeout_ns: int = 10 * SECOND) -> None:
        """Aeron TestCluster.awaitSnapshotCount(count): every live member."""
        for m in self.c.members_alive():
            self.await_snapshot_count(m, count, timeout_ns)

    def await_snapshot_count(self, member_id: int, count: int, timeout_ns: int = 10 * SECOND) -> None:
        self.await_condition(
            lambda: self.c.is_alive(member_id) and self.snapshot_count(member_id) >= count,
            f"member {member_id} took {count} snapshots",
            timeout_ns,
        )

    # --- the control toggle of one node (Aeron TestCluster.suspendCluster(node), resumeCluster(node),
    # takeSnapshot(node)), and findLeader(skipIndex)
    def toggle_node(self, member_id: int, target: str) -> None:
        """Set the control toggle of ``member_id`` (not of whoever leads now) to ``target``
        (``suspend``, ``resume``, ``snapshot`` ...) and assert it took, as Aeron's
        ``assertTrue(ClusterControl.ToggleState.X.toggle(getClusterControlToggle(node)))``."""
        from clusterlab.core.codec.enums import ToggleState

        accepted = bool(self.c.member(member_id).toggle_control(ToggleState[target.upper()]))  # type: ignore[attr-defined]
        self.c.event("control", member_id, action=target, accepted=accepted)
        assert accepted, f"member {member_id} refused the {target} toggle: {self.c.status_line()}"

    def suspend_cluster(self, member_id: int) -> None:
        self.toggle_node(member_id, "suspend")

    def resume_cluster(self, member_id: int) -> None:
        self.toggle_node(member_id, "resume")

    def take_snapshot_on(self, member_id: int) -> None:
        """Aeron ``TestCluster.takeSnapshot(node)``."""
        self.toggle_node(member_id, "snapshot")

    def find_leader(self, skip_member_id: int = -1) -> int | None:
        """Aeron ``TestCluster.findLeader(skipIndex)``: the first live member other than
        ``skip_member_id`` that is LEADER with its election closed, else None."""
        for m in self.c.members_alive():
            member = self.c.member(m)
            if m != skip_member_id and member.role == Role.LEADER and member.election_state is None:
                return m
        return None


def aeron_cluster(sim: Any, members: int = 3, seed: int = 0, **kwargs: Any) -> AeronCluster:
    """A SimCluster from the ``sim`` kit with the Aeron test service on every member."""
    return AeronCluster(sim.cluster(members=members, seed=seed, service=SERVICE_NAME, **kwargs))


# --- service-container lifecycle (tests/aeron/test_cluster_lifecycle.py, test_real_process_lifecycle.py)
from pathlib import Path  # noqa: E402 - this block's own imports

from clusterlab.harness.services.kv import KeyValueService  # noqa: E402

EXCEPTION_ON_LOAD_SERVICE = "tests.aeron.support:ExceptionOnLoadService"
TERMINATE_COUNTING_SERVICE = "tests.aeron.support:TerminateCountingService"
EXCEPTION_ON_LOAD_KV = "tests.aeron.support:ExceptionOnLoadKv"
TERMINATE_MARKING_KV = "tests.aeron.support:TerminateMarkingKv"
TERMINATE_MARKER = "on-terminate-member-{member_id}.txt"


class ExceptionOnLoadService(AeronTestService):
    """Aeron ClusterTest ``ExceptionOnLoadService``: ``on_start`` raises when given a snapshot."""

    def on_start(self, cluster: Cluster, snapshot: SnapshotImage | None) -> None:
        if snapshot is not None:
            raise RuntimeError("this snapshot failed to load")
        super().on_start(cluster, snapshot)


class TerminateCountingService(AeronTestService):
    """The Aeron test service counting its ``on_terminate`` calls (``terminate_count``)."""

    def __init__(self) -> None:
        super().__init__()
        self.terminate_count = 0

    def on_terminate(self, cluster: Cluster) -> None:
        self.terminate_count += 1


class ExceptionOnLoadKv(KeyValueService):
    """The kv service failing as Aeron's ``ExceptionOnLoadService`` does (the real-process ports)."""

    def on_start(self, cluster: Cluster, snapshot: SnapshotImage | None) -> None:
        if snapshot is not None:
            raise RuntimeError("this snapshot failed to load")
        super().on_start(cluster, snapshot)


class TerminateMarkingKv(KeyValueService):
    """The kv service appending a line to ``TERMINATE_MARKER`` in its process's working directory
    (the cluster directory under LocalCluster) at each ``on_terminate``."""

    def on_terminate(self, cluster: Cluster) -> None:
        with (Path.cwd() / TERMINATE_MARKER.format(member_id=cluster.member_id)).open("a") as f:
            f.write("on_terminate\n")


# --- ClusterBackup (tests/aeron/test_cluster_backup.py): Aeron TestCluster's backup-node helpers
from clusterlab.core.consensus.cluster_backup import BackupState  # noqa: E402 - this block's own imports
from clusterlab.harness.sim_backup import SimBackup, restore_from_backup, start_backup  # noqa: E402


class AeronBackupCluster(AeronCluster):
    """:class:`AeronCluster` with Aeron ``TestCluster``'s backup node (``startClusterBackupNode``,
    ``awaitBackupState``, ``awaitBackupLiveLogPosition``, ``awaitBackupSnapshotRetrievedCount``,
    ``startStaticNodeFromBackup``) and ``TestBackupNode.nextBackupQueryDeadlineMs``."""

    def __init__(self, c: SimCluster) -> None:
        super().__init__(c)
        self.backup: SimBackup | None = None

    def log_position(self, member_id: int) -> int:
        """Aeron ``node.service().cluster().logPosition()``: the position the member's service applied."""
        return int(self.c.service(member_id).log_position)

    def start_cluster_backup_node(self, clean_start: bool = True, **options: Any) -> SimBackup:
        """Aeron ``startClusterBackupNode(cleanStart, ...)``: a backup of this cluster; without a clean
        start it runs on the storage of the backup before it (closed first), as Aeron reuses its directory."""
        previous = self.backup
        if previous is not None and previous.state is not BackupState.CLOSED:
            previous.close()
        if not clean_start and previous is not None:
            options.setdefault("storage", previous.storage)
        self.backup = start_backup(self.c, **options)
        return self.backup

    def _backup(self) -> SimBackup:
        assert self.backup is not None, "no backup node present"
        return self.backup

    def await_backup_state(self, state: BackupState, timeout_ns: int = 10 * SECOND) -> None:
        """Aeron ``awaitBackupState``: the backup's agent is in ``state``."""
        backup = self._backup()
        self.await_condition(lambda: backup.state is state, f"backup in {state.name}", timeout_ns)

    def await_backup_live_log_position(self, position: int, timeout_ns: int = 10 * SECOND) -> None:
        """Aeron ``awaitBackupLiveLogPosition``: the backup's log reaches ``position`` (fails if it closes)."""
        backup = self._backup()

        def reached() -> bool:
            assert backup.state is not BackupState.CLOSED, "backup live log position is closed"
            return backup.live_log_position >= position

        self.await_condition(reached, f"backup live log position {position}", timeout_ns)

    def await_backup_snapshot_retrieved_count(self, count: int, timeout_ns: int = 10 * SECOND) -> None:
        """Aeron ``awaitBackupSnapshotRetrievedCount``: snapshot retrieval rounds completed."""
        backup = self._backup()
        self.await_condition(
            lambda: backup.snapshots_retrieved_count >= count, f"backup retrieved {count} snapshot sets", timeout_ns
        )

    def next_backup_query_deadline_ns(self) -> int:
        """Aeron ``TestBackupNode.nextBackupQueryDeadlineMs()``: when the backup next queries a member."""
        return self._backup().agent.time_of_next_backup_query_ns

    def set_next_backup_query_deadline_ns(self, deadline_ns: int) -> None:
        """Aeron ``TestBackupNode.nextBackupQueryDeadlineMs(deadline)``: move the next query (0: now)."""
        self._backup().agent.time_of_next_backup_query_ns = deadline_ns

    def start_static_node_from_backup(self) -> None:
        """Aeron ``startStaticNodeFromBackup``: the backup closes and every member restarts from a copy of
        its directory (``restore_from_backup``), their own storage gone."""
        restore_from_backup(self.c, self._backup())


def aeron_backup_cluster(sim: Any, members: int = 3, seed: int = 0, **kwargs: Any) -> AeronBackupCluster:
    """A SimCluster from the ``sim`` kit with the Aeron test service, ready for a backup node."""
    return AeronBackupCluster(sim.cluster(members=members, seed=seed, service=SERVICE_NAME, **kwargs))


# --- backup authentication (tests/aeron/test_cluster_backup.py: Aeron's SampleAuthenticator suppliers)
from dataclasses import dataclass  # noqa: E402 - this block's own imports

from clusterlab.core.client.client import ClusterClient  # noqa: E402
from clusterlab.core.consensus.authenticator import SessionProxy  # noqa: E402
from clusterlab.core.consensus.context import Channel  # noqa: E402
from clusterlab.harness.sim_parts import client_response_channel  # noqa: E402

SAMPLE_PRINCIPAL = b"admin"
SAMPLE_CHALLENGE = b"challenge!"


@dataclass(frozen=True)
class CredentialsSupplier:
    """Aeron's ``CredentialsSupplier``: the connect credentials and the answer to a challenge."""

    encoded_credentials: bytes
    challenge_answer: bytes = b""

    def on_challenge(self, encoded_challenge: bytes) -> bytes:
        return self.challenge_answer


# Aeron TestCluster's suppliers (SampleAuthenticator accepts admin:admin, challenges admin:adminC).
SIMPLE_CREDENTIALS_SUPPLIER = CredentialsSupplier(b"admin:admin")
CHALLENGE_RESPONSE_CREDENTIALS_SUPPLIER = CredentialsSupplier(b"admin:adminC", b"admin:CSadmin")
INVALID_SIMPLE_CREDENTIALS_SUPPLIER = CredentialsSupplier(b"admin:invalid")
INVALID_CHALLENGE_RESPONSE_CREDENTIALS_SUPPLIER = CredentialsSupplier(b"admin:adminC", b"admin:invalid")


class SampleAuthenticator:
    """Aeron ``io.aeron.samples.archive.SampleAuthenticator``: ``admin:admin`` is authenticated,
    ``admin:adminC`` challenged with ``challenge!`` and authenticated by the answer ``admin:CSadmin``,
    anything else rejected; the principal is ``admin``."""

    def __init__(self) -> None:
        self._state: dict[int, str] = {}  # session id -> CHALLENGE, AUTHENTICATED or REJECT

    def on_connect_request(self, cluster_session_id: int, encoded_credentials: bytes, now_ms: int) -> None:
        text = bytes(encoded_credentials)
        self._state[cluster_session_id] = (
            "AUTHENTICATED" if text == b"admin:admin" else "CHALLENGE" if text == b"admin:adminC" else "REJECT"
        )

    def on_challenge_response(self, cluster_session_id: int, encoded_credentials: bytes, now_ms: int) -> None:
        ok = bytes(encoded_credentials) == b"admin:CSadmin"
        if self._state.get(cluster_session_id) == "CHALLENGE" and ok:
            self._state[cluster_session_id] = "AUTHENTICATED"
        elif not ok:
            self._state[cluster_session_id] = "REJECT"

    def on_connected_session(self, session: SessionProxy, now_ms: int) -> None:
        state = self._state.get(session.cluster_session_id)
        if state == "CHALLENGE":
            session.challenge(SAMPLE_CHALLENGE)
        else:
            self._decide(session, state)

    def on_challenged_session(self, session: SessionProxy, now_ms: int) -> None:
        self._decide(session, self._state.get(session.cluster_session_id))

    def _decide(self, session: SessionProxy, state: str | None) -> None:
        if state == "AUTHENTICATED" and session.authenticate(SAMPLE_PRINCIPAL):
            del self._state[session.cluster_session_id]
        elif state == "REJECT":
            session.reject()
            del self._state[session.cluster_session_id]


def connect_client_with(a: AeronCluster, supplier: CredentialsSupplier) -> SimClient:
    """Aeron ``TestCluster.connectClient(credentialsSupplier)``: a client whose connect carries the
    supplier's credentials and whose challenges it answers."""
    c = a.c
    client = c.add_client(credentials=supplier.encoded_credentials)
    client.client = ClusterClient(
        client.client_id,
        client_response_channel(client.client_id),
        {m: f"sim-member:{m}" for m in range(c.member_count)},
        lambda member_id, payload: c.network.send(c.now_ns, client.network_id, member_id, Channel.INGRESS, payload),
        credentials=supplier.encoded_credentials,
        on_challenge=supplier.on_challenge,
    )
    client.client.connect(c.now_ns)
    a.await_condition(lambda: client.client.is_connected or bool(client.errors), "client connected")
    assert client.client.is_connected, client.errors
    a.client = client
    return client
