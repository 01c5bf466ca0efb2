"""The test context LocalCluster gives its member processes (``CLUSTERLAB_TEST_CONTEXT``, see
``clusterlab.core.runtime.test_context``): the rules its planted bugs make (the names in
``CLUSTERLAB_MUTANTS``; the protocol's when none) and the member's disk behind a FaultyStorage, so a
test injects ENOSPC, EIO and torn writes into a running member (``LocalCluster.storage_fault``), and
the member's intercepts, which the TestHook control message arms (``clusterlab.testing.intercepts``)."""

from __future__ import annotations

import os
import random
from collections.abc import Iterable
from dataclasses import dataclass, field

from clusterlab.core.archive.storage import Storage
from clusterlab.core.codec.control import ControlResponse, TestHook
from clusterlab.core.consensus.rules import ConsensusRules
from clusterlab.core.runtime.test_context import TEST_CONTEXT_ENV
from clusterlab.testing.faulty_storage import FaultyStorage
from clusterlab.testing.intercepts import TestHooks, apply_test_hook
from clusterlab.testing.mutants import MUTANTS_ENV, format_mutants, mutant_set, parse_mutants, rules_for

FACTORY = "clusterlab.testing.node:from_environment"


@dataclass(frozen=True)
class NodeTestContext:
    """A member process under test: its rules, its intercepts (armed by TestHook control messages),
    and its storage wrapped for injected faults."""

    rules: ConsensusRules
    intercepts: TestHooks = field(default_factory=TestHooks)

    def storage(self, inner: Storage, member_id: int, incarnation: int) -> Storage:
        return FaultyStorage(inner, random.Random(f"disk:{member_id}:{incarnation}"))

    def test_hook(self, msg: TestHook) -> ControlResponse:
        return apply_test_hook(self.intercepts, msg)


def from_environment() -> NodeTestContext:
    """The context of a member process LocalCluster started (its planted bugs in ``CLUSTERLAB_MUTANTS``)."""
    return NodeTestContext(rules_for(parse_mutants(os.environ.get(MUTANTS_ENV))))


def environment(mutants: Iterable[str] = ()) -> dict[str, str]:
    """The environment of a member process LocalCluster starts: this test context, with ``mutants``."""
    names = mutant_set(mutants)
    return {TEST_CONTEXT_ENV: FACTORY, **({MUTANTS_ENV: format_mutants(names)} if names else {})}
