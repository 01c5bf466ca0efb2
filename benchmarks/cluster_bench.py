"""Cluster benchmark: clusterlab against a 3-node PySyncObj cluster and the raw ZeroMQ replication bound.

Run: ``python -m benchmarks.cluster_bench [--quick] [--out FILE] [--systems a,b,...] [--member-process MODE]``

``--member-process split|single|both``: clusterlab's members as a node process plus a service process
each (``split``, the default), as one process each (``single``: ``clusterlab.core.runtime.member``, keys
``...-single``), or both, with the ratio single ÷ split (``ratios[<key>-single]["vs_<key>"]``).
(``make bench`` runs it after the other benchmarks; PySyncObj comes from the ``bench`` extra).
Prints tables and writes JSON (default ``benchmarks/results/cluster.json``). ``--quick`` is a smoke
run of well under a minute; the default run takes a few minutes. Nothing is asserted: the figures
are for comparison, in the same run, on the same machine.

Every system is a :class:`Subject` and is measured by the same code (:mod:`benchmarks.peers.common`):

1. **Committed ops/s at saturation**, 64 B and 1 KiB payloads: one pipelined client keeps
   ``--window`` requests outstanding (20 000 for every system: PySyncObj sends entries once per
   100 ms append-entries period, so it needs ~rate x 0.2 s in flight; a window of 1 000 caps it at
   ~8 k ops/s); an op counts when the system acknowledges it as committed.
2. **Round-trip latency** p50/p99/p99.9 (64 B) at a fixed offered load, open loop, measured from the
   intended send time: at a *common* rate for every system (50 % of PySyncObj's 64 B saturation
   from this run), at a low fixed rate (1 000 ops/s) that every system sustains, and at 50 % of
   the system's own saturation. A rate above a system's saturation is skipped, not measured.
3. **Failover**: SIGKILL the leader (by PID), then a probe offers one op every 2 ms; failover time
   is the kill → first acknowledged op (so committed by the new leader); the killed member is
   restarted and the cluster is let settle before the next kill. ``--kills`` times (≥ 10 by
   default), with each system's default timeouts and with ~100 ms detection timeouts.
   "Settled" is the same bar for every system: all members up, agreeing on the leader, connected
   and caught up (for clusterlab: nodes *and* services caught up, ``LocalCluster.caught_up``;
   awaiting only the nodes would let a kill land while a restarted member's service is still
   starting, and the figure would measure that start-up, not the election).
   Detection timeouts: PySyncObj's election timeout (random in [min, max]) is both its failure
   detector and its ballot timer. clusterlab's detector is the leader heartbeat timeout; Aeron's
   election timeout is a separate timer (nomination delay up to half of it, and a ballot that,
   with a member dead, always runs its whole length). "Default" is each system's own defaults
   (clusterlab: LocalCluster's ``Timeouts.fast()``, 1 s heartbeat timeout, 300 ms election
   timeout; PySyncObj 0.4-1.4 s), which do not detect equally fast; the ~100 ms profile is the
   equal-detection comparison: 100 ms heartbeat timeout against PySyncObj's 0.1-0.2 s, and a
   40 ms election timeout (see ``ClusterlabSubject.FAST_TIMEOUTS_NS``).
   For clusterlab the failover is also split as the client sees it: kill → the client follows the
   new leader (its NewLeaderEvent) → the first acknowledged op (``new_leader_ms``,
   ``ack_after_new_leader_ms``; the client resends what is outstanding on NewLeaderEvent). Every
   second kill is probed instead with one LocalClient request started right after the kill (its first
   send reaches the dead leader): ``request_ms`` is kill → its reply, ``request_after_new_leader_ms``
   the part after the client followed the new leader (what resending on NewLeaderEvent removes;
   without it the request waits for the client's ``attempt_timeout_s``).
4. **Follower restart stall** (clusterlab): open-loop 64 B puts at 25 % of its 64 B saturation
   while a follower is killed, kept down ``follower_down_s`` (3 s) and restarted; the longest gap
   between two acknowledgements before the kill (the machine's noise floor), while it is down, and
   from its restart until it holds (node and service) the log committed while it was down, plus 1 s;
   the same with the leader killed (the client fails over) and restarted as a follower.
5. **rec. on ÷ rec. off**: the ratio of every metric, recording on against off, same run (the cost
   of recording; ``ratios["clusterlab-rec-on"]["vs_clusterlab-rec-off"]``).

Every system's figures carry the 1-minute load average when they were taken (``loadavg*`` keys):
on a shared machine only ratios from one run are comparable.

Where the client runs: for the raw bound and clusterlab it is this process (a ZeroMQ client, as a
user's would be; clusterlab's ``ClusterConnection`` sends what was offered between two polls as one
batched ZeroMQ message, and matches replies with ``kv.reply_outcome``, which reads a reply's id
without decoding all of it). PySyncObj has no client protocol — its callers are threads of a member process —
so its driver runs inside the leader process (the failover probe inside both survivors), which
spares it the client hop the others pay.

Systems: ``pysyncobj`` (defaults), ``pysyncobj-nobatch`` (``appendEntriesUseBatch=False``, its
latency-leaning setting; load only), ``raw`` (the bound), ``clusterlab`` (recording off and on),
``clusterlab-auth`` (recording off, authentication off and on: CURVE keys and ZAP on every socket,
per-message User-Id checks, client credentials; the pair is the cost of security).

Contention: every process of a system shares the machine's cores with the client and with anything
else running. Each saturation line prints the cores each process used and "other processes" (the
machine's busy time beyond this benchmark, from /proc/stat); the JSON keeps them and the load average
before and after. Figures taken while "other processes" is well above 0 are not comparable across runs.

The clusterlab subject (:class:`ClusterlabSubject`) imports ``clusterlab.harness.local.LocalCluster`` lazily;
while the runtime does not exist it prints ``clusterlab: runtime not available yet`` and the run goes
on with the others.
"""

from __future__ import annotations

import argparse
import atexit
import collections
import contextlib
import dataclasses
import inspect
import itertools
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks import write_results
from benchmarks.peers.common import (
    CLK_TCK,
    AckClient,
    NodeProcess,
    ProcessGroup,
    control,
    control_many,
    free_ports,
    payload_of,
    proc_cpu_seconds,
    run_paced,
    run_probe,
    run_saturation,
    stop_all_started,
)

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "cluster.json"
PAYLOAD_SIZES = (64, 1024)
LATENCY_SIZE = 64
PROFILES = ("default", "fast")
PROFILE_LABEL = {"default": "default timeouts", "fast": "~100 ms timeouts"}
REF_PYSYNCOBJ = "pysyncobj"
REF_RAW = "raw-zmq"


