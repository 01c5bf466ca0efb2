"""Schedules: what a chaos run does and when, Jepsen-style — quiet, fault, heal, quiet… — ending in
a healed phase in which the cluster must make progress (a leader, new commits, every member caught
up) within a bound.

A schedule is plain data built from a seed: the same seed (and scenario, members, duration) gives the
same steps, which ``describe`` prints, so a failure is re-run exactly with the command it prints."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from clusterlab.chaos.limits import MAX_RUN_S
from clusterlab.chaos.nemesis import (
    LATE_MESSAGES,
    NEMESES,
    ClockSkew,
    DiskFault,
    FlakyLinks,
    Kill,
    KillService,
    KillVoter,
    LateMessages,
    LostReplies,
    Nemesis,
    OlderTermTail,
    OneWayLink,
    Partition,
    Pause,
    SilentClient,
    SlowElection,
    Snapshot,
    SnapshotElection,
    StalledCandidate,
)


@dataclass
class Step:
    """``quiet`` (workload only) or ``fault`` (apply, hold ``seconds``, heal) for ``seconds``."""

    kind: str
    seconds: float
    nemesis: Nemesis | None = None

    def describe(self) -> str:
        if self.nemesis is None:
            return f"quiet {self.seconds:.2f}s"
        n = self.nemesis
        extra = ",".join(f"{k}={v}" for k, v in n.detail().items() if v not in ([], None))
        return f"{n.name}({extra}) {self.seconds:.2f}s"


@dataclass
class Schedule:
    """The steps of one run, then the final healed phase (``settle_s``: its progress bound)."""

    seed: int
    steps: list[Step] = field(default_factory=list)
    settle_s: float = 30.0

    def describe(self) -> list[str]:
        return [s.describe() for s in self.steps]


def quiet(s: float) -> Step:
    return Step("quiet", s)


def fault(n: Nemesis, s: float) -> Step:
    return Step("fault", s, n)


# A random schedule draws from these (real-process-only nemeses are dropped in the simulator).
RANDOM_POOL: list[tuple[str, Callable[[random.Random], Nemesis], bool]] = [
    ("kill-leader", lambda r: Kill(who="leader"), True),
    ("kill-random", lambda r: Kill(who="random"), True),
    ("kill-minority", lambda r: Kill(who="minority"), True),
    ("wiped-follower", lambda r: Kill(who="follower", wipe=True), True),
    ("leader-isolation", lambda r: Partition(shape="leader-isolation"), True),
    ("minority-partition", lambda r: Partition(shape="minority-partition"), True),
    ("majority-ring", lambda r: Partition(shape="majority-ring"), True),
    ("bridge", lambda r: Partition(shape="bridge"), True),
    ("one-way", lambda r: OneWayLink(), True),
    ("flaky", lambda r: FlakyLinks(loss=r.choice([0.05, 0.2]), delay_s=0.002, jitter_s=0.002), True),
    ("truncate", lambda r: DiskFault(fault="truncate", n_bytes=r.choice([64, 512, 4096])), True),
    ("torn", lambda r: DiskFault(fault="torn", who="random"), True),
    ("flip", lambda r: DiskFault(fault="flip"), True),
    ("unflushed", lambda r: DiskFault(fault="unflushed", who="random"), True),
    ("truncate-at", lambda r: DiskFault(fault="truncate", at=r.randrange(0, 64 * 1024, 32)), True),
    ("snapshot", lambda r: Snapshot(), True),
    ("kill-voter", lambda r: KillVoter(candidate_too=r.random() < 0.5), True),
    ("slow-election", lambda r: SlowElection(delay_s=r.choice([0.35, 0.5])), True),
    ("snapshot-election", lambda r: SnapshotElection(), True),
    ("silent-client", lambda r: SilentClient(), True),
    ("pause-leader", lambda r: Pause(), False),
    ("kill-service", lambda r: KillService(), False),
    ("clock-skew", lambda r: ClockSkew(offset_s=r.choice([0.5, 2.0])), False),
]


def random_schedule(seed: int, duration_s: float, *, sim: bool) -> Schedule:
    """quiet, fault, quiet, fault… for about ``duration_s``, faults drawn from RANDOM_POOL by ``seed``."""
    rng = random.Random(f"schedule:{seed}")
    pool = [(name, make) for name, make, on_sim in RANDOM_POOL if on_sim or not sim]
    steps: list[Step] = [quiet(rng.uniform(0.3, 0.8))]
    spent = steps[0].seconds
    while spent < duration_s:
        _, make = rng.choice(pool)
        hold = rng.uniform(0.5, 2.0)
        steps += [fault(make(rng), hold), quiet(rng.uniform(0.3, 1.0))]
        spent += hold + steps[-1].seconds
    steps = _with_older_term_tail(seed, _with_late_messages(seed, steps, sim=sim))
    steps = _with_stalled_candidate(seed, steps)
    return Schedule(seed, _with_client_resends(seed, steps, sim=sim))


def _chosen(stream: str, seed: int, share: float) -> random.Random | None:
    """The random stream ``stream:seed`` when its first draw puts ``seed`` in ``share`` of the seeds,
    else None. Each insertion below draws from a stream of its own, so a seed outside its share keeps the
    schedule the pool alone gives, and the seeds other tests and goldens pin keep theirs."""
    rng = random.Random(f"{stream}:{seed}")
    return rng if rng.random() < share else None


def _after_a_quiet(steps: list[Step], rng: random.Random, insert: Callable[[], list[Step]]) -> list[Step]:
    """``steps`` with ``insert()`` (drawn after the position) placed right after one of its quiet steps."""
    at = 1 + 2 * rng.randrange((len(steps) + 1) // 2)
    return [*steps[:at], *insert(), *steps[at:]]


LATE_MESSAGES_SHARE = 0.3
"""The share of random schedules that also hold one type of member message back across a leader change."""


def _with_late_messages(seed: int, steps: list[Step], *, sim: bool) -> list[Step]:
    """``steps`` with, for a LATE_MESSAGES_SHARE of seeds, one :class:`LateMessages` fault and a quiet
    after it inserted after a quiet step."""
    if (rng := _chosen("late-messages", seed, LATE_MESSAGES_SHARE)) is None:
        return steps
    then = rng.choice(("kill-leader", "isolate-leader") if sim else ("kill-leader", "isolate-leader", "pause-leader"))
    # Votes most often: a vote that lands in a later ballot needs failed ballots in a row to happen at all.
    late = LateMessages(
        message="Vote" if rng.random() < 0.4 else rng.choice(LATE_MESSAGES[1:]),
        delay_s=rng.choice((0.2, 0.4, 0.8)),
        duplicate=rng.random() < 0.3,
        then=then,
    )
    # Held long enough for several ballots to fail in a row while the leader is gone.
    return _after_a_quiet(steps, rng, lambda: [fault(late, rng.uniform(1.5, 3.0)), quiet(rng.uniform(0.3, 1.0))])


OLDER_TERM_TAIL_SHARE = 0.15
"""The share of random schedules that also leave a deposed leader's tail for a later election."""


