"""Who may talk to a cluster's sockets: CURVE keys, a ZAP authenticator, client credentials.

With ``cluster.json``'s ``secure`` on (``cluster start --tcp`` by default, ``--secure`` on ipc),
every socket a member binds is a CURVE server and every connection is authenticated by pyzmq's own
ZAP handler (``zmq.auth.ThreadAuthenticator``) against the public keys in ``<dir>/keys``:

    domain   sockets                                                  keys accepted
    member   consensus, log, catchup, archive, to/from-service        member-<i> (every member)
    ingress  client ingress                                           client, admin
    control  node and service control                                 admin
    egress   a client's response channel (the client binds it)        member-<i>

The authenticator names each accepted key (``member-3``, ``client``, ``admin``); ZeroMQ stamps that
name on every message of the connection (the ``User-Id`` property), and the receiver checks it
against the member id the message's header claims (:func:`source_rejection`). With security off the
same check holds on the connection's routing id (``node-<i>``, set by the sender at connect; a
ROUTER refuses a second connection with a routing id in use), so a message whose claimed source
does not match the connection it came on is dropped either way. The consensus module then holds the
member id in the body to the same proven source (clusterlab.core.consensus.senders): a message whose
body names another sender is dropped and counted, so a member's key (or routing id) speaks for that
member only.

Keys are made by :func:`create_keys` (``cluster start``, LocalCluster): one key pair per member (its
node and its service share it), one for clients, one for the operator's tools (admin), plus the
clients' credentials (``client.credentials``: ``user:password``) checked by the consensus module's
CredentialsAuthenticator through the challenge/response path. Files are 0600 in a 0700 directory.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth
from clusterlab.core.consensus.authenticator import CredentialsAuthenticator
from clusterlab.core.runtime.config import ConfigError
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85

KEYS_DIR_NAME = "keys"
CREDENTIALS_FILE_NAME = "client.credentials"
CLIENT = "client"
ADMIN = "admin"
DOMAIN_MEMBER = "clusterlab-member"
DOMAIN_INGRESS = "clusterlab-ingress"
DOMAIN_CONTROL = "clusterlab-control"
DOMAIN_EGRESS = "clusterlab-egress"
USER_ID = "User-Id"


def member_key_name(member_id: int) -> str:
    """The key (and ZAP user id) of a member: its node and its service."""
    return f"member-{member_id}"


def node_routing_id(member_id: int) -> bytes:
    """The routing id a node's links announce at connect (to its peers and to its service)."""
    return f"node-{member_id}".encode()


def service_routing_id(member_id: int, service_id: int = 0) -> bytes:
    """The routing id a service's link to its node announces at connect (its process name)."""
    return (f"service-{member_id}" if service_id == 0 else f"service-s{service_id}-{member_id}").encode()


def keys_dir(directory: Path) -> Path:
    return Path(directory) / KEYS_DIR_NAME


def _private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)


def create_keys(directory: Path, member_ids: Iterable[int]) -> Path:
    """Key pairs for ``member_ids``, the client and admin, and the client credentials, in
    ``<directory>/keys`` (0700; files 0600). Keys that exist are kept (a restart keeps its keys)."""
    _private_dir(Path(directory))
    kdir = keys_dir(directory)
    _private_dir(kdir)
    for name in [*(member_key_name(i) for i in member_ids), CLIENT, ADMIN]:
        if not (kdir / f"{name}.key_secret").exists():
            public, secret = zmq.auth.create_certificates(kdir, name)
            for path in (public, secret):
                os.chmod(path, 0o600)
    credentials = kdir / CREDENTIALS_FILE_NAME
    if not credentials.exists():
        fd = os.open(credentials, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"{CLIENT}:{secrets.token_hex(16)}\n")
    return kdir


def _load(kdir: Path, name: str, *, secret: bool) -> tuple[bytes, bytes | None]:
    path = kdir / (f"{name}.key_secret" if secret else f"{name}.key")
    try:
        public, secret_key = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read the {name} key {path}: {e}") from None
    if secret and secret_key is None:
        raise ConfigError(f"{path} holds no secret key")
    return public, secret_key


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A CURVE key pair (z85 text, as ZeroMQ's socket options take it)."""

    public: bytes
    secret: bytes


def load_key_pair(directory: Path, name: str) -> KeyPair:
    """``name``'s key pair from the cluster directory's keys (ConfigError if absent or unreadable)."""
    public, secret = _load(keys_dir(directory), name, secret=True)
    assert secret is not None
    return KeyPair(public, secret)


def load_public_keys(directory: Path) -> dict[str, bytes]:
    """Every public key in the cluster directory's keys, by name (``member-0``, ``client``, ...)."""
    kdir = keys_dir(directory)
    if not kdir.is_dir():
        raise ConfigError(f"{directory} is a secured cluster but has no {KEYS_DIR_NAME}/ directory")
    return {path.stem: _load(kdir, path.stem, secret=False)[0] for path in sorted(kdir.glob("*.key"))}


@dataclass(frozen=True, slots=True)
class ClientCredentials:
    """A client's user name and password (a ``user:password`` line in a credentials file).

    ``connect_credentials`` go in SessionConnectRequest; ``on_challenge`` answers the cluster's
    challenge as CredentialsAuthenticator expects (the password never travels)."""

    user: str
    password: str

    @classmethod
    def parse(cls, text: str, source: str = "credentials") -> ClientCredentials:
        line = text.strip()
        user, sep, password = line.partition(":")
        if not sep or not user or not password or "\n" in line:
            raise ConfigError(f"{source}: expected one line 'user:password'")
        return cls(user, password)

    @classmethod
    def from_file(cls, path: Path | str) -> ClientCredentials:
        """Read a credentials file (ConfigError naming the file if it cannot be used)."""
        try:
            text = Path(path).read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"cannot read credentials file {path}: {e}") from None
        return cls.parse(text, str(path))

    @property
    def connect_credentials(self) -> bytes:
        return self.user.encode()

    def on_challenge(self, encoded_challenge: bytes) -> bytes:
        return CredentialsAuthenticator.response(self.user, self.password, encoded_challenge)