class Unavailable(RuntimeError):
    """A system that cannot run here (not installed, not written yet): reported, not fatal."""


@dataclass(frozen=True)
class Settings:
    quick: bool
    warmup_s: float
    duration_s: float
    latency_duration_s: float
    window: int
    kills: int
    probe_interval_s: float
    probe_timeout_s: float
    settle_timeout_s: float
    latency_fraction: float = 0.5
    low_rate: float = 1000.0
    follower_down_s: float = 3.0  # catch-up stall: how long the follower misses the log
    stall_load_fraction: float = 0.25  # catch-up stall: offered load, a fraction of own 64 B saturation

    @staticmethod
    def make(quick: bool, window: int | None, kills: int | None, duration: float | None) -> Settings:
        return Settings(
            quick=quick,
            warmup_s=0.3 if quick else 1.0,
            duration_s=duration or (1.0 if quick else 5.0),
            latency_duration_s=duration or (1.0 if quick else 5.0),
            window=window or 20_000,
            kills=kills if kills is not None else (1 if quick else 10),
            probe_interval_s=0.002,
            probe_timeout_s=15.0,
            settle_timeout_s=30.0,
        )


# ------------------------------------------------------------------------------------------ subjects


class Subject(ABC):
    """One benchmarked system. The driver calls: start(profile) … measurements … stop().

    Measurements default to running the shared driver in this process against :meth:`client`; a
    system whose client lives elsewhere (PySyncObj) overrides :meth:`saturation`, :meth:`paced` and
    :meth:`probe`. Failover needs :meth:`await_stable`, :meth:`kill_leader` and :meth:`restart`.
    """

    key: str = ""
    label: str = ""
    supports_failover: bool = True

    def __init__(self) -> None:
        self._rid_base = 0

    def availability(self) -> str | None:
        """None if the system can run here, else the one-line reason it cannot."""
        return None

    @abstractmethod
    def start(self, profile: str, settings: Settings) -> None: ...

    @abstractmethod
    def stop(self) -> None: ...

    def client(self) -> AckClient:
        raise NotImplementedError(f"{self.label} has no in-process client")

    def pids(self) -> dict[str, int]:
        """Process name → PID of the system's processes (for CPU accounting)."""
        return {}

    def next_rid_base(self) -> int:
        self._rid_base += 1 << 32
        return self._rid_base

    def saturation(self, size: int, s: Settings) -> dict[str, Any]:
        return run_saturation(
            self.client(), payload_of(size), s.window, s.warmup_s, s.duration_s, rid_base=self.next_rid_base()
        )

    def paced(self, size: int, rate: float, s: Settings) -> dict[str, Any]:
        return run_paced(
            self.client(), payload_of(size), rate, s.warmup_s, s.latency_duration_s, rid_base=self.next_rid_base()
        )

    # failover
    def await_stable(self, timeout_s: float) -> None:
        raise NotImplementedError(f"{self.label} does not measure failover")

    def kill_leader(self) -> tuple[Any, float]:
        """SIGKILL the leader; (member, monotonic time just before the kill)."""
        raise NotImplementedError(f"{self.label} does not measure failover")

    def probe(self, s: Settings) -> float | None:
        """Monotonic time of the first op acknowledged after the kill (None: none in time)."""
        result = run_probe(self.client(), payload_of(LATENCY_SIZE), s.probe_interval_s, s.probe_timeout_s)
        return result["first_ack"]

    def restart(self, member: Any) -> None:
        raise NotImplementedError(f"{self.label} does not measure failover")

    def leader_seen_at(self) -> float | None:
        """Monotonic time the client first saw the new leader after the last :meth:`kill_leader`
        (clusterlab: the NewLeaderEvent); None where the client cannot tell."""
        return None

    supports_follower_restart = False
    supports_request_probe = False

    def request_probe(self, s: Settings) -> tuple[float | None, float | None]:
        """One blocking-style request started right after the kill: (time of its reply, time the client
        followed the new leader); see ClusterlabSubject."""
        raise NotImplementedError

    def follower_restart_stall(
        self, s: Settings, rate: float, say: Callable[[str], None], victim: str = "follower"
    ) -> dict[str, Any]:
        """Kill a follower (or the leader) under load, restart it, let it catch up: the longest gaps
        between acks."""
        raise NotImplementedError(f"{self.label} does not measure the follower-restart stall")