def _with_older_term_tail(seed: int, steps: list[Step]) -> list[Step]:
    """``steps`` with, for an OLDER_TERM_TAIL_SHARE of seeds, one :class:`OlderTermTail` fault and a quiet
    after it inserted after a quiet step."""
    if (rng := _chosen("older-term-tail", seed, OLDER_TERM_TAIL_SHARE)) is None:
        return steps
    tail = OlderTermTail(tail_s=rng.choice((0.05, 0.1, 0.2)), lead_s=rng.choice((0.0, 0.0, 0.1)))
    return _after_a_quiet(steps, rng, lambda: [fault(tail, rng.uniform(1.0, 2.0)), quiet(rng.uniform(0.3, 1.0))])


STALLED_CANDIDATE_SHARE = 0.1
"""The share of random schedules in which a voter's candidate stalls while the old leader still leads."""


def _with_stalled_candidate(seed: int, steps: list[Step]) -> list[Step]:
    """``steps`` with, for a STALLED_CANDIDATE_SHARE of seeds, one :class:`StalledCandidate` fault and a
    quiet after it inserted after a quiet step."""
    if (rng := _chosen("stalled-candidate", seed, STALLED_CANDIDATE_SHARE)) is None:
        return steps
    return _after_a_quiet(
        steps, rng, lambda: [fault(StalledCandidate(), rng.uniform(1.5, 2.5)), quiet(rng.uniform(0.3, 1.0))]
    )


CLIENT_RESENDS_SHARE = 0.15
"""The share of random simulator schedules whose replies are lost for a while before a leader kill."""


def _with_client_resends(seed: int, steps: list[Step], *, sim: bool) -> list[Step]:
    """``steps`` with, for a CLIENT_RESENDS_SHARE of simulator seeds, every reply lost for a while and then
    the leader killed, inserted after a quiet step. The runner's clients resend in a schedule that loses
    replies (:func:`loses_replies`), so unanswered requests are sent again with the same id, across that
    leader change too."""
    if not sim or (rng := _chosen("client-resends", seed, CLIENT_RESENDS_SHARE)) is None:
        return steps
    return _after_a_quiet(
        steps,
        rng,
        lambda: [
            fault(LostReplies(), rng.uniform(0.5, 1.5)),
            quiet(rng.uniform(0.2, 0.6)),
            fault(Kill(who="leader"), rng.uniform(0.8, 1.5)),
            quiet(rng.uniform(0.3, 1.0)),
        ],
    )


def kills_a_service(schedule: Schedule) -> bool:
    """Whether ``schedule`` kills a service process alone (a member must then run as separate processes)."""
    return any(isinstance(s.nemesis, KillService) for s in schedule.steps)


def loses_replies(schedule: Schedule) -> bool:
    """Whether ``schedule`` loses the clients' replies for a while (its clients must resend)."""
    return any(isinstance(s.nemesis, LostReplies) for s in schedule.steps)


