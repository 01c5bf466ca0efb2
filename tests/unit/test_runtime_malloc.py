"""The member processes' allocator settings (core/runtime/runner.tune_malloc): freed memory stays in
the process, so reusing it touches no fresh page."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# A child process allocates 20 MiB, frees it, allocates 20 MiB again and prints the minor page faults of
# the second allocation (it writes every byte, so every fresh page faults once).
_CHILD = """
import resource, sys
from clusterlab.core.runtime.runner import tune_malloc
applied = tune_malloc() if sys.argv[1] == "tuned" else False
first = b"\x01" * (20 * 1024 * 1024)
del first
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
second = b"\x01" * (20 * 1024 * 1024)
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""

glibc_only = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="mallopt is glibc's; elsewhere tune_malloc does nothing",
)


def _second_allocation_faults(mode: str) -> tuple[bool, int]:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, mode], capture_output=True, text=True, timeout=60, check=True
    ).stdout.split()
    return out[0] == "True", int(out[1])


@glibc_only
def test_tuned_process_reuses_freed_memory_without_page_faults() -> None:
    applied, faults = _second_allocation_faults("tuned")
    assert applied, "glibc refused one of MALLOPT's values"
    assert faults < 500, f"{faults} page faults reusing 20 MiB just freed (5,120 pages)"


@glibc_only
def test_without_tuning_the_same_reuse_faults_every_page() -> None:
    """The control: glibc's defaults give a freed 20 MiB block back to the OS, so the test above
    measures the setting, not the machine."""
    applied, faults = _second_allocation_faults("plain")
    assert not applied
    assert faults > 4000
