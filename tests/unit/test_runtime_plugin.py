"""The runtime names what it needs from the layers above by ``module:attribute`` (core/runtime/plugin.py):
the sample services and the trace recorder load that way, and a wrong name is one clear error."""

from __future__ import annotations

from pathlib import Path

import pytest
from clusterlab.core.runtime.config import ConfigError
from clusterlab.core.runtime.plugin import import_object
from clusterlab.core.runtime.recording import NullRecorder, open_recorder
from clusterlab.core.runtime.service import load_service_factory
from clusterlab.harness.recorder import ProcessRecorder
from clusterlab.harness.services import SERVICES


def test_import_object_finds_the_attribute() -> None:
    assert import_object("clusterlab.harness.services:SERVICES") is SERVICES


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("clusterlab.harness.services", "not of the form package.module:attribute"),
        (":SERVICES", "not of the form"),
        ("clusterlab.no_such_module:x", "cannot import clusterlab.no_such_module"),
        ("clusterlab.harness.services:nothing", "has no 'nothing'"),
    ],
)
def test_import_object_says_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        import_object(spec)


def test_sample_services_load_by_name_or_module_factory() -> None:
    assert load_service_factory("kv") is SERVICES["kv"]
    assert load_service_factory("clusterlab.harness.services.counter:CounterService") is SERVICES["counter"]
    with pytest.raises(ConfigError, match="unknown service 'nosuch'"):
        load_service_factory("nosuch")
    with pytest.raises(ConfigError, match="cannot import"):
        load_service_factory("no.such.module:factory")


def test_open_recorder_is_null_without_a_trace_dir_and_the_harness_recorder_with_one(tmp_path: Path) -> None:
    assert isinstance(open_recorder(None, "run-1", "node-0"), NullRecorder)
    rec = open_recorder(tmp_path, "run-1", "node-0", member_id=0, incarnation=0)
    try:
        assert isinstance(rec, ProcessRecorder)
    finally:
        rec.close()