class PySyncObjSubject(Subject):
    """Three ``benchmarks.peers.pysyncobj_node`` processes on 127.0.0.1, OS-picked ports."""

    key = REF_PYSYNCOBJ
    label = "PySyncObj"

    def __init__(self, nobatch: bool = False) -> None:
        super().__init__()
        self.nobatch = nobatch
        if nobatch:  # the latency-leaning setting: measured for load only (same timeouts as default)
            self.key = "pysyncobj-nobatch"
            self.label = "PySyncObj (no batching)"
            self.supports_failover = False
        self.group = ProcessGroup()
        self.nodes: list[NodeProcess] = []
        self.addrs: list[str] = []
        self.controls: list[str] = []
        self.tmp: Path | None = None
        self.settle_timeout_s = 30.0

    def availability(self) -> str | None:
        try:
            import pysyncobj  # noqa: F401
        except ImportError:
            return "pysyncobj is not installed (pip install -e '.[bench]')"
        return None

    def start(self, profile: str, settings: Settings) -> None:
        self.settle_timeout_s = settings.settle_timeout_s
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-pysyncobj-"))
        # Ascending address order, started in that order: in PySyncObj the node with the greater
        # address dials the smaller, so each dial finds its peer already bound (a failed first dial
        # waits connectionRetryTime, 5 s, before the next).
        self.addrs = sorted(f"127.0.0.1:{p}" for p in free_ports(3))
        self.group = ProcessGroup()
        self.nodes = []
        for i, addr in enumerate(self.addrs):
            partners = ",".join(a for a in self.addrs if a != addr)
            conf = "nobatch" if self.nobatch and profile == "default" else profile
            args = ["--self", addr, "--partners", partners, "--profile", conf]
            self.nodes.append(
                self.group.add(
                    NodeProcess(f"pysyncobj-{profile}-{i}", "benchmarks.peers.pysyncobj_node", args, self.tmp)
                )
            )
        self.controls = [n.start()["control"] for n in self.nodes]
        self.await_stable(settings.settle_timeout_s)

    def stop(self) -> None:
        self.group.stop_all()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None

    def pids(self) -> dict[str, int]:
        return {n.name: n.pid for n in self.nodes if n.alive() and n.pid is not None}

    def statuses(self) -> list[dict[str, Any] | None]:
        live = [i for i, n in enumerate(self.nodes) if n.alive()]
        replies = control_many([(self.controls[i], {"cmd": "status"}) for i in live], timeout_s=2.0)
        out: list[dict[str, Any] | None] = [None] * len(self.nodes)
        for i, r in zip(live, replies, strict=True):
            out[i] = r
        return out

    def leader(self) -> int | None:
        """The member every live node names as leader, by PySyncObj's status API; None if they differ."""
        st = [s for s in self.statuses() if s is not None]
        leaders = {s["leader"] for s in st}
        if len(leaders) != 1 or None in leaders:
            return None
        addr = leaders.pop()
        return self.addrs.index(addr) if addr in self.addrs else None

    def await_stable(self, timeout_s: float) -> None:
        """All three up, agreeing on one leader, each connected to both partners, all caught up.

        Every link must be up: a killed node that restarts with the lower address waits for its
        partner to reconnect (``connectionRetryTime``, 5 s by default), and a kill before that would
        leave the survivors unconnected and measure the reconnect instead of the election.
        """
        deadline = time.monotonic() + timeout_s
        last: list[dict[str, Any] | None] = []
        while time.monotonic() < deadline:
            last = self.statuses()
            if all(s is not None for s in last):
                leaders = {s["leader"] for s in last if s is not None}
                if len(leaders) == 1 and None not in leaders:
                    lead = last[self.addrs.index(next(iter(leaders)))]
                    if (
                        lead is not None
                        and lead["state"] == 2
                        and all(
                            s is not None and s["ready"] and s["has_quorum"] and s["partners_connected"] == 2
                            for s in last
                        )
                    ):
                        return
            time.sleep(0.05)
        raise TimeoutError(f"PySyncObj did not settle in {timeout_s:.0f} s: {last}")

    def _on_leader(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        leader = self.leader()
        if leader is None:
            # A follower that fell behind during a saturation run (on a busy machine it can miss
            # heartbeats and campaign) needs time to rejoin and catch up: the settle timeout, as
            # everywhere else, not a fixed 10 s that would fail the whole system's load phase.
            self.await_stable(self.settle_timeout_s)
            leader = self.leader()
        assert leader is not None
        return control(self.controls[leader], request, timeout_s=timeout_s)

    def saturation(self, size: int, s: Settings) -> dict[str, Any]:
        req = {"cmd": "saturation", "size": size, "window": s.window, "warmup": s.warmup_s, "duration": s.duration_s}
        return self._on_leader(req, s.warmup_s + s.duration_s + 15.0)

    def paced(self, size: int, rate: float, s: Settings) -> dict[str, Any]:
        req = {"cmd": "paced", "size": size, "rate": rate, "warmup": s.warmup_s, "duration": s.latency_duration_s}
        return self._on_leader(req, s.warmup_s + s.latency_duration_s + 15.0)

    def kill_leader(self) -> tuple[Any, float]:
        leader = self.leader()
        if leader is None:
            raise RuntimeError("no agreed leader to kill")
        t_kill = time.monotonic()
        self.nodes[leader].kill()
        return leader, t_kill

    def probe(self, s: Settings) -> float | None:
        live = [i for i, n in enumerate(self.nodes) if n.alive()]
        req = {"cmd": "probe", "size": LATENCY_SIZE, "interval": s.probe_interval_s, "timeout": s.probe_timeout_s}
        replies = control_many([(self.controls[i], req) for i in live], timeout_s=s.probe_timeout_s + 5.0)
        acks = [r["first_ack"] for r in replies if r is not None and r.get("first_ack") is not None]
        return min(acks) if acks else None

    def restart(self, member: Any) -> None:
        self.controls[member] = self.nodes[member].start()["control"]


class RawZmqSubject(Subject):
    """``benchmarks.peers.raw_zmq``: one leader, two followers, file appends, quorum ack, no protocol."""

    key = REF_RAW
    label = "raw ZeroMQ bound"
    supports_failover = False

    def __init__(self) -> None:
        super().__init__()
        self.group = ProcessGroup()
        self.tmp: Path | None = None
        self._client: Any = None

    def start(self, profile: str, settings: Settings) -> None:
        from benchmarks.peers.raw_zmq import RawZmqClient

        self.tmp = Path(tempfile.mkdtemp(prefix="bench-rawzmq-"))
        self.group = ProcessGroup()
        module = "benchmarks.peers.raw_zmq"
        leader = self.group.add(NodeProcess("raw-leader", module, ["leader", "--dir", str(self.tmp)], self.tmp))
        info = leader.start()
        for i in (1, 2):
            args = ["follower", "--dir", str(self.tmp), "--id", str(i), "--leader", info["followers"]]
            self.group.add(NodeProcess(f"raw-follower-{i}", module, args, self.tmp)).start()
        self._client = RawZmqClient(info["client"])
        deadline = time.monotonic() + settings.settle_timeout_s
        while self._client.followers() < 2:
            if time.monotonic() > deadline:
                raise TimeoutError("raw bound: the followers did not say hello")
            time.sleep(0.05)

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        self.group.stop_all()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None

    def client(self) -> AckClient:
        return self._client

    def pids(self) -> dict[str, int]:
        return {p.name: p.pid for p in self.group.procs if p.alive() and p.pid is not None}


class ClusterlabSubject(Subject):
    """clusterlab's real runtime through ``clusterlab.harness.local.LocalCluster`` — the one place to adapt.

    Written against the LocalCluster API as it stands (the runtime is being built in parallel)::

        with LocalCluster(members=3, service="kv", timeouts=Timeouts(...)) as c:   # waits for a leader
            c.await_leader(); c.leader_id(); c.kill(m); c.restart(m); c.running_pids()
            lc = c.client()            # LocalClient: put(key, value); lc.connect(); lc.conn (ClusterConnection)
            lc.conn.offer(bytes); lc.conn.pump(timeout_s); lc.conn.take_messages()  # the pipelined path

    Ops are KV ``put`` commands (``clusterlab.harness.services.kv``) padded to the payload size; the service's
    reply carrying the op's id acknowledges it (the service answers committed entries only).
    "default" timeouts are LocalCluster's own (``Timeouts.fast()``: leader heartbeat timeout 1 s);
    "fast" sets ~100 ms detection, like PySyncObj's fast profile. Recording off/on: LocalCluster's
    ``record`` switch (the Arrow trace of clusterlab.harness.recorder; on by default).
    """

    supports_failover = True
    # ~100 ms detection, as PySyncObj's "fast" profile (election timeout 0.1-0.2 s, which is its failure
    # detection). Our detection is the leader heartbeat timeout (100 ms, no more than PySyncObj's); the
    # election timeout is a separate timer in Aeron: the random nomination delay (up to half of it) and
    # the ballot, which with a member dead cannot be unanimous and so always lasts the whole timeout
    # (Aeron's CANDIDATE_BALLOT; a Raft candidate wins at a majority). 40 ms keeps both short without
    # being shorter than a few status intervals.
    FAST_TIMEOUTS_NS = {
        "leader_heartbeat_timeout_ns": 100_000_000,
        "leader_heartbeat_interval_ns": 20_000_000,
        "election_timeout_ns": 40_000_000,
        "election_status_interval_ns": 10_000_000,
    }

    def __init__(self, recording: bool, secure: bool = False, member_process: str = "split") -> None:
        super().__init__()
        self.recording = recording
        self.secure = secure  # CURVE + ZAP on every socket and client credentials (runtime.security)
        self.member_process = member_process  # LocalCluster's: "split" (node + service processes) or "single"
        single = member_process == "single"
        self.key = (
            f"clusterlab-rec-{'on' if recording else 'off'}{'-auth' if secure else ''}{'-single' if single else ''}"
        )
        self.label = (
            f"clusterlab (recording {'on' if recording else 'off'}{', auth on' if secure else ''}"
            f"{', one process per member' if single else ''})"
        )
        self.cluster: Any = None
        self._client: _ClusterlabClient | None = None

    def availability(self) -> str | None:
        try:
            from clusterlab.harness.local import LocalCluster  # noqa: F401
        except ImportError:
            return "runtime not available yet"
        return None

    def _timeouts(self, profile: str) -> Any:
        if profile == "default":
            return None
        from clusterlab.core.consensus.context import Timeouts

        return dataclasses.replace(Timeouts.fast(), **self.FAST_TIMEOUTS_NS)

    def start(self, profile: str, settings: Settings) -> None:
        from clusterlab.harness.local import LocalCluster

        kwargs: dict[str, Any] = {"members": 3, "service": "kv", "timeouts": self._timeouts(profile)}
        if self.secure:
            kwargs["secure"] = True
        if self.member_process != "split":
            kwargs["member_process"] = self.member_process
        if "record" in inspect.signature(LocalCluster).parameters:
            kwargs["record"] = self.recording
        elif not self.recording:
            raise Unavailable("LocalCluster has no recording switch yet (it always records)")
        cluster = LocalCluster(**kwargs)
        self.cluster = cluster.__enter__()  # starts the processes and waits for a leader
        try:
            self._client = _ClusterlabClient(self.cluster.client())
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self.cluster is not None:
            cluster, self.cluster = self.cluster, None
            cluster.__exit__(None, None, None)

    def client(self) -> AckClient:
        assert self._client is not None
        return self._client

    def pids(self) -> dict[str, int]:
        if self.cluster is None:
            return {}
        return {f"clusterlab pid {pid}": pid for pid in self.cluster.running_pids()}

    def await_stable(self, timeout_s: float) -> None:
        """A leader, and every member (node and service) up and caught up with it — the same bar as
        PySyncObj's (all three up, connected, caught up): a kill before a restarted member's service
        is up would measure its start-up, not the election."""
        self.cluster.await_leader(timeout_s=timeout_s)
        self.cluster.await_condition(lambda: self.cluster.caught_up() is not None, timeout_s, "all members caught up")

    def kill_leader(self) -> tuple[Any, float]:
        leader = self.cluster.leader_id()
        if leader is None:
            raise RuntimeError("no leader to kill")
        if self._client is not None:
            self._client.mark_leader()
        t_kill = time.monotonic()
        self.cluster.kill(leader)
        return leader, t_kill

    def restart(self, member: Any) -> None:
        self.cluster.restart(member)

    def leader_seen_at(self) -> float | None:
        return None if self._client is None else self._client.leader_changed_at

    supports_follower_restart = True
    supports_request_probe = True

    def request_probe(self, s: Settings) -> tuple[float | None, float | None]:
        """The LocalClient's request (as the chaos workloads and ``clusterlab client`` use it) started
        right after the kill, so its first send goes to the dead leader: it is answered after the
        client's resend, which is on NewLeaderEvent (ClusterClient's outstanding requests) or, without
        that, its ``attempt_timeout_s`` timer. Returns (reply time, time the client followed the new
        leader)."""
        assert self._client is not None
        client = self._client
        lc = client.lc
        rid, payload = lc.begin(lambda r: client.kv.put(r, "failover", "x", prev=False))
        sent_at = time.monotonic()
        deadline = sent_at + s.probe_timeout_s
        attempts = 1
        while time.monotonic() < deadline:
            lc.conn.pump(0.002)
            now = time.monotonic()
            client.note_leader(now)
            if lc.take_reply(rid) is not None:
                return now, client.leader_changed_at
            if now - sent_at >= lc.attempt_timeout_s:  # LocalClient.request's own resend timer
                lc.resend(payload, reconnect=attempts % 2 == 0)
                attempts += 1
                sent_at = now
        return None, client.leader_changed_at

    def follower_restart_stall(
        self, s: Settings, rate: float, say: Callable[[str], None], victim: str = "follower"
    ) -> dict[str, Any]:
        """Open-loop 64 B puts at ``rate`` from a thread that owns the client, while this thread kills a
        follower, waits ``follower_down_s``, restarts it and waits until every member (node and
        service) is caught up. Reported: the longest gap between two acknowledgements in each phase
        (steady state before the kill, follower down, restart → caught up + 1 s), and how long the
        catch-up took. A gap in the steady phase is this machine's noise floor."""
        import threading

        assert self._client is not None
        cluster, client = self.cluster, self._client
        self.await_stable(s.settle_timeout_s)
        acks: list[float] = []
        failed = [0]
        given_up = [0]
        stop = threading.Event()
        payload = payload_of(LATENCY_SIZE)

        def load() -> None:
            interval = 1.0 / rate
            start = time.monotonic()
            n = 0
            outstanding: set[int] = set()
            sent_order: collections.deque[int] = collections.deque()
            while not stop.is_set():
                now = time.monotonic()
                due = int((now - start) * rate) + 1
                while n < due:
                    if len(outstanding) >= STALL_WINDOW:
                        # Full: the oldest are requests the dead leader took with it (this client does
                        # not resend them); give them up so the open loop goes on offering.
                        while len(outstanding) >= STALL_WINDOW:
                            old = sent_order.popleft()
                            if old in outstanding:
                                outstanding.discard(old)
                                given_up[0] += 1
                    n += 1
                    rid = (1 << 41) + n
                    if client.offer(rid, payload):
                        outstanding.add(rid)
                        sent_order.append(rid)
                while sent_order and sent_order[0] not in outstanding:
                    sent_order.popleft()  # acknowledged: keep the deque as short as the window
                acked, bad = client.poll(max(0.0, min(start + n * interval - time.monotonic(), 0.002)))
                t = time.monotonic()
                for r in acked:
                    if r in outstanding:
                        outstanding.discard(r)
                        acks.append(t)
                failed[0] += len(bad)

        # The load thread owns the client: keep the cluster's own waits from pumping it meanwhile.
        owned = [c for c in cluster.clients if c is client.lc]
        for c in owned:
            cluster.clients.remove(c)
        thread = threading.Thread(target=load, name="stall-load", daemon=True)
        marks: dict[str, float] = {}
        try:
            thread.start()
            time.sleep(2.0)  # steady state: the noise floor (the load thread measures, this one waits)
            leader = cluster.leader_id()
            follower = leader if victim == "leader" else next(i for i in range(cluster.member_count) if i != leader)
            marks["kill"] = time.monotonic()
            cluster.kill(follower)
            time.sleep(s.follower_down_s)  # the member misses this much of the log
            marks["restart"] = time.monotonic()
            if victim == "leader":
                leader = cluster.leader_id()
            leader_status = cluster.status(leader) if leader is not None else None
            backlog_end = leader_status.commit_position if leader_status is not None else 0
            cluster.restart(follower)
            deadline = time.monotonic() + s.settle_timeout_s

            def caught_up() -> bool:
                # Has the log committed while it was down (traffic goes on, so positions never settle).
                st = cluster.status(follower)
                if st is None or st.election_state is not None or st.append_position < backlog_end:
                    return False
                service = cluster.service_status(follower)
                return service is not None and service.log_position >= backlog_end

            while not caught_up() and time.monotonic() < deadline:
                time.sleep(0.02)
            marks["caught_up"] = time.monotonic()
            time.sleep(1.0)
            marks["end"] = time.monotonic()
        finally:
            stop.set()
            thread.join(10.0)
            cluster.clients.extend(owned)

        def longest_gap(a: float, b: float) -> float | None:
            ts = [a] + [t for t in acks if a <= t <= b] + [b]
            return round(max(y - x for x, y in itertools.pairwise(ts)) * 1000, 1) if len(ts) > 2 else None

        t0 = acks[0] if acks else marks["kill"] - 2.0
        out = {
            "victim": victim,
            "offered_rate": round(rate, 1),
            "follower_down_s": s.follower_down_s,
            "acked": len(acks),
            "failed": failed[0],
            "given_up": given_up[0],
            "steady_max_gap_ms": longest_gap(t0 + 0.5, marks["kill"]),
            "follower_down_max_gap_ms": longest_gap(marks["kill"], marks["restart"]),
            "catchup_max_gap_ms": longest_gap(marks["restart"], marks["end"]),
            "restart_to_caught_up_ms": round((marks["caught_up"] - marks["restart"]) * 1000, 1),
            "caught_up": marks["caught_up"] < deadline,
            "loadavg": [round(x, 2) for x in os.getloadavg()],
        }
        say(
            f"  {victim} restart @ {rate:,.0f}/s: longest gap without an ack: steady {out['steady_max_gap_ms']} ms, "
            f"{victim} down {out['follower_down_max_gap_ms']} ms, restart → caught up + 1 s "
            f"{out['catchup_max_gap_ms']} ms (caught up in {out['restart_to_caught_up_ms']} ms; "
            f"{out['given_up']} requests given up)"
        )
        return out


# Requests the catch-up stall's open loop keeps outstanding; the oldest are given up beyond it (lost
# with a killed leader: this client does not resend).
STALL_WINDOW = 50_000


class _ClusterlabClient:
    """:class:`benchmarks.peers.common.AckClient` over a LocalCluster ``LocalClient`` (KV puts)."""

    def __init__(self, local_client: Any) -> None:
        from clusterlab.core.client.errors import ClientError
        from clusterlab.harness.services import kv

        self.ClientError = ClientError
        self.lc = local_client
        self.conn = local_client.conn
        self.cc = local_client.conn.client  # the ClusterClient (the same object across reconnects)
        self.kv = kv
        self._pad: dict[tuple[int, int], str] = {}
        self._leader: tuple[int, int] | None = None
        self.leader_changed_at: float | None = None

    def mark_leader(self) -> None:
        """Remember the leader the client follows now; :attr:`leader_changed_at` becomes the time it
        first follows another (a NewLeaderEvent, or a new session with another leader)."""
        self._leader = (self.cc.leadership_term_id, self.cc.leader_member_id)
        self.leader_changed_at = None

    def _put(self, rid: int, size: int) -> bytes:
        key = f"k{rid % 256}"
        shape = (len(str(rid)), size)
        pad = self._pad.get(shape)
        if pad is None:
            pad = "x" * max(0, size - len(self.kv.put(rid, key, "", prev=False)))
            self._pad[shape] = pad
        # prev=False: the reply carries no value, as PySyncObj's put and the raw bound's ack do not
        # (otherwise every 1 KiB put would send its 1 KiB predecessor back to the client).
        return self.kv.put(rid, key, pad, prev=False)

    def offer(self, rid: int, payload: bytes) -> bool:
        try:
            if not self.cc.is_connected:
                self.lc.connect(timeout_s=0.05)  # a session lost with its leader: open a new one
            self.conn.offer(self._put(rid, len(payload)))
        except (self.ClientError, AssertionError, TimeoutError):
            return False
        return True

    def note_leader(self, now: float) -> None:
        """Set :attr:`leader_changed_at` if the client follows another leader than the marked one."""
        if (
            self.leader_changed_at is None
            and self._leader is not None
            and self.cc.is_connected
            and (self.cc.leadership_term_id, self.cc.leader_member_id) != self._leader
        ):
            self.leader_changed_at = now

    def poll(self, timeout_s: float) -> tuple[list[int], list[int]]:
        self.conn.pump(timeout_s)
        self.note_leader(time.monotonic())
        acked: list[int] = []
        bad: list[int] = []
        for m in self.conn.take_messages():
            try:
                rid, error = self.kv.reply_outcome(m.payload)
            except (ValueError, UnicodeDecodeError):
                continue
            if isinstance(rid, int):
                (bad if error else acked).append(rid)
        return acked, bad

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.lc.close()


# ------------------------------------------------------------------------------------------ measuring


MACHINE = "machine (all processes)"
OTHERS = "other processes (not this benchmark)"


def _machine_busy_seconds() -> float | None:
    """CPU seconds the whole machine has been busy (all cores, /proc/stat), None if unreadable."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / CLK_TCK


def _cpu(subject: Subject) -> dict[str, float | None]:
    out: dict[str, float | None] = {name: proc_cpu_seconds(pid) for name, pid in subject.pids().items()}
    out["bench (client)"] = time.process_time()
    out[MACHINE] = _machine_busy_seconds()
    return out


def _cpu_delta(before: dict[str, float | None], after: dict[str, float | None], wall: float) -> dict[str, float]:
    """CPU used per process over ``wall`` seconds, in cores; plus the machine's and everyone else's.

    "other processes" is what the machine was busy with beyond this benchmark's processes: on a
    shared 2-core machine it says how much of a figure is contention.
    """
    out = {}
    for name, b in before.items():
        a = after.get(name)
        if a is not None and b is not None and wall > 0:
            out[name] = round((a - b) / wall, 2)
    if MACHINE in out:
        ours = sum(v for k, v in out.items() if k != MACHINE)
        out[OTHERS] = round(max(0.0, out[MACHINE] - ours), 2)
    return out


def _system_us_per_op(cpu: dict[str, float], wall: float, ops: int | None) -> float | None:
    """CPU µs per offered op of the system's own processes (not this process's client, not the rest of
    the machine) from :func:`_cpu_delta`'s cores over ``wall`` seconds. PySyncObj and the raw bound
    generate their paced load inside their leader process, so theirs includes the load generator."""
    if not ops:
        return None
    cores = sum(v for k, v in cpu.items() if k not in ("bench (client)", MACHINE, OTHERS))
    return round(cores * wall / ops * 1e6, 1)


def measure_load(subject: Subject, s: Settings, common_rate: float | None, say: Callable[[str], None]) -> dict:
    result: dict[str, Any] = {"saturation": {}, "cpu_cores_at_saturation": {}}
    for size in PAYLOAD_SIZES:
        before, t0 = _cpu(subject), time.monotonic()
        sat = subject.saturation(size, s)
        cpu = _cpu_delta(before, _cpu(subject), time.monotonic() - t0)
        result.setdefault("cpu_cores_at_saturation", {})[str(size)] = cpu
        result["saturation"][str(size)] = sat
        say(
            f"  saturation {size:>5} B: {sat['ops_per_s']:>10,.0f} ops/s"
            f"  ({sat['acked']} acked, {sat['failed']} failed; cores: "
            + ", ".join(f"{k} {v}" for k, v in cpu.items() if k != MACHINE)
            + ")"
        )
    own = result["saturation"][str(LATENCY_SIZE)]["ops_per_s"] * s.latency_fraction
    rates = {"own": own, "low": s.low_rate}
    if common_rate is not None:
        rates["common"] = common_rate
    for which, rate in rates.items():
        if rate <= 0:
            continue
        if rate > own / s.latency_fraction:
            result[f"latency_{which}"] = {
                "offered_rate": rate,
                "skipped": "offered rate above this system's saturation",
            }
            say(f"  latency @ {rate:>9,.0f}/s ({which}): skipped, above this system's saturation")
            continue
        before, t0 = _cpu(subject), time.monotonic()
        lat = subject.paced(LATENCY_SIZE, rate, s)
        wall = time.monotonic() - t0
        cpu = _cpu_delta(before, _cpu(subject), wall)
        lat["cpu_cores"] = cpu
        lat["system_cpu_us_per_op"] = _system_us_per_op(cpu, wall, lat.get("offered_total"))
        result[f"latency_{which}"] = lat
        say(
            f"  latency @ {rate:>9,.0f}/s ({which}): p50 {lat['p50_ms']} ms  p99 {lat['p99_ms']} ms  "
            f"p99.9 {lat['p999_ms']} ms  (n={lat['n']}, lost {lat['lost_or_late']}; "
            f"{lat['system_cpu_us_per_op']} CPU us/op)"
        )
    return result


def measure_failover(subject: Subject, profile: str, s: Settings, say: Callable[[str], None]) -> dict[str, Any]:
    samples: list[float] = []
    to_leader: list[float] = []  # kill -> the client follows the new leader
    after_leader: list[float] = []  # the client follows the new leader -> first ack
    request_samples: list[float] = []  # kill -> reply to a request first sent to the dead leader
    request_after_leader: list[float] = []  # the client follows the new leader -> that reply
    misses = 0
    t0 = time.monotonic()
    load_before = os.getloadavg()[0]
    subject.start(profile, s)
    try:
        for i in range(s.kills):
            subject.await_stable(s.settle_timeout_s)
            member, t_kill = subject.kill_leader()
            if subject.supports_request_probe and i % 2 == 1:
                reply_at, seen = subject.request_probe(s)
                if reply_at is not None:
                    request_samples.append(reply_at - t_kill)
                    if seen is not None:
                        request_after_leader.append(reply_at - seen)
                if i + 1 < s.kills:
                    subject.restart(member)
                continue
            first_ack = subject.probe(s)
            if first_ack is None:
                misses += 1
                say(f"  kill {i + 1}: member {member}: no acknowledged op within {s.probe_timeout_s:.0f} s")
            else:
                samples.append(first_ack - t_kill)
                seen = subject.leader_seen_at()
                if seen is not None:
                    to_leader.append(seen - t_kill)
                    after_leader.append(first_ack - seen)
            if i + 1 < s.kills:  # the last one needs no restart: the cluster stops next
                subject.restart(member)
    finally:
        subject.stop()
    out: dict[str, Any] = {"kills": s.kills, "no_ack": misses, "wall_s": round(time.monotonic() - t0, 1)}
    out["loadavg"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]  # 1-min load before and after
    out["samples_ms"] = [round(x * 1000, 1) for x in samples]
    if to_leader:
        # Failover as the client sees it: fault -> new leader (NewLeaderEvent) -> first acknowledged op.
        out["new_leader_ms"] = [round(x * 1000, 1) for x in to_leader]
        out["ack_after_new_leader_ms"] = [round(x * 1000, 1) for x in after_leader]
        out["median_new_leader_ms"] = round(statistics.median(to_leader) * 1000, 1)
        out["median_ack_after_new_leader_ms"] = round(statistics.median(after_leader) * 1000, 1)
        out["max_ack_after_new_leader_ms"] = round(max(after_leader) * 1000, 1)
    if request_samples:
        out["request_ms"] = [round(x * 1000, 1) for x in request_samples]
        out["median_request_ms"] = round(statistics.median(request_samples) * 1000, 1)
    if request_after_leader:
        out["request_after_new_leader_ms"] = [round(x * 1000, 1) for x in request_after_leader]
        out["median_request_after_new_leader_ms"] = round(statistics.median(request_after_leader) * 1000, 1)
    if samples:
        xs = sorted(samples)
        out.update(
            median_ms=round(statistics.median(xs) * 1000, 1),
            mean_ms=round(statistics.fmean(xs) * 1000, 1),
            min_ms=round(xs[0] * 1000, 1),
            max_ms=round(xs[-1] * 1000, 1),
        )
    say(
        f"  failover ({PROFILE_LABEL[profile]}): median {out.get('median_ms')} ms"
        f" over {len(samples)} kills, ms: {out['samples_ms']}"
        + (
            f"; new leader (client) median {out['median_new_leader_ms']} ms, then first ack median "
            f"{out['median_ack_after_new_leader_ms']} ms (max {out['max_ack_after_new_leader_ms']} ms)"
            if to_leader
            else ""
        )
        + (
            f"; a request sent to the dead leader: answered {out['request_ms']} ms after the kill, "
            f"{out.get('request_after_new_leader_ms')} ms after the client followed the new leader"
            if request_samples
            else ""
        )
        + f"; load {out['loadavg']}"
    )
    return out


def run_subject(subject: Subject, s: Settings, common_rate: float | None, say: Callable[[str], None]) -> dict:
    result: dict[str, Any] = {"label": subject.label, "status": "ok"}
    result["loadavg_at_start"] = [round(x, 2) for x in os.getloadavg()]
    subject.start("default", s)
    try:
        result.update(measure_load(subject, s, common_rate, say))
        result["loadavg_after_load"] = [round(x, 2) for x in os.getloadavg()]
    finally:
        subject.stop()
    if subject.supports_follower_restart and s.kills > 0:
        # At least 500/s: a saturation run that acknowledged nothing (a stalled machine) still gets a load.
        rate = max(500.0, result["saturation"][str(LATENCY_SIZE)]["ops_per_s"] * s.stall_load_fraction)
        for victim in ("follower", "leader"):
            subject.start("default", s)
            try:
                key = "follower_restart" if victim == "follower" else "leader_restart"
                result[key] = subject.follower_restart_stall(s, rate, say, victim)
            finally:
                subject.stop()
    if subject.supports_failover and s.kills > 0:
        result["failover"] = {}
        for p in PROFILES:
            try:
                result["failover"][p] = measure_failover(subject, p, s, say)
            except Exception as e:  # keep the load figures: a system that did not settle fails this part only
                subject.stop()
                say(f"  failover ({PROFILE_LABEL[p]}) failed: {type(e).__name__}: {str(e)[:300]}")
                result["failover"][p] = {"status": f"failed: {type(e).__name__}: {str(e)[:300]}"}
    return result


# ------------------------------------------------------------------------------------------ reporting

Metric = tuple[str, Callable[[dict], float | None], bool]  # header, getter, higher is better


def _get(d: dict, *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d


METRICS: list[Metric] = [
    ("ops/s 64 B", lambda r: _get(r, "saturation", "64", "ops_per_s"), True),
    ("ops/s 1 KiB", lambda r: _get(r, "saturation", "1024", "ops_per_s"), True),
    ("p50 ms", lambda r: _get(r, "latency_common", "p50_ms"), False),
    ("p99 ms", lambda r: _get(r, "latency_common", "p99_ms"), False),
    ("p99.9 ms", lambda r: _get(r, "latency_common", "p999_ms"), False),
    ("p99 ms @1k/s", lambda r: _get(r, "latency_low", "p99_ms"), False),
    ("p99 ms @50% own", lambda r: _get(r, "latency_own", "p99_ms"), False),
    ("CPU µs/op @1k/s", lambda r: _get(r, "latency_low", "system_cpu_us_per_op"), False),
    ("CPU µs/op @50% own", lambda r: _get(r, "latency_own", "system_cpu_us_per_op"), False),
    ("failover ms (default)", lambda r: _get(r, "failover", "default", "median_ms"), False),
    ("failover ms (~100 ms)", lambda r: _get(r, "failover", "fast", "median_ms"), False),
    ("→ new leader ms (~100 ms)", lambda r: _get(r, "failover", "fast", "median_new_leader_ms"), False),
    (
        "new leader → 1st ack ms (~100 ms)",
        lambda r: _get(r, "failover", "fast", "median_ack_after_new_leader_ms"),
        False,
    ),
    (
        "new leader → 1st ack ms (default)",
        lambda r: _get(r, "failover", "default", "median_ack_after_new_leader_ms"),
        False,
    ),
    ("request → reply ms (~100 ms)", lambda r: _get(r, "failover", "fast", "median_request_ms"), False),
    (
        "new leader → request reply ms (~100 ms)",
        lambda r: _get(r, "failover", "fast", "median_request_after_new_leader_ms"),
        False,
    ),
    ("longest stall ms, steady", lambda r: _get(r, "follower_restart", "steady_max_gap_ms"), False),
    ("longest stall ms, follower catch-up", lambda r: _get(r, "follower_restart", "catchup_max_gap_ms"), False),
    ("longest stall ms, old leader catch-up", lambda r: _get(r, "leader_restart", "catchup_max_gap_ms"), False),
]
REC_ON, REC_OFF = "clusterlab-rec-on", "clusterlab-rec-off"


def ratios(systems: dict[str, dict]) -> dict[str, dict[str, dict[str, float | None]]]:
    """value(system) / value(reference) for every metric, against PySyncObj and the raw bound."""
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for ref in (REF_PYSYNCOBJ, REF_RAW):
        base = systems.get(ref)
        if not base or base.get("status") != "ok":
            continue
        for key, r in systems.items():
            if key == ref or r.get("status") != "ok":
                continue
            row = {}
            for header, get, _higher in METRICS:
                a, b = get(r), get(base)
                row[header] = round(a / b, 2) if a is not None and b else None
            out.setdefault(key, {})[f"vs_{ref}"] = row
    on, off = systems.get(REC_ON), systems.get(REC_OFF)
    if on and off and on.get("status") == "ok" and off.get("status") == "ok":
        # The cost of recording, same run: rec. on ÷ rec. off (target ≥ 0.85 at saturation).
        row = {}
        for header, get, _higher in METRICS:
            a, b = get(on), get(off)
            row[header] = round(a / b, 2) if a is not None and b else None
        out.setdefault(REC_ON, {})[f"vs_{REC_OFF}"] = row
    for key, single in systems.items():  # a member in one process ÷ the same system split in two
        split = systems.get(key.removesuffix("-single"))
        if not key.endswith("-single") or not split or single.get("status") != "ok" or split.get("status") != "ok":
            continue
        row = {}
        for header, get, _higher in METRICS:
            a, b = get(single), get(split)
            row[header] = round(a / b, 2) if a is not None and b else None
        out.setdefault(key, {})[f"vs_{key.removesuffix('-single')}"] = row
    return out


def _fmt(v: float | None, ms: bool) -> str:
    if v is None:
        return "—"
    return f"{v:,.1f}" if ms else f"{v:,.0f}"


def print_tables(doc: dict) -> None:
    """Two tables, metrics down and systems across: the figures, then the ratios."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(110, shutil.get_terminal_size((160, 24)).columns))
    systems = doc["systems"]
    rate = doc.get("common_rate")
    ok = {k: r for k, r in systems.items() if r.get("status") == "ok"}
    title = "3-member clusters, same run, same driver"
    if rate:
        title += f"; p50/p99/p99.9: 64 B at {rate:,.0f} ops/s offered to every system"
    t = Table(title=title)
    t.add_column("metric")
    for r in ok.values():
        t.add_column(r["label"], justify="right")
    for header, get, _higher in METRICS:
        cells = []
        for r in ok.values():
            if header.startswith("p") and "@" not in header and _get(r, "latency_common", "skipped"):
                cells.append("[dim]> saturation[/dim]")
            else:
                cells.append(_fmt(get(r), "ops/s" not in header))
        t.add_row(header, *cells)
    console.print(t)
    for r in systems.values():
        if r.get("status") != "ok":
            console.print(f"{r['label']}: {r['status']}")
    # clusterlab against both references, and PySyncObj against the bound (the JSON has every pair)
    pairs = [
        (key, ref)
        for key, refs in doc["ratios"].items()
        for ref in refs
        if key.startswith("clusterlab") or (key == REF_PYSYNCOBJ and ref == f"vs_{REF_RAW}")
    ]
    if not pairs:
        return
    rt = Table(title="ratios: system ÷ reference (ops/s: higher is better; ms: lower is better)")
    rt.add_column("metric")
    for key, ref in pairs:
        rt.add_column(f"{systems[key]['label']} ÷ {systems[ref.removeprefix('vs_')]['label']}", justify="right")
    for header, *_rest in METRICS:
        cells = []
        for key, ref in pairs:
            v = doc["ratios"][key][ref][header]
            cells.append("—" if v is None else f"x{v:.2f}")
        rt.add_row(header, *cells)
    console.print(rt)


