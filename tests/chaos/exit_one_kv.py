"""A kv service whose process exits with 1 (as an error escaping the process does, after its cleanup)
at the first client message of the run, once: the first service process to take a message after the marker file named by
:data:`EXIT_MARKER_ENV` could be created exits; every other process, and every later incarnation,
serves as kv does. tests/chaos/test_exit_codes.py plants it to see the runner's exit-code check fire."""

from __future__ import annotations

import os

from clusterlab.core.service.api import ClientSession
from clusterlab.harness.services.kv import KeyValueService

EXIT_MARKER_ENV = "CLUSTERLAB_TEST_EXIT_ONE_MARKER"
EXIT_ONE_KV = "tests.chaos.exit_one_kv:ExitOnceKv"


class ExitOnceKv(KeyValueService):
    def on_session_message(self, session: ClientSession | None, timestamp: int, payload: bytes) -> None:
        marker = os.environ.get(EXIT_MARKER_ENV)
        if marker:
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.close(fd)
                raise SystemExit(1)  # through the process's own cleanup: its trace files end whole
        super().on_session_message(session, timestamp, payload)
