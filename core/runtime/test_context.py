"""The test context of a member process: what a test changes about a member it starts, given to the
node by name so that no production module imports the test apparatus.

A production node has none: it runs the protocol's rules on its plain FileStorage, and answers a
StorageFault request with an error. A test harness (LocalCluster) sets ``CLUSTERLAB_TEST_CONTEXT`` to
a ``package.module:factory`` (``clusterlab.testing.node:from_environment``) whose object gives the
member's rules (the protocol's or planted ones), its intercepts (armed by the ``TestHook`` control
message, which a production node refuses), and wraps its storage so faults can be injected while it
runs (:class:`DiskFaults`)."""

from __future__ import annotations

import os
from typing import Protocol, runtime_checkable

from clusterlab.core.archive.storage import Storage
from clusterlab.core.codec.control import ControlResponse, TestHook
from clusterlab.core.consensus.intercepts import Intercepts
from clusterlab.core.consensus.rules import ConsensusRules
from clusterlab.core.runtime.plugin import import_object

TEST_CONTEXT_ENV = "CLUSTERLAB_TEST_CONTEXT"


class TestContext(Protocol):
    """What a test changes about a member process (see the module docstring)."""

    @property
    def rules(self) -> ConsensusRules: ...

    @property
    def intercepts(self) -> Intercepts: ...

    def storage(self, inner: Storage, member_id: int, incarnation: int) -> Storage:
        """The member's storage: ``inner`` (its FileStorage), wrapped as the test needs."""
        ...

    def test_hook(self, msg: TestHook) -> ControlResponse:
        """Arm or clear one of the member's intercepts as the ``TestHook`` control message says."""
        ...


@runtime_checkable
class DiskFaults(Protocol):
    """A storage that takes injected write faults (the StorageFault control message)."""

    def fail_writes(
        self, code: int, path_prefix: str = "", *, torn: bool = False, count: int | None = None
    ) -> None: ...

    def clear(self) -> None: ...


def load_test_context() -> TestContext | None:
    """The test context ``CLUSTERLAB_TEST_CONTEXT`` names (its factory called), or None in production;
    ValueError naming the variable when it names nothing usable."""
    spec = os.environ.get(TEST_CONTEXT_ENV)
    if not spec:
        return None
    made = import_object(spec)()
    if (
        not isinstance(getattr(made, "rules", None), ConsensusRules)
        or not isinstance(getattr(made, "intercepts", None), Intercepts)
        or not callable(getattr(made, "storage", None))
        or not callable(getattr(made, "test_hook", None))
    ):
        raise ValueError(f"{TEST_CONTEXT_ENV}={spec!r} made a {type(made).__name__}, not a test context")
    return made
