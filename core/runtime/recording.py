"""The runtime's side of trace recording: message directions, the do-nothing recorder, and the
recorder a member process opens for ``--trace-dir``.

The recorder itself (Arrow IPC files, clusterlab.harness.recorder) lives in the harness, a layer up;
a process opens it through ``RECORDER_FACTORY``, a ``module:factory`` name (clusterlab.core.runtime.plugin).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clusterlab.core.runtime.plugin import import_object

# Message directions (the trace contract's values).
SEND = "send"
RECV = "recv"
DROP = "drop"

# ``factory(run_dir, run_id, process, **kwargs)`` returning a ProcessRecorder.
RECORDER_FACTORY = "clusterlab.harness.recorder:process_recorder"


class NullRecorder:
    """Recording turned off: the ProcessRecorder API, doing nothing."""

    closed = False
    stopped = None  # why recording stopped (a disk fault); never, when off

    def message(self, *args: Any, **kwargs: Any) -> None:
        pass

    def applied(self, *args: Any, **kwargs: Any) -> None:
        pass

    def event(self, *args: Any, **kwargs: Any) -> None:
        pass

    def op(self, *args: Any, **kwargs: Any) -> None:
        pass

    def messages(self, *args: Any, **kwargs: Any) -> None:
        pass

    def applied_many(self, *args: Any, **kwargs: Any) -> None:
        pass

    def applied_run(self, *args: Any, **kwargs: Any) -> None:
        pass

    def refer_committed(self, *args: Any, **kwargs: Any) -> None:
        pass

    def poll(self, now_ns: int | None = None) -> int:
        return 0

    def next_deadline_ns(self) -> int | None:
        return None

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def open_recorder(
    trace_dir: Path | str | None, run_id: str, process: str, factory: str = RECORDER_FACTORY, **kwargs: Any
) -> Any:
    """The recorder of one process: a NullRecorder when ``trace_dir`` is None (recording off), else
    what ``factory`` (a ``module:factory`` name) builds from the same arguments."""
    if trace_dir is None:
        return NullRecorder()
    return import_object(factory)(trace_dir, run_id, process, **kwargs)
