"""golden verify's message-diff lines say where two payloads differ, also when their one-line
descriptions are alike (an undecodable payload is described by its first bytes only)."""

from __future__ import annotations

from clusterlab.golden.spark_diff import MessageDiff
from clusterlab.golden.verify import describe_message_diff


def test_the_first_differing_byte_is_named_with_the_bytes_around_it() -> None:
    golden = b'{"id": 8, "op": "add", "value": 3}' + bytes(40)
    actual = b'{"id": 8, "op": "add", "value": 6}' + bytes(40)
    first = {
        "process": "node-0", "incarnation": 0, "seq": 7, "wall_ns": 5,
        "golden_payload": golden.hex(), "actual_payload": actual.hex(),
        "golden_direction": "send", "actual_direction": "send",
    }  # fmt: skip
    lines = describe_message_diff(MessageDiff("g", 10, 10, 1, first))
    (where,) = [line for line in lines if "first differing byte" in line]
    assert "offset 32 of 74/74" in where
    assert f"golden …{golden[26:44].hex()} actual …{actual[26:44].hex()}" in where


def test_identical_or_missing_payloads_add_no_byte_line() -> None:
    payload = b"\x01\x02".hex()
    for golden, actual in ((payload, payload), (payload, None)):
        first = {"process": "node-0", "incarnation": 0, "seq": 1, "wall_ns": 0,
                 "golden_payload": golden, "actual_payload": actual}  # fmt: skip
        assert not any(
            "first differing byte" in line for line in describe_message_diff(MessageDiff("g", 1, 1, 1, first))
        )