def credentials_path(directory: Path) -> Path:
    return keys_dir(directory) / CREDENTIALS_FILE_NAME


def cluster_authenticator(directory: Path) -> CredentialsAuthenticator:
    """The consensus module's authenticator of a secured cluster: the users of its credentials file."""
    creds = ClientCredentials.from_file(credentials_path(directory))
    return CredentialsAuthenticator({creds.user: creds.password})


class _KeyAuthenticator(ThreadAuthenticator):
    """pyzmq's ZAP handler with the cluster's keys: a key is allowed on a domain if its name is,
    and its name becomes the connection's User-Id."""

    def __init__(self, zctx: zmq.Context, names: dict[bytes, str], allowed: dict[str, frozenset[str]]) -> None:
        super().__init__(zctx)
        self._key_names = names
        self._domain_names = allowed
        self.refused = 0
        for domain in allowed:
            self.configure_curve_callback(domain, self)

    def callback(self, domain: str, z85_key: bytes) -> bool:
        """pyzmq's credentials-provider hook (runs in the authenticator thread)."""
        ok = self._key_names.get(z85_key) in self._domain_names.get(domain, frozenset())
        if not ok:
            self.refused += 1
        return ok

    def curve_user_id(self, client_public_key: bytes) -> str:
        return self._key_names.get(z85.encode(client_public_key), "unknown")


class ProcessSecurity:
    """One process's CURVE identity and (with ``authenticate``) the ZAP authenticator of its
    context (one per context: a member's, or a client process's, for its response channels); inert
    when the cluster is not secured. Set a socket's options with :meth:`serve` before it binds and
    :meth:`connect_to` before it connects."""

    def __init__(
        self, directory: Path, enabled: bool, own: str, zctx: zmq.Context | None, *, authenticate: bool
    ) -> None:
        self.enabled = enabled
        self.own = own
        self._auth: _KeyAuthenticator | None = None
        self._publics: dict[str, bytes] = {}
        self._pair: KeyPair | None = None
        if not enabled:
            return
        if not hasattr(zmq, "CURVE_SERVER") or not zmq.has("curve"):
            raise ConfigError("this libzmq has no CURVE support; the cluster is secured")
        self._publics = load_public_keys(directory)
        self._pair = load_key_pair(directory, own)
        if authenticate:
            assert zctx is not None, "the ZAP handler runs on the process's context"
            members = frozenset(n for n in self._publics if n.startswith("member-"))
            allowed = {
                DOMAIN_MEMBER: members,
                DOMAIN_INGRESS: frozenset({CLIENT, ADMIN}),
                DOMAIN_CONTROL: frozenset({ADMIN}),
                DOMAIN_EGRESS: members,
            }
            self._auth = _KeyAuthenticator(zctx, {k: n for n, k in self._publics.items()}, allowed)
            self._auth.start()

    @property
    def refused(self) -> int:
        """Connections the authenticator refused (unknown key or key not allowed there)."""
        return self._auth.refused if self._auth is not None else 0

    def serve(self, sock: zmq.Socket, domain: str) -> None:
        if self._pair is None:
            return
        sock.setsockopt(zmq.ZAP_DOMAIN, domain.encode())
        sock.setsockopt(zmq.CURVE_SERVER, 1)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, self._pair.public)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self._pair.secret)

    def connect_to(self, sock: zmq.Socket, server: str) -> None:
        if self._pair is None:
            return
        try:
            server_key = self._publics[server]
        except KeyError:
            raise ConfigError(f"no public key for {server} in the cluster's keys") from None
        sock.setsockopt(zmq.CURVE_SERVERKEY, server_key)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, self._pair.public)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self._pair.secret)

    def connector(self, server: str) -> Callable[[zmq.Socket], None] | None:
        """A socket-setup hook for :class:`clusterlab.core.runtime.transport.Link` (None when off)."""
        if self._pair is None:
            return None
        return lambda sock: self.connect_to(sock, server)

    def connector_for_member(self, member_id: int) -> Callable[[zmq.Socket], None] | None:
        """:meth:`connector` for a member's sockets (the member's key is their server key)."""
        return self.connector(member_key_name(member_id))

    def close(self) -> None:
        if self._auth is not None:
            self._auth.stop()
            self._auth = None


def source_rejection(
    routing_id: bytes, user_id: str | None, claimed: int, expected_routing_id: Callable[[int], bytes]
) -> str | None:
    """Why a message claiming to come from member ``claimed`` is not accepted from this connection
    (its routing id and, when secured, its ZAP User-Id), or None if it is."""
    want = expected_routing_id(claimed)
    if routing_id != want:
        shown = routing_id.decode("ascii", "backslashreplace")[:40]
        return f"claims member {claimed} on a connection announced as {shown!r} (expected {want.decode()!r})"
    if user_id is not None and user_id != member_key_name(claimed):
        return f"claims member {claimed} on a connection authenticated as {user_id!r}"
    return None
