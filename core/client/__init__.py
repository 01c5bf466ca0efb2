"""Cluster client (Aeron's ``AeronCluster``), sans-IO: connect with credentials, offer, poll egress,
keep-alive, follow REDIRECT and NewLeaderEvent, close; clear exceptions for refusals and timeouts."""

from clusterlab.core.client.client import (
    CONNECT_RETRY_INTERVAL_DEFAULT_NS,
    EGRESS_STREAM_ID_DEFAULT,
    KEEPALIVE_INTERVAL_DEFAULT_NS,
    MESSAGE_TIMEOUT_DEFAULT_NS,
    ClientState,
    ClusterClient,
    EgressMessage,
    format_ingress_endpoints,
    parse_ingress_endpoints,
    retry_on_leader_change,
)
from clusterlab.core.client.errors import (
    ClientError,
    ClusterTimeoutError,
    ConnectError,
    NotConnectedError,
    SessionClosedError,
)

__all__ = [
    "CONNECT_RETRY_INTERVAL_DEFAULT_NS",
    "EGRESS_STREAM_ID_DEFAULT",
    "KEEPALIVE_INTERVAL_DEFAULT_NS",
    "MESSAGE_TIMEOUT_DEFAULT_NS",
    "ClientError",
    "ClientState",
    "ClusterClient",
    "ClusterTimeoutError",
    "ConnectError",
    "EgressMessage",
    "NotConnectedError",
    "SessionClosedError",
    "format_ingress_endpoints",
    "parse_ingress_endpoints",
    "retry_on_leader_change",
]
