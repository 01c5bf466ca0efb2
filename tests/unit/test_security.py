"""Keys, credentials, the source check and the directory lock (clusterlab.core.runtime.security, dirlock),
in one process: real ZeroMQ sockets and pyzmq's ZAP handler, no cluster."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import zmq
from clusterlab.core.consensus.authenticator import CredentialsAuthenticator
from clusterlab.core.runtime.config import ConfigError
from clusterlab.core.runtime.dirlock import DirectoryLockError, hold_member_lock, lock_cluster_directory
from clusterlab.core.runtime.security import (
    ADMIN,
    DOMAIN_CONTROL,
    DOMAIN_MEMBER,
    ClientCredentials,
    ProcessSecurity,
    create_keys,
    credentials_path,
    keys_dir,
    load_key_pair,
    node_routing_id,
    source_rejection,
)
from clusterlab.core.runtime.transport import drain_routed


def test_keys_are_private_and_kept_across_calls(tmp_path: Path) -> None:
    create_keys(tmp_path, range(3))
    kdir = keys_dir(tmp_path)
    assert stat.S_IMODE(kdir.stat().st_mode) == 0o700
    names = sorted(p.name for p in kdir.iterdir())
    assert "member-2.key_secret" in names and "client.key" in names and "admin.key_secret" in names
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in kdir.iterdir()), names
    before = load_key_pair(tmp_path, "member-0")
    create_keys(tmp_path, range(3))
    assert load_key_pair(tmp_path, "member-0") == before


def test_credentials_parse_and_answer_the_authenticator(tmp_path: Path) -> None:
    create_keys(tmp_path, [0])
    creds = ClientCredentials.from_file(credentials_path(tmp_path))
    auth = CredentialsAuthenticator({creds.user: creds.password})
    auth.on_connect_request(7, creds.connect_credentials, 0)
    nonce = auth._pending[7][1]
    auth.on_challenge_response(7, creds.on_challenge(nonce), 0)
    assert auth._verdict[7] == creds.user.encode()
    for bad in ("", "no-colon", ":pw", "user:", "a:b\nc:d"):
        with pytest.raises(ConfigError, match="user:password"):
            ClientCredentials.parse(bad, "f")
    with pytest.raises(ConfigError, match="cannot read credentials file"):
        ClientCredentials.from_file(tmp_path / "absent")


def test_source_rejection_checks_routing_id_then_user_id() -> None:
    assert source_rejection(b"node-1", None, 1, node_routing_id) is None
    assert source_rejection(b"node-1", "member-1", 1, node_routing_id) is None
    assert "announced as 'node-2'" in (source_rejection(b"node-2", None, 1, node_routing_id) or "")
    assert "authenticated as 'member-2'" in (source_rejection(b"node-1", "member-2", 1, node_routing_id) or "")
    assert source_rejection(b"node-1", "", 1, node_routing_id) is not None  # no ZAP identity at all


def test_zap_admits_only_the_domain_keys_and_stamps_their_names(tmp_path: Path) -> None:
    create_keys(tmp_path, range(2))
    ctx = zmq.Context()
    server = ProcessSecurity(tmp_path, True, "member-0", ctx, authenticate=True)
    sockets: list[zmq.Socket] = []
    try:
        members = ctx.socket(zmq.ROUTER)
        control = ctx.socket(zmq.ROUTER)
        sockets += [members, control]
        server.serve(members, DOMAIN_MEMBER)
        server.serve(control, DOMAIN_CONTROL)
        members.bind(f"ipc://{tmp_path}/m.sock")
        control.bind(f"ipc://{tmp_path}/c.sock")

        def dealer(name: str, endpoint: str) -> zmq.Socket:
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.ROUTING_ID, node_routing_id(1))
            ProcessSecurity(tmp_path, True, name, None, authenticate=False).connect_to(sock, "member-0")
            sock.connect(endpoint)
            sockets.append(sock)
            return sock

        dealer("member-1", f"ipc://{tmp_path}/m.sock").send_multipart([b"h", b"from member 1"])
        assert members.poll(10_000)
        [(routing_id, user_id, frames)] = drain_routed(members, 10, user_ids=True)
        assert (routing_id, user_id, frames) == (b"node-1", "member-1", [b"h", b"from member 1"])
        # A member key is not an admin key: refused on control; the admin key is admitted there.
        dealer("member-1", f"ipc://{tmp_path}/c.sock").send_multipart([b"h", b"x"])
        dealer(ADMIN, f"ipc://{tmp_path}/c.sock").send_multipart([b"h", b"from admin"])
        assert control.poll(10_000)
        [(_rid, user_id, frames)] = drain_routed(control, 10, user_ids=True)
        assert (user_id, frames[1]) == ("admin", b"from admin")
        assert server.refused >= 1
    finally:
        for sock in sockets:
            sock.close(0)
        server.close()
        ctx.term()


def test_directory_lock_refuses_a_second_owner_naming_the_first(tmp_path: Path) -> None:
    lock = lock_cluster_directory(tmp_path)
    try:
        with pytest.raises(DirectoryLockError, match=f"in use by PID {os.getpid()}.*kill {os.getpid()}"):
            lock_cluster_directory(tmp_path)
        member = hold_member_lock(tmp_path / "member-0", "node", 0)
        with pytest.raises(DirectoryLockError, match="member 0's node"):
            hold_member_lock(tmp_path / "member-0", "node", 0)
        member.release()
        hold_member_lock(tmp_path / "member-0", "node", 0).release()
    finally:
        lock.release()
    lock_cluster_directory(tmp_path).release()  # released: free again
