"""The clustered service side of a member: the user API (``api``), Aeron's ClusteredServiceAgent
(``agent``) and the service snapshot format (``snapshot``)."""

from clusterlab.core.service.agent import (
    MAX_LOG_POSITION,
    AgentError,
    AppliedEntry,
    AppliedRun,
    ClusteredServiceAgent,
    EntryType,
    LogContiguityError,
    ServiceError,
    ServiceTerminated,
    SnapshotError,
)
from clusterlab.core.service.api import (
    ClientSession,
    Cluster,
    ClusteredService,
    ClusterError,
    ClusterTerminationException,
    Role,
)
from clusterlab.core.service.snapshot import SnapshotFormatError, SnapshotImage, SnapshotWriter

__all__ = [
    "MAX_LOG_POSITION",
    "AgentError",
    "AppliedEntry",
    "AppliedRun",
    "ClientSession",
    "Cluster",
    "ClusterError",
    "ClusterTerminationException",
    "ClusteredService",
    "ClusteredServiceAgent",
    "EntryType",
    "LogContiguityError",
    "Role",
    "ServiceError",
    "ServiceTerminated",
    "SnapshotError",
    "SnapshotFormatError",
    "SnapshotImage",
    "SnapshotWriter",
]
