"""The CI seed sweep: the ``random`` scenario over many simulator seeds on 3 and 5 members (kv), run
as one test through the plugin's ``chaos_sweep`` fixture. ci/suite gives the seed count with
``--chaos-sweep N``; without it a handful of seeds run. The kv, counter and timers mix costs 1.8 times
the CPU per run (docs/sweep.md) and did not fit the test's timeout beside the rest of the suite."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.chaos, pytest.mark.sim, pytest.mark.slow]


def test_random_sweep_on_3_and_5_members(chaos_sweep: Any) -> None:
    sweep = chaos_sweep("random", members=(3, 5), seeds=4)
    assert sweep.summary.ran_now == len(sweep.summary.config.seeds) * 2
    sweep.check()