# ------------------------------------------------------------------------------ explicit schedules

# Nemesis fields that are the outcome of applying it (who was hit), not its configuration.
_OUTCOME_FIELDS = frozenset({"name", "victims", "applied_at", "healed_at", "groups", "hit_leader", "position"})


def step_spec(step: Step) -> dict[str, Any]:
    """One step as plain JSON data: ``{"quiet": 0.5}`` or ``{"nemesis": "kill", "seconds": 1.2, "who": "leader"}``
    (the nemesis's name in NEMESES and the options that differ from its defaults)."""
    if step.nemesis is None:
        return {"quiet": step.seconds}
    n = step.nemesis
    fresh = type(n)()
    spec: dict[str, Any] = {"nemesis": n.name, "seconds": step.seconds}
    for f in fields(n):
        if f.init and f.name not in _OUTCOME_FIELDS and getattr(n, f.name) != getattr(fresh, f.name):
            spec[f.name] = getattr(n, f.name)
    return spec


def step_from_spec(spec: dict[str, Any]) -> Step:
    """The inverse of :func:`step_spec`; ValueError naming what is wrong in a bad step."""
    if not isinstance(spec, dict):
        raise ValueError(
            f"schedule step {spec!r}: expected an object like {{'quiet': 0.5}} or {{'nemesis': 'kill', ...}}"
        )
    if "quiet" in spec:
        if set(spec) != {"quiet"}:
            raise ValueError(f"schedule step {spec!r}: a quiet step has only 'quiet': SECONDS")
        return quiet(_seconds(spec, spec["quiet"]))
    options = dict(spec)
    name = options.pop("nemesis", None)
    if name not in NEMESES:
        raise ValueError(f"schedule step {spec!r}: unknown nemesis {name!r}; known: {', '.join(NEMESES)}")
    seconds = _seconds(spec, options.pop("seconds", None))
    cls = NEMESES[name]
    allowed = {f.name for f in fields(cls) if f.init and f.name not in _OUTCOME_FIELDS}
    if unknown := sorted(set(options) - allowed):
        raise ValueError(
            f"schedule step {spec!r}: {name} has no option {', '.join(unknown)}; "
            f"its options: {', '.join(sorted(allowed))}"
        )
    fresh = cls()
    for option, value in options.items():
        if (error := _option_type_error(option, value, getattr(fresh, option))) is not None:
            raise ValueError(f"schedule step {spec!r}: {name} {error}")
    nemesis = cls(**options)
    if (error := nemesis.options_error()) is not None:
        raise ValueError(f"schedule step {spec!r}: {name} {error}")
    return fault(nemesis, seconds)


def _option_type_error(option: str, value: Any, default: Any) -> str | None:
    """Why ``value`` is not of the option's kind (that of its default: a bool, a whole number, a number,
    a string, a list, an object), or None; an option whose default is None takes any JSON value."""
    kinds: tuple[type, ...]
    if default is None:
        return None
    if isinstance(default, bool):
        kinds, what = (bool,), "true or false"
    elif isinstance(default, int):
        kinds, what = (int,), "a whole number"
    elif isinstance(default, float):
        kinds, what = (int, float), "a number"
    elif isinstance(default, str):
        kinds, what = (str,), "a string"
    else:
        kinds, what = (type(default),), f"a {type(default).__name__}"
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        return f"option {option} must be {what}, not {value!r}"
    return None


def _seconds(spec: dict[str, Any], value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= MAX_RUN_S:
        raise ValueError(f"schedule step {spec!r}: seconds must be a number from 0 to {MAX_RUN_S:g}, not {value!r}")
    return float(value)


def schedule_spec(schedule: Schedule) -> list[dict[str, Any]]:
    """The schedule's steps as JSON data (what chaos.json keeps and a shrunk test replays)."""
    return [step_spec(s) for s in schedule.steps]


def schedule_from_spec(seed: int, steps: list[dict[str, Any]]) -> Schedule:
    """An explicit schedule: these steps (as :func:`schedule_spec` gives them), not the seed's."""
    if not isinstance(steps, list):
        raise ValueError(f"a schedule is a list of steps, not {type(steps).__name__}")
    schedule = Schedule(seed, [step_from_spec(s) for s in steps])
    if (total := sum(s.seconds for s in schedule.steps)) > MAX_RUN_S:
        raise ValueError(f"the steps last {total:g} seconds in all; a run's schedule lasts at most {MAX_RUN_S:g}")
    return schedule


def load_schedule_option(value: str) -> list[dict[str, Any]]:
    """``--schedule``'s value: a JSON list of steps, inline or in a file; the steps checked (ValueError
    naming what is wrong)."""
    text = value
    if not value.lstrip().startswith("["):
        path = Path(value)
        if not path.is_file():
            raise ValueError(f"{value!r} is neither a JSON list of steps nor a file")
        text = path.read_text()
    try:
        steps = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON ({e})") from None
    schedule_from_spec(0, steps)
    return list(steps)
