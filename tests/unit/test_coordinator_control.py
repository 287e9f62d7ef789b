"""The control socket's one-reply rule under handlers that misbehave (docs/operations.md, "The
control socket").

No broker: a ZeroMQ REP socket on an ipc path under ``tmp_path``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from coordinator.control.status_socket import BadRequest, ControlServer, Outcome, request
from coordinator.runtime.api import MAX_CONTROL_STOP_DEADLINE_S, control_stop_deadline


def _server(tmp_path: Path) -> ControlServer:
    def unencodable(req: Any) -> dict[str, Any]:
        return {"status": {"odd": {1, 2}}}  # a set: orjson cannot encode it

    def own_value_error(req: Any) -> dict[str, Any]:
        raise ValueError("the handler's own bug")

    def bad_argument(req: Any) -> dict[str, Any]:
        raise BadRequest("deadline_s must be a number")

    return ControlServer(f"ipc://{tmp_path}/ctl.ipc", {
        "ping": lambda req: {"pong": True},
        "status": unencodable,
        "oops": own_value_error,
        "stop": bad_argument,
    })


def test_an_unencodable_reply_is_failed_and_serving_goes_on(tmp_path: Path) -> None:
    server = _server(tmp_path)
    try:
        for _ in range(3):
            reply = request(server.endpoint, {"op": "status"}, timeout_s=3)
            assert reply["outcome"] == Outcome.FAILED.value
            assert reply["op"] == "status"
            assert "could not be built" in reply["error"]
            assert request(server.endpoint, {"op": "ping"}, timeout_s=3) == {
                "outcome": Outcome.OK.value, "op": "ping", "pong": True}
    finally:
        server.close()


def test_reply_bytes_always_decodes_to_one_reply_with_an_outcome(tmp_path: Path) -> None:
    server = _server(tmp_path)
    try:
        for raw in (b'{"op": "status"}', b'{"op": "ping"}', b"\xff", b"{}", b'{"op": 3}',
                    b'{"op": "oops"}', b'{"op": "stop"}', b'{"op": "nope"}'):
            reply = orjson.loads(server.reply_bytes(raw))
            assert reply["outcome"] in {o.value for o in Outcome}, raw
    finally:
        server.close()


def test_only_argument_validation_is_malformed_a_handlers_value_error_is_failed(
        tmp_path: Path) -> None:
    server = _server(tmp_path)
    try:
        own = request(server.endpoint, {"op": "oops"}, timeout_s=3)
        assert own["outcome"] == Outcome.FAILED.value
        assert own["error"] == "ValueError: the handler's own bug"
        bad = request(server.endpoint, {"op": "stop"}, timeout_s=3)
        assert bad["outcome"] == Outcome.MALFORMED_REQUEST.value
        assert bad["error"] == "deadline_s must be a number"
    finally:
        server.close()


def test_a_control_stop_deadline_is_validated_and_capped() -> None:
    assert control_stop_deadline(None) == (None, None)
    assert control_stop_deadline(0) == (0.0, None)
    assert control_stop_deadline(2.5) == (2.5, None)
    assert control_stop_deadline(MAX_CONTROL_STOP_DEADLINE_S) == (MAX_CONTROL_STOP_DEADLINE_S, None)
    capped, note = control_stop_deadline(1e9)
    assert capped == MAX_CONTROL_STOP_DEADLINE_S == 300.0
    assert note is not None and "1e+09 capped to 300 s" in note
    for bad in (-1, True, "10", float("nan"), float("inf"), [1]):
        with pytest.raises(BadRequest, match="deadline_s must be a number >= 0"):
            control_stop_deadline(bad)