MEMBER_PROCESS_CHOICES = {"split": ("split",), "single": ("single",), "both": ("split", "single")}


def build_subjects(names: list[str], member_processes: tuple[str, ...] = ("split",)) -> list[Subject]:
    """The subjects of ``names``; clusterlab's once per member-process mode (``split``, ``single``)."""
    out: list[Subject] = []
    for n in names:
        if n == "pysyncobj":
            out.append(PySyncObjSubject())
        elif n == "pysyncobj-nobatch":
            out.append(PySyncObjSubject(nobatch=True))
        elif n == "raw":
            out.append(RawZmqSubject())
        elif n == "clusterlab":
            for mode in member_processes:
                out.extend(
                    [
                        ClusterlabSubject(recording=False, member_process=mode),
                        ClusterlabSubject(recording=True, member_process=mode),
                    ]
                )
        elif n == "clusterlab-auth":  # authentication off and on, recording off: the cost of security
            for mode in member_processes:
                out.extend(
                    [
                        ClusterlabSubject(recording=False, member_process=mode),
                        ClusterlabSubject(recording=False, secure=True, member_process=mode),
                    ]
                )
        else:
            raise SystemExit(f"unknown system {n!r} (pysyncobj, pysyncobj-nobatch, raw, clusterlab, clusterlab-auth)")
    unique: dict[str, Subject] = {}
    for subject in out:  # clusterlab and clusterlab-auth both measure recording off, auth off: once
        unique.setdefault(subject.key, subject)
    return list(unique.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short durations, 1 kill per profile (smoke run)")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="JSON output file")
    parser.add_argument(
        "--systems",
        default="pysyncobj,pysyncobj-nobatch,raw,clusterlab,clusterlab-auth",
        help="comma-separated subset (clusterlab-auth: recording off, authentication off and on)",
    )
    parser.add_argument("--window", type=int, default=None, help="outstanding requests at saturation (20000)")
    parser.add_argument("--kills", type=int, default=None, help="leader kills per timeout profile (10; quick 1)")
    parser.add_argument("--duration", type=float, default=None, help="seconds per measurement (5; quick 1)")
    parser.add_argument(
        "--member-process",
        choices=sorted(MEMBER_PROCESS_CHOICES),
        default="split",
        help="clusterlab members as node + service processes (split), one process each (single), or both",
    )
    args = parser.parse_args(argv)
    s = Settings.make(args.quick, args.window, args.kills, args.duration)

    def on_term(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    atexit.register(stop_all_started)

    def say(line: str) -> None:
        print(line, flush=True)

    doc: dict[str, Any] = {
        "benchmark": "cluster",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "settings": asdict(s),
        "common_rate": None,
        "common_rate_source": None,
        "systems": {},
    }
    load = os.getloadavg()
    doc["machine"]["loadavg_at_start"] = [round(x, 2) for x in load]
    if load[0] > (os.cpu_count() or 1) * 0.75:
        say(
            f"warning: load average {load[0]:.1f} on {os.cpu_count()} cores before the run: other work on this"
            " machine will cut the figures (see 'other processes' in the CPU lines and the JSON)"
        )
    t_start = time.monotonic()
    said: set[str] = set()
    try:
        names = [n.strip() for n in args.systems.split(",") if n.strip()]
        for subject in build_subjects(names, MEMBER_PROCESS_CHOICES[args.member_process]):
            reason = subject.availability()
            if reason is not None:
                line = f"{subject.key.split('-rec')[0]}: {reason}"
                if line not in said:
                    said.add(line)
                    say(line)
                doc["systems"][subject.key] = {"label": subject.label, "status": reason}
                continue
            say(f"{subject.label}:")
            try:
                r = run_subject(subject, s, doc["common_rate"], say)
            except Unavailable as e:
                say(f"  skipped: {e}")
                doc["systems"][subject.key] = {"label": subject.label, "status": f"skipped: {e}"}
                continue
            except (Exception, KeyboardInterrupt) as e:
                subject.stop()
                if isinstance(e, KeyboardInterrupt):
                    raise
                say(f"  failed: {type(e).__name__}: {e}")
                doc["systems"][subject.key] = {"label": subject.label, "status": f"failed: {type(e).__name__}: {e}"}
                continue
            doc["systems"][subject.key] = r
            if doc["common_rate"] is None:
                doc["common_rate"] = round(r["saturation"][str(LATENCY_SIZE)]["ops_per_s"] * s.latency_fraction, 1)
                doc["common_rate_source"] = subject.key
                # the first system's latency at its own 50 % is the common-rate figure too
                r["latency_common"] = r.get("latency_own")
    finally:
        stop_all_started()
    doc["wall_s"] = round(time.monotonic() - t_start, 1)
    doc["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    doc["ratios"] = ratios(doc["systems"])
    print_tables(doc)
    out = write_results(args.out, doc)
    say(f"wrote {out} ({doc['wall_s']} s)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: main's finally has stopped every process
        print("interrupted: every process started was stopped", file=sys.stderr)
        sys.exit(130)
