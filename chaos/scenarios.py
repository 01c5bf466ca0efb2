"""The named chaos scenarios: each a short spec of steps over the run's duration ``d`` (seconds).

Every scenario runs on 3 members; the partition ones also on 5. ``real_only`` ones use faults the
simulator has no counterpart for (SIGSTOP, a lone service process, a process clock).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from clusterlab.chaos.nemesis import (
    BackupRestore,
    BackupStart,
    ClientSilence,
    ClockSkew,
    ClusterDown,
    Control,
    Deaf,
    DiskFault,
    DiskFull,
    Down,
    DuplicateIngress,
    FlakyLinks,
    Kill,
    KillService,
    KillVoter,
    LateMessages,
    LogRecordingStop,
    LostReplies,
    Mute,
    OlderTermTail,
    OneWayLink,
    Partition,
    Pause,
    QuorumLoss,
    SilentClient,
    SlowElection,
    Snapshot,
    SnapshotCorrupt,
    SnapshotElection,
    StalledCandidate,
    SuspendIsolatedLeader,
    Together,
)
from clusterlab.chaos.schedule import Schedule, Step, fault, quiet, random_schedule


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    build: Callable[[float, int], list[Step]]  # (duration, members) -> steps
    sizes: tuple[int, ...] = (3,)
    real_only: bool = False
    default_duration_s: float = 6.0
    sim_only: bool = False  # uses a fault wired for the simulator only, or tried only there
    # Simulator clients resend an unanswered request (same id) on a leader change and every attempt
    # timeout, when the service deduplicates (real clients always do): exactly once is then on trial.
    client_resends: bool = False
    # Delivers requests more than once: only a service that deduplicates them (its workload's ``resend``)
    # can pass, so the runner refuses any other.
    needs_dedupe: bool = False

    def schedule(self, seed: int, duration_s: float | None = None, *, sim: bool = False, members: int = 3) -> Schedule:
        d = self.default_duration_s if duration_s is None else duration_s
        if self.name == "random":
            return random_schedule(seed, d, sim=sim)
        return Schedule(seed, self.build(d, members))


def _rolling(d: float, n: int) -> list[Step]:
    """Every member in turn (the leader among them) is killed and restarted from disk."""
    share = d / (2 * n + 1)
    steps = [quiet(share)]
    for m in range(n):
        steps += [fault(Kill(who="member", member=m), share), quiet(share)]
    return steps


def _full_restart(d: float, n: int) -> list[Step]:
    return [
        quiet(d * 0.3),
        fault(Snapshot(), d * 0.05),
        quiet(d * 0.2),
        fault(Kill(who="all"), d * 0.1),
        quiet(d * 0.35),
    ]


def _backup_restore(d: float, n: int) -> list[Step]:
    return [
        quiet(d * 0.1),
        fault(Snapshot(), d * 0.05),
        fault(BackupStart(replay_start="latest-snapshot", query_interval_s=30.0), d * 0.1),
        fault(Snapshot(), d * 0.05),
        fault(Kill(who="leader"), d * 0.25),
        fault(Snapshot(), d * 0.05),
        quiet(d * 0.1),
        fault(BackupRestore(), d * 0.1),
        quiet(d * 0.2),
    ]


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in [
        Scenario(
            "leader-kill",
            "SIGKILL the leader; restart it from disk later",
            lambda d, n: [quiet(d * 0.3), fault(Kill(who="leader"), d * 0.4), quiet(d * 0.3)],
        ),
        Scenario(
            "follower-restart",
            "SIGKILL a follower; restart it from disk; it catches up",
            lambda d, n: [quiet(d * 0.3), fault(Kill(who="follower"), d * 0.3), quiet(d * 0.4)],
        ),
        Scenario(
            "wiped-follower",
            "a follower loses its disk; it rebuilds by replication",
            lambda d, n: [quiet(d * 0.3), fault(Kill(who="follower", wipe=True), d * 0.3), quiet(d * 0.4)],
        ),
        Scenario(
            "stale-candidate",
            "a follower is cut off and falls behind; as it rejoins the leader is killed: a stale member may stand",
            lambda d, n: [
                quiet(d * 0.25),
                fault(Partition(shape="follower-isolation"), d * 0.25),
                fault(Kill(who="leader"), d * 0.25),
                quiet(d * 0.25),
            ],
            sizes=(3, 5),
        ),
        Scenario(
            "client-resends",
            "clients resend unanswered requests (same id): replies are lost for a while, then the leader "
            "is killed; each request must be applied once",
            lambda d, n: [
                quiet(d * 0.2),
                fault(LostReplies(), d * 0.2),
                quiet(d * 0.15),
                fault(Kill(who="leader"), d * 0.25),
                quiet(d * 0.2),
            ],
            sizes=(3, 5),
            sim_only=True,
            client_resends=True,
        ),
        Scenario(
            "duplicate-ingress",
            "every message the clients send arrives twice (the copy 1-20 ms later) while the leader is "
            "killed: duplicated requests and resends meet a new leader; each request must be applied once",
            lambda d, n: [quiet(d * 0.25), fault(DuplicateIngress(), d * 0.45), quiet(d * 0.3)],
            sizes=(3, 5),
            sim_only=True,
            client_resends=True,
            needs_dedupe=True,
        ),
        Scenario(
            "suspend-isolated-leader",
            "the leader is cut off, then suspended: its SUSPEND never commits; it rejoins ACTIVE, as the "
            "cluster is (an uncommitted cluster action is rolled back)",
            lambda d, n: [quiet(d * 0.3), fault(SuspendIsolatedLeader(), max(d * 0.35, 2.0)), quiet(d * 0.35)],
            sizes=(3, 5),
            sim_only=True,
        ),
        Scenario(
            "late-votes",
            "every member's votes arrive 0.4 s late while the leader is killed: votes land in later ballots",
            lambda d, n: [
                quiet(d * 0.25),
                fault(LateMessages(message="Vote", delay_s=0.4, duplicate=False, then="kill-leader"), d * 0.45),
                quiet(d * 0.3),
            ],
            sizes=(3, 5),
        ),
        Scenario(
            "older-term-tail",
            "the leader is cut off with writes in flight; the next leader is killed as the old one returns: "
            "a log ending in an older term canvasses the third leader",
            lambda d, n: [quiet(d * 0.3), fault(OlderTermTail(), d * 0.4), quiet(d * 0.3)],
            sizes=(3, 5),
        ),
        Scenario(
            "stalled-candidate",
            "the leader stops reaching its followers; the candidate they vote for stalls and the old leader, "
            "still leading, offers its older term to the voters: their votes promised to refuse it",
            lambda d, n: [quiet(d * 0.3), fault(StalledCandidate(), d * 0.4), quiet(d * 0.3)],
            sizes=(3, 5),
        ),
        Scenario(
            "leader-isolation",
            "the leader is cut off; the majority elects, the old leader steps down",
            lambda d, n: [quiet(d * 0.3), fault(Partition(shape="leader-isolation"), d * 0.4), quiet(d * 0.3)],
            sizes=(3, 5),
        ),
        Scenario(
            "minority-partition",
            "a random minority is cut off from the majority",
            lambda d, n: [quiet(d * 0.3), fault(Partition(shape="minority-partition"), d * 0.4), quiet(d * 0.3)],
            sizes=(3, 5),
        ),
        Scenario(
            "majority-ring",
            "each member sees only its ring neighbours (overlapping majorities)",
            lambda d, n: [quiet(d * 0.3), fault(Partition(shape="majority-ring"), d * 0.4), quiet(d * 0.3)],
            sizes=(3, 5),
        ),
        Scenario(
            "bridge",
            "two sides that only one bridge member connects",
            lambda d, n: [quiet(d * 0.3), fault(Partition(shape="bridge"), d * 0.4), quiet(d * 0.3)],
            sizes=(3, 5),
        ),
        Scenario(
            "one-way-link",
            "the leader's messages to one follower are dropped, not the replies",
            lambda d, n: [quiet(d * 0.3), fault(OneWayLink(), d * 0.4), quiet(d * 0.3)],
            sizes=(3, 5),
        ),
        Scenario(
            "flaky-links",
            "every link drops 20% and delays the rest by 0-10 ms",
            lambda d, n: [quiet(d * 0.2), fault(FlakyLinks(), d * 0.5), quiet(d * 0.3)],
            sizes=(3, 5),
        ),
        Scenario(
            "truncate-follower-tail",
            "a follower is killed and loses the last 512 bytes of its log",
            lambda d, n: [quiet(d * 0.3), fault(DiskFault(fault="truncate", n_bytes=512), d * 0.3), quiet(d * 0.4)],
        ),
        Scenario(
            "torn-write-on-leader",
            "the leader is killed mid-write: its last frame is cut in half",
            lambda d, n: [quiet(d * 0.3), fault(DiskFault(who="leader", fault="torn"), d * 0.3), quiet(d * 0.4)],
        ),
        Scenario(
            "bit-flip-tail",
            "a follower's log tail gets flipped bits while it is down (CRC catches it)",
            lambda d, n: [quiet(d * 0.3), fault(DiskFault(fault="flip"), d * 0.3), quiet(d * 0.4)],
        ),
        Scenario(
            "disk-full-leader",
            "the running leader's disk fills up (ENOSPC): it steps down; freed and restarted, it catches up",
            lambda d, n: [quiet(d * 0.3), fault(DiskFull(), d * 0.3), quiet(d * 0.4)],
        ),
        Scenario("rolling-restart", "every member in turn is killed and restarted", _rolling, default_duration_s=8.0),
        Scenario(
            "pause-leader",
            "SIGSTOP the leader past the heartbeat timeout, then SIGCONT (simulator: the paused member runs nothing "
            "and what arrives for it waits)",
            lambda d, n: [quiet(d * 0.3), fault(Pause(), d * 0.4), quiet(d * 0.3)],
            sizes=(3, 5),
        ),
        Scenario(
            "kill-service",
            "SIGKILL only a follower's service process; restart the member",
            lambda d, n: [quiet(d * 0.3), fault(KillService(), d * 0.3), quiet(d * 0.4)],
            real_only=True,
        ),
        Scenario(
            "clock-skew",
            "one member's clock jumps 2 s ahead",
            lambda d, n: [quiet(d * 0.3), fault(ClockSkew(offset_s=2.0), d * 0.4), quiet(d * 0.3)],
            real_only=True,
        ),
        Scenario(
            "snapshot-under-chaos",
            "snapshot, kill the leader, invalidate a follower's snapshot",
            lambda d, n: [
                quiet(d * 0.2),
                fault(Snapshot(), d * 0.1),
                fault(Kill(who="leader"), d * 0.25),
                fault(DiskFault(fault="snapshot"), d * 0.25),
                quiet(d * 0.2),
            ],
        ),
        Scenario(
            "snapshot-corrupt",
            "snapshot, then a follower's service snapshot is made unloadable while it is down: restarted, the "
            "member must close by itself; with the snapshot invalidated it recovers and replays",
            lambda d, n: [
                quiet(d * 0.2),
                fault(Snapshot(), d * 0.15),
                fault(SnapshotCorrupt(), d * 0.3),
                quiet(d * 0.35),
            ],
        ),
        Scenario("full-restart", "snapshot, then every member is killed and restarted from disk", _full_restart),
        Scenario(
            "cluster-down",
            "every member is killed and stays down 25 s, longer than the clients' new-leader timeout (20 s): each "
            "client must close by itself; then the members restart from disk and new clients carry on",
            lambda d, n: [quiet(d * 0.3), fault(ClusterDown(), 25.0), quiet(d * 0.7)],
            sim_only=True,
        ),
        Scenario(
            "log-recording-stop",
            "the leader's log recording stops where it ends: the leader enters an election, resumes its "
            "recording there, and the cluster goes on",
            lambda d, n: [quiet(d * 0.3), fault(LogRecordingStop(), d * 0.3), quiet(d * 0.4)],
            sim_only=True,
        ),
        Scenario(
            "backup-restore",
            "a ClusterBackup follows the cluster through snapshots and a leader kill; then the cluster is "
            "destroyed and every member restored from the backup: nothing acknowledged may be lost",
            _backup_restore,
        ),
        # Schedules that reach the protocol checks (chaos/checks/protocol.py).
        Scenario(
            "kill-voter",
            "kill the leader; the first member to vote in the election is killed and restarted at once",
            lambda d, n: [quiet(d * 0.3), fault(KillVoter(), d * 0.3), quiet(d * 0.4)],
            sizes=(3, 5),
        ),
        Scenario(
            "kill-voter-and-candidate",
            "kill the leader; the first voter is killed and restarted at once, the candidate it voted for killed",
            lambda d, n: [quiet(d * 0.3), fault(KillVoter(candidate_too=True), d * 0.3), quiet(d * 0.4)],
            sizes=(3, 5),
        ),
        Scenario(
            "slow-election",
            "every link delays messages past the election timeout, and the leader is killed",
            lambda d, n: [quiet(d * 0.3), fault(SlowElection(), d * 0.35), quiet(d * 0.35)],
        ),
        Scenario(
            "long-partition",
            "a client hangs, then the leader is cut off for longer than the session timeout (the hung "
            "session expires across the leadership change)",
            lambda d, n: [
                quiet(d * 0.15),
                fault(SilentClient(), d * 0.02),
                fault(Partition(shape="leader-isolation"), d * 0.58),
                quiet(d * 0.25),
            ],
            default_duration_s=12.0,
        ),
        Scenario(
            "snapshot-election",
            "a snapshot is requested as the leader is cut off: it straddles a leadership change",
            lambda d, n: [quiet(d * 0.3), fault(SnapshotElection(), d * 0.3), quiet(d * 0.4)],
        ),
        Scenario(
            "skew-sessions",
            "a member's clock jumps 3 s ahead, then the leader is cut off past the session timeout",
            lambda d, n: [
                quiet(d * 0.15),
                fault(ClockSkew(offset_s=3.0), d * 0.15),
                fault(Partition(shape="leader-isolation"), d * 0.5),
                quiet(d * 0.2),
            ],
            real_only=True,
            default_duration_s=12.0,
        ),
        Scenario(
            "random",
            "a seeded mix of every fault (Jepsen-style quiet/fault/heal)",
            lambda d, n: [],
            sizes=(3, 5),
            default_duration_s=10.0,
        ),
    ]
}


def _mute_candidate(d: float, n: int) -> list[Step]:
    """Three rounds of: lossy links (logs drift), then slow links, a mute follower and the leader killed."""
    steps = [quiet(d * 0.1)]
    for _ in range(3):
        steps += [
            fault(FlakyLinks(loss=0.3, delay_s=0.03, jitter_s=0.025), d * 0.05),
            fault(
                Together(
                    parts=(
                        FlakyLinks(loss=0.0, delay_s=0.03, jitter_s=0.025),
                        Mute(fail_votes=True),
                        Kill(who="leader"),
                    )
                ),
                d * 0.18,
            ),
            quiet(d * 0.07),
        ]
    return steps


# --- scenarios for the coverage-chosen goldens (golden/candidates.py, golden/coverage.py); tried in the
# simulator only (cluster control and client silence are wired for it alone) ---
_GOLDEN_SCENARIOS = [
    Scenario(
        "solo-restart",
        "one member: snapshot, kill it, restart it from disk (single-member election and recovery)",
        _full_restart,
        sizes=(1,),
        sim_only=True,
    ),
    Scenario(
        "stale-follower",
        "a follower stays down while two leaders are killed in turn; it returns missing whole terms",
        lambda d, n: [
            quiet(d * 0.15),
            fault(Down(who="follower"), d * 0.1),
            fault(Kill(who="leader"), d * 0.2),
            fault(Kill(who="leader"), d * 0.2),
            quiet(d * 0.35),
        ],
        sizes=(5,),
        default_duration_s=8.0,
        sim_only=True,
    ),
    Scenario(
        "quorum-loss",
        "every follower is killed: the leader loses its quorum and steps down; they restart",
        lambda d, n: [quiet(d * 0.3), fault(QuorumLoss(), d * 0.35), quiet(d * 0.35)],
        sizes=(3, 5),
        sim_only=True,
    ),
    Scenario(
        "suspend-resume",
        "cluster control: suspend the cluster (ingress held), then resume it",
        lambda d, n: [quiet(d * 0.3), fault(Control(action="suspend"), d * 0.3), quiet(d * 0.4)],
        sizes=(1, 3),
        sim_only=True,
    ),
    Scenario(
        "shutdown-restart",
        "cluster control: a clean shutdown (services terminate), then every member restarts from disk",
        lambda d, n: [quiet(d * 0.3), fault(Control(action="shutdown"), d * 0.2), quiet(d * 0.5)],
        sizes=(3, 5),
        sim_only=True,
    ),
    Scenario(
        "split-vote",
        "the leader is killed while every link is slow (40-160 ms): candidates stand against each other",
        lambda d, n: [
            quiet(d * 0.3),
            fault(Together(parts=(FlakyLinks(loss=0.3, delay_s=0.03, jitter_s=0.025), Kill(who="leader"))), d * 0.4),
            quiet(d * 0.3),
        ],
        sizes=(3, 5),
        sim_only=True,
    ),
    Scenario(
        "split-vote-diverged",
        "links turn slow and lossy, so the followers' logs drift apart; then the leader is killed: "
        "candidates with different logs stand against each other",
        lambda d, n: [
            quiet(d * 0.3),
            fault(FlakyLinks(loss=0.3, delay_s=0.03, jitter_s=0.025), d * 0.1),
            fault(Together(parts=(FlakyLinks(loss=0.3, delay_s=0.03, jitter_s=0.025), Kill(who="leader"))), d * 0.3),
            quiet(d * 0.3),
        ],
        sizes=(3, 5),
        sim_only=True,
    ),
    Scenario(
        "votes-across-restarts",
        "the leader goes down and a follower goes deaf (failed ballots raise candidate terms); "
        "then every member restarts: candidate terms and votes must survive the restart",
        lambda d, n: [
            quiet(d * 0.25),
            fault(Together(parts=(Down(who="leader"), Deaf())), d * 0.25),
            fault(Kill(who="all"), d * 0.1),
            quiet(d * 0.4),
        ],
        default_duration_s=8.0,
        sim_only=True,
    ),
    Scenario(
        "dueling-candidates",
        "the leader goes down; one follower, then the other, goes deaf: both raise candidate terms, "
        "then meet as candidates of different terms",
        lambda d, n: [
            quiet(d * 0.25),
            fault(Together(parts=(Down(who="leader"), Deaf(pick=0))), d * 0.15),
            fault(Deaf(pick=1), d * 0.15),
            quiet(d * 0.45),
        ],
        default_duration_s=8.0,
        sim_only=True,
    ),
    Scenario(
        "mute-candidate",
        "three times: links turn slow and lossy (the followers' logs drift apart), then the leader is "
        "killed as a follower goes mute (it hears, is not heard): it may stand, unheard, in the term "
        "another wins, and the winner's NewLeadershipTerm finds it a candidate behind the term's base",
        _mute_candidate,
        sizes=(5,),
        default_duration_s=10.0,
        sim_only=True,
    ),
    Scenario(
        "client-silence",
        "every client is cut off past the session timeout: the leader times the sessions out",
        lambda d, n: [quiet(d * 0.1), fault(ClientSilence(), d * 0.75), quiet(d * 0.15)],
        sizes=(1, 3),
        default_duration_s=8.0,
        sim_only=True,
    ),
]
SCENARIOS.update({s.name: s for s in _GOLDEN_SCENARIOS})


def scenario(name: str) -> Scenario:
    """The scenario called ``name``; KeyError names the known ones."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None
