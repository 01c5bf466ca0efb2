"""A cluster's configuration file (``<cluster dir>/cluster.json``) and its endpoints.

One file describes the whole cluster: members and their endpoints, the service, the timeouts of
docs/protocol.md d, the seed. LocalCluster writes it; every node and service process reads it
(``python -m clusterlab.core.runtime.node --dir D --member-id I``); clients and tools find the cluster by it.

Endpoints (no fixed ports anywhere, so parallel clusters never collide):

* ``ipc`` (default): socket files inside the cluster directory, ``member-<i>/<channel>.sock``.
  A Unix socket path must fit in ~107 bytes; when the directory is too deep for that (pytest's
  tmp_path often is), the sockets are reached through a short symlink ``/tmp/clusterlab-XXXX/c``
  to the cluster directory, so the socket files still live in the cluster directory.
* ``tcp``: the member-facing sockets (ingress, consensus, log, catch-up, archive) bind
  ``tcp://127.0.0.1:*`` and the OS picks the ports; a node reports what it bound and the harness
  distributes the member list (``MembersConfig``). Node <-> service and control sockets stay ``ipc``
  in the member directory, as Aeron's CM <-> service streams and ClusterTool use IPC on the host.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from clusterlab.core.atomic import write_atomically
from clusterlab.core.consensus.context import NULL_VALUE, ClusterMember, Timeouts

CONFIG_FILE_NAME = "cluster.json"
CONFIG_VERSION = 1
MAX_IPC_PATH = 100  # sun_path is 108 bytes with its NUL; keep a margin
TCP_HOST = "127.0.0.1"
TCP_ANY_PORT = f"tcp://{TCP_HOST}:0"  # "bind me to a port the OS picks"
SOCKET_LINK_PREFIX = "clusterlab-"
# Aeron's aeron.archive.segment.file.length: default 128 MiB, a power of two from the minimum term
# length (64 KiB) to 1 GiB. Aeron's system tests use 512 KiB to exercise segment purging.
ARCHIVE_SEGMENT_LENGTH_DEFAULT = 128 * 1024 * 1024
ARCHIVE_SEGMENT_LENGTH_MIN = 64 * 1024
ARCHIVE_SEGMENT_LENGTH_MAX = 1024 * 1024 * 1024


def segment_length_error(name: str, value: int) -> str | None:
    """Why ``value`` is not a usable archive segment length (Aeron's rule), or None."""
    if not ARCHIVE_SEGMENT_LENGTH_MIN <= value <= ARCHIVE_SEGMENT_LENGTH_MAX or value & (value - 1):
        return (
            f"{name} must be a power of two from {ARCHIVE_SEGMENT_LENGTH_MIN} (64 KiB) to "
            f"{ARCHIVE_SEGMENT_LENGTH_MAX} (1 GiB) bytes, got {value}"
        )
    return None


MAX_SERVICES = 8  # service ids 0..7: one process each on a member; a 2-core test machine runs a few at most


# Set to 1: a service process watches its service's callbacks (clusterlab.harness.tripwire, named in
# clusterlab.core.runtime.service). Test-only: set by LocalCluster(tripwire=True); unset in production.
TRIPWIRE_ENV = "CLUSTERLAB_TRIPWIRE"
# Set to 1: a node process asserts the consensus module's invariants after every input
# (ConsensusModuleContext.check_invariants; always on in the simulator and tests).
CHECK_INVARIANTS_ENV = "CLUSTERLAB_CHECK_INVARIANTS"


class ConfigError(Exception):
    """A cluster directory or configuration file that cannot be used (missing, unreadable, invalid)."""


@dataclass(frozen=True, slots=True)
class MemberConfig:
    """One member's endpoints. The first five are the member's ClusterMember (what peers and
    clients connect to); the others are local to the member's host."""

    member_id: int
    ingress: str
    consensus: str
    log: str
    catchup: str
    archive: str
    control: str  # node control socket (ROUTER): status, gate rules, clock offset, cluster control
    from_service: str  # node binds: service -> consensus module (Aeron stream 105)
    to_service: str  # service binds: consensus module -> service (Aeron stream 104)
    service_control: str  # service process control socket (ROUTER): status

    def cluster_member(self) -> ClusterMember:
        return ClusterMember(
            self.member_id,
            ingress_endpoint=self.ingress,
            consensus_endpoint=self.consensus,
            log_endpoint=self.log,
            catchup_endpoint=self.catchup,
            archive_endpoint=self.archive,
        )

    def with_cluster_member(self, m: ClusterMember) -> MemberConfig:
        return replace(
            self,
            ingress=m.ingress_endpoint,
            consensus=m.consensus_endpoint,
            log=m.log_endpoint,
            catchup=m.catchup_endpoint,
            archive=m.archive_endpoint,
        )

    @property
    def is_resolved(self) -> bool:
        """False while a tcp endpoint still waits for its OS-assigned port."""
        return not any(e.endswith(":0") for e in (self.ingress, self.consensus, self.log, self.catchup, self.archive))


def parse_members(text: str) -> list[ClusterMember]:
    """``id,ingress,consensus,log,catchup,archive|...`` (Aeron's cluster members string). Raises ValueError."""
    members = []
    for entry in text.split("|"):
        parts = entry.split(",")
        if len(parts) != 6:
            raise ValueError(f"member entry {entry!r} does not have 6 comma-separated fields")
        try:
            member_id = int(parts[0])
        except ValueError:
            raise ValueError(f"member entry {entry!r}: member id {parts[0]!r} is not an integer") from None
        if any(not p for p in parts[1:]):
            raise ValueError(f"member entry {entry!r} has an empty endpoint")
        members.append(ClusterMember(member_id, *parts[1:]))
    ids = [m.member_id for m in members]
    if len(set(ids)) != len(ids):
        raise ValueError(f"repeated member ids in {text!r}")
    return members


def format_members(members: list[ClusterMember]) -> str:
    return "|".join(m.describe() for m in members)


@dataclass
class ClusterConfig:
    """The contents of ``cluster.json``; ``directory`` is where it lives (not stored)."""

    directory: Path
    members: list[MemberConfig]
    service: str | None = "kv"  # service 0's kind (Aeron's single-service default)
    timeouts: Timeouts = field(default_factory=Timeouts.fast)
    appointed_leader_id: int = NULL_VALUE
    seed: int = 0
    transport: str = "ipc"
    socket_root: str = ""  # where ipc socket paths start (the directory, or a short link to it)
    secure: bool = False  # CURVE keys + ZAP on every socket (clusterlab.core.runtime.security)
    archive_segment_length: int = ARCHIVE_SEGMENT_LENGTH_DEFAULT  # the log recording's segment files
    # Several clustered services per member (Aeron's service ids 0..N-1): the kind of each, service 0
    # first. Empty: one service, ``service`` (or none). Set: ``service`` is ``services[0]``.
    services: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.services:
            self.service = self.services[0]

    # --------------------------------------------------------------------------- services
    @property
    def service_kinds(self) -> list[str]:
        """The kind of every service id of a member (``[]`` when the cluster runs no service)."""
        if self.services:
            return list(self.services)
        return [self.service] if self.service else []

    @property
    def service_count(self) -> int:
        """How many clustered services each member runs (the consensus module waits for all their acks)."""
        return len(self.service_kinds)

    # --------------------------------------------------------------------------- layout
    def member_dir(self, member_id: int) -> Path:
        """The member's own directory: archive, recording log, node state, snapshots, sockets."""
        return self.directory / f"member-{member_id}"

    @property
    def log_dir(self) -> Path:
        """Process logs (stdout/stderr), one file per process incarnation; kept across wipes."""
        return self.directory / "logs"

    @property
    def path(self) -> Path:
        return self.directory / CONFIG_FILE_NAME

    def member(self, member_id: int) -> MemberConfig:
        for m in self.members:
            if m.member_id == member_id:
                return m
        raise ConfigError(f"member {member_id} is not in {self.path} (members {[m.member_id for m in self.members]})")

    def cluster_members(self) -> list[ClusterMember]:
        return [m.cluster_member() for m in self.members]

    def ensure_socket_root(self) -> bool:
        """Make the ipc socket root usable again (a short link removed when the cluster last
        stopped is made anew, and every ipc endpoint moved under it). True if anything changed."""
        old = Path(self.socket_root)
        if old == self.directory or (old.is_symlink() and old.resolve() == self.directory.resolve()):
            return False
        new = socket_root_for(self.directory)
        prefix_old, prefix_new = f"ipc://{old}/", f"ipc://{new}/"

        def moved(m: MemberConfig) -> MemberConfig:
            endpoints: dict[str, Any] = {k: v for k, v in asdict(m).items() if isinstance(v, str)}
            return replace(m, **{k: v.replace(prefix_old, prefix_new, 1) for k, v in endpoints.items()})

        self.members = [moved(m) for m in self.members]
        self.socket_root = str(new)
        return True

    @property
    def sockets_present(self) -> bool:
        """Whether some member's control socket file exists. A running node has bound it; a stopped
        one has removed it (ZeroMQ unlinks ipc files on close), as it has the short link to the
        directory. A killed node leaves its file behind, so True does not prove anything runs."""
        if not Path(self.socket_root).is_dir():
            return False
        return any((path := ipc_path(m.control)) is not None and path.exists() for m in self.members)

    def client_endpoint(self, name: str) -> str:
        """A response channel for a client (the client binds it)."""
        if self.transport == "tcp":
            return TCP_ANY_PORT
        return f"ipc://{self.socket_root}/clients/{name}.sock"

    # --------------------------------------------------------------------------- persistence
    def to_json(self) -> dict[str, Any]:
        return {
            "version": CONFIG_VERSION,
            "members": [asdict(m) for m in self.members],
            "service": self.service,
            "timeouts": asdict(self.timeouts),
            "appointed_leader_id": self.appointed_leader_id,
            "seed": self.seed,
            "transport": self.transport,
            "socket_root": self.socket_root,
            "secure": self.secure,
            "archive_segment_length": self.archive_segment_length,
            # Only with more than one service: single-service files stay as they were.
            **({"services": list(self.services)} if len(self.services) > 1 else {}),
        }

    def save(self) -> None:
        """Write atomically (readers never see half a file)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, json.dumps(self.to_json(), indent=2) + "\n")

    @classmethod
    def load(cls, directory: Path | str) -> ClusterConfig:
        directory = Path(directory)
        path = directory / CONFIG_FILE_NAME
        if not directory.is_dir():
            raise ConfigError(f"no cluster directory {directory}")
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"{directory} is not a cluster directory: {CONFIG_FILE_NAME} not found") from None
        except (OSError, ValueError) as e:
            raise ConfigError(f"cannot read {path}: {e}") from None
        try:
            if raw.get("version") != CONFIG_VERSION:
                raise ConfigError(f"{path}: unsupported version {raw.get('version')!r}")
            timeout_names = {f.name for f in fields(Timeouts)}
            segment_length = int(raw.get("archive_segment_length", ARCHIVE_SEGMENT_LENGTH_DEFAULT))
            if (error := segment_length_error("archive_segment_length", segment_length)) is not None:
                raise ConfigError(f"{path}: {error}")
            return cls(
                directory=directory,
                members=[MemberConfig(**m) for m in raw["members"]],
                service=raw["service"],
                timeouts=Timeouts(**{k: int(v) for k, v in raw["timeouts"].items() if k in timeout_names}),
                appointed_leader_id=int(raw["appointed_leader_id"]),
                seed=int(raw["seed"]),
                transport=raw["transport"],
                socket_root=raw["socket_root"],
                secure=bool(raw.get("secure", False)),
                archive_segment_length=segment_length,
                services=parse_services(raw.get("services") or []),
            )
        except ConfigError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ConfigError(f"{path} is not a valid cluster configuration: {type(e).__name__}: {e}") from None

    # --------------------------------------------------------------------------- creation
    @classmethod
    def create(
        cls,
        directory: Path | str,
        members: int,
        *,
        service: str | None = "kv",
        timeouts: Timeouts | None = None,
        tcp: bool = False,
        seed: int = 0,
        appointed_leader_id: int = NULL_VALUE,
        secure: bool = False,
        archive_segment_length: int = ARCHIVE_SEGMENT_LENGTH_DEFAULT,
        services: list[str] | None = None,
    ) -> ClusterConfig:
        """A new configuration for ``members`` members in ``directory`` (not yet saved). ``services``:
        the kind of each service id when a member runs several (``["kv", "counter"]``)."""
        if members < 1:
            raise ValueError(f"members must be >= 1, got {members}")
        if (error := segment_length_error("archive_segment_length", archive_segment_length)) is not None:
            raise ValueError(error)
        directory = Path(directory).resolve()
        timeouts = timeouts if timeouts is not None else Timeouts.fast()
        timeouts.validate()
        root = socket_root_for(directory)
        member_configs = []
        for i in range(members):
            local = f"ipc://{root}/member-{i}"
            if tcp:
                cluster_facing = dict.fromkeys(("ingress", "consensus", "log", "catchup", "archive"), TCP_ANY_PORT)
            else:
                names = ("ingress", "consensus", "log", "catchup", "archive")
                cluster_facing = {ch: f"{local}/{ch}.sock" for ch in names}
            member_configs.append(
                MemberConfig(
                    member_id=i,
                    **cluster_facing,
                    control=f"{local}/control.sock",
                    from_service=f"{local}/from-service.sock",
                    to_service=f"{local}/to-service.sock",
                    service_control=f"{local}/service-control.sock",
                )
            )
        return cls(
            directory=directory,
            members=member_configs,
            service=service,
            timeouts=timeouts,
            appointed_leader_id=appointed_leader_id,
            seed=seed,
            transport="tcp" if tcp else "ipc",
            socket_root=str(root),
            secure=secure,
            archive_segment_length=archive_segment_length,
            services=parse_services(services or []),
        )


def parse_services(kinds: str | list[str]) -> list[str]:
    """Service kinds from ``"kv,counter"`` or a list; raises ValueError naming what is wrong."""
    items = kinds.split(",") if isinstance(kinds, str) else list(kinds)
    if not isinstance(kinds, str | list) or any(not isinstance(k, str) for k in items):
        raise ValueError(f"services must be a list of service names, got {kinds!r}")
    out = [k.strip() for k in items]
    if any(not k for k in out):
        raise ValueError(f"services {kinds!r}: an empty service name")
    if len(out) > MAX_SERVICES:
        raise ValueError(f"services {kinds!r}: at most {MAX_SERVICES} services per member, got {len(out)}")
    return out


def to_service_endpoint(member: MemberConfig, service_id: int) -> str:
    """The consensus module -> service socket of ``service_id`` (service 0 keeps the member's own)."""
    return member.to_service if service_id == 0 else member.to_service.replace(".sock", f"-{service_id}.sock")


def service_control_endpoint(member: MemberConfig, service_id: int) -> str:
    """The control socket of the member's service ``service_id`` (service 0 keeps the member's own)."""
    if service_id == 0:
        return member.service_control
    return member.service_control.replace(".sock", f"-{service_id}.sock")


def service_process_name(member_id: int, service_id: int = 0) -> str:
    """``service-<member>`` for service 0 (as with one service), ``service-s<id>-<member>`` for the others:
    the member id stays last, where the trace's readers take it from."""
    return f"service-{member_id}" if service_id == 0 else f"service-s{service_id}-{member_id}"


def socket_root_for(directory: Path) -> Path:
    """``directory`` if ipc socket paths under it fit a Unix socket address, else a short symlink to
    it (``/tmp/clusterlab-XXXX/c``). The longest path is ``member-NN/service-control-N.sock``."""
    longest = len(str(directory)) + len("/member-99/service-control-9.sock")
    if longest <= MAX_IPC_PATH:
        return directory
    link_dir = Path(tempfile.mkdtemp(prefix=SOCKET_LINK_PREFIX, dir="/tmp"))
    link = link_dir / "c"
    link.symlink_to(directory, target_is_directory=True)
    return link


def remove_socket_root(config: ClusterConfig) -> None:
    """Remove the short symlink made by ``socket_root_for`` (not the cluster directory)."""
    root = Path(config.socket_root)
    if root != config.directory and root.is_symlink() and root.parent.name.startswith(SOCKET_LINK_PREFIX):
        root.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            root.parent.rmdir()


def ipc_path(endpoint: str) -> Path | None:
    """The socket file of an ``ipc://`` endpoint, else None."""
    return Path(endpoint[len("ipc://") :]) if endpoint.startswith("ipc://") else None


def timeouts_to_json(t: Timeouts) -> dict[str, int]:
    return asdict(t)
