"""Type stubs for the extension module ``parsley._native`` (the crate in ``native/``).

Each function mirrors the pure-Python reference named in its docstring; see those
for shapes, units and refusals.
"""

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from parsley.engine.channel import ChannelId
from parsley.engine.state_codec import HeldMessage, OrderingImage

def version() -> str: ...

# parsley.causes codec (native/src/py_wire.rs; reference: parsley.wire.reference_*)
def decode_causes(value: bytes | bytearray | memoryview | None, /) -> dict[ChannelId, int]: ...
def encode_causes(causes: Mapping[ChannelId, int], /) -> bytes: ...
def encoded_size(causes: Mapping[ChannelId, int], /) -> int: ...
def clear_channel_cache() -> None: ...
def channel_cache_size() -> tuple[int, int, int]: ...
def decode_count(value: bytes | None, /) -> int: ...
def decode_pairs(value: bytes | None, /) -> tuple[tuple[ChannelId, int], ...]: ...
def bench_decode(value: bytes, rounds: int, /) -> float: ...
def bench_encode(value: bytes, rounds: int, /) -> float: ...

# ordering-state codec (native/src/py_state_codec.rs; reference:
# parsley.engine.state_codec.reference_*)
def decode_held(blob: bytes, /) -> HeldMessage: ...
def encode_held(m: HeldMessage, /) -> bytes: ...
def validate_held(blob: bytes, /) -> None: ...
def load_image(items: Iterable[tuple[bytes, bytes]], /) -> OrderingImage: ...

# the ordering engine's hot path (native/src/engine/, adapted by native/src/py_engine/; reference:
# parsley.engine.engine.ProcessEngine, completed by parsley.engine.shell.EngineShell
# and parsley.engine.native_engine)
class EngineCore:
    _budget: int
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    def _setup(self, store: Any, received: list[Any], budget: int,
               on_warning: Callable[[str], None] | None, cross_refuse: bool, sabotage: int,
               stamp_version: bool, fed: Mapping[Any, int], frontier: Mapping[Any, int],
               past: Mapping[Any, int], held: Mapping[Any, list[int]],
               labels: Mapping[Any, str]) -> None: ...
    def _set_labels(self, labels: Mapping[Any, str]) -> None: ...
    def _advance_fed(self, ch: Any, position: int) -> None: ...
    def _prune(self, dead: list[bytes]) -> bool: ...
    def _held_heads(self) -> list[tuple[Any, tuple[int, ...], tuple[tuple[Any, int], ...]]]: ...
    def _take_rows(self) -> list[tuple[bytes, bytes | None]]: ...
    def _frontier_dict(self) -> dict[Any, int]: ...
    def _past_dict(self) -> dict[Any, int]: ...
    def _state_topics(self) -> frozenset[bytes]: ...
    def _memory(self) -> tuple[list[tuple[Any, int]], dict[Any, Any], Any]: ...
    def start(self, start_positions: Mapping[Any, int]) -> None: ...
    @property
    def started(self) -> bool: ...
    def receive(self, msg: Any) -> Any: ...
    def feed_records(self, records: Iterable[Any],
                     channels: Mapping[str, Any]) -> tuple[int, int, dict[str, int]]: ...
    def deliver_next(self) -> Any: ...
    def deliver_batch(self, limit: int) -> list[tuple[Any, ...]]: ...
    def causes_header(self) -> bytes: ...
    def covered(self, ch: Any) -> int | None: ...
    def settled(self, ch: Any) -> int | None: ...
    def session_floor(self, ch: Any) -> int | None: ...
    def held_count(self, ch: Any = None) -> int: ...
    def held_positions(self, ch: Any) -> tuple[int, ...]: ...
    def frontier_bytes(self) -> int: ...
    def cross_partition_causes(self) -> int: ...
    def waited_count(self) -> int: ...

# the worker's per-record path (native/src/py_fetch.rs; references: workers.fetched for
# split_errors, parsley.frame.HandlerFrame and workers.step.TaskStep.drain for FastFrame)
def split_errors(records: list[Any]) -> tuple[list[Any], list[Any]]: ...

_Decoder = Callable[[bytes], Any]
_Encoder = Callable[[Any], bytes | None]

class FastFrame:
    """The handler frame's and the step's common case, per delivery batch, in Rust
    (``workers.fastpath`` builds it with ``fast_frame`` and says what it covers;
    ``workers.step.TaskStep.drain`` drives it).

    Args:
        inputs: ``{id(channel): (topic, partition, handler, decode_key, decode_value,
            max_records)}`` for the received channels whose serdes are built in, keyed by
            the identity of the channel object the engine hands back in each entry;
            ``max_records`` is a batch handler's (``Process.receives_batch``), ``None`` for
            a per-record handler (``HandlerFrame.fast_plans``).
        outputs: ``{name: (topic, encode_key, encode_value)}`` for the declared outputs
            whose serdes are built in; ``None`` for a BYTES encoder.
        frame: the task's ``HandlerFrame`` (its latch is read); state: its ``State`` view.
        classes: ``(Delivery, Effects, Send, Channel)``; a send's output is found by its
            channel object when that is exactly a ``Channel`` (up to 8 remembered).
        produce: the producer's ``produce``, called by position as confluent-kafka's
            ``Producer.produce(topic, value, key, partition, callback, on_delivery,
            timestamp, headers)``; on_delivery: the ledger's callback (passed as
            ``callback``).
        causes_key: the ``parsley.causes`` header name.

    Raises:
        ValueError: a ``max_records`` below 1 (OverflowError: one past ``size_t``).
        TypeError, IndexError: plans of another shape; TypeError: a ``Delivery`` that
            ``object.__new__`` does not allocate with ``PyType_GenericAlloc``.
    """

    def __init__(
        self,
        inputs: dict[int, tuple[str, int, Callable[[Any, Any], Any], _Decoder, _Decoder,
                                int | None]],
        outputs: dict[str, tuple[str, _Encoder | None, _Encoder | None]],
        frame: Any,
        state: Any,
        classes: tuple[type[Any], type[Any], type[Any], type[Any]],
        produce: Callable[..., Any],
        on_delivery: Callable[[Any, Any], Any],
        causes_key: str,
    ) -> None: ...
    def run(self, batch: list[tuple[Any, ...]], start: int,
            ) -> tuple[int, int, int, float, tuple[int, int, Any, float] | None]:
        """Handle ``batch``'s entries (``deliver_batch`` tuples ``(channel, position,
        timestamp_ms, key, value, headers, causes)``) from ``start`` until one needs the
        Python frame.

        Returns:
            ``(handled, sent, calls, slowest_s, stop)``: entries fully handled, sends
            produced, batch-handler calls made (each counted once the handler was called,
            returned or raised), the longest one entry took (s; a run's time divided by its
            entries), and ``None`` at the end of the batch or ``(index, kind, payload,
            spent_s)`` for the entry handed back (a batch handler's run: its first entry):
            ``kind`` one of ``workers.fastpath.STOP_*``, whose docstrings give each
            ``payload``, ``spent_s`` the time already spent on it, s.

        Raises:
            TypeError: ``batch`` is not a list of tuples.
            BaseException: what a handler, serde or ``produce`` raised that is not an
                ``Exception`` (KeyboardInterrupt, SystemExit), as it is; ``partial()``
                then has what was done.
        """
    def partial(self) -> tuple[int, int, int]:
        """``(handled, sent, calls)`` of the current or last :meth:`run` so far: what a
        ``run`` that raised had done."""


class Constructors:
    """The native ``Send`` and ``Effects`` constructors (``parsley.effects._make_send`` and
    ``Effects.send``): built in Rust when no check can fail, else
    ``python_send(channel, key, value, headers, timestamp)`` is called, which checks,
    refuses or builds (native/src/py_effects.rs). Pickled as ``reduce_to()``.

    Raises:
        TypeError: ``send`` or ``effects`` is not made by ``object.__new__`` with
            ``PyType_GenericAlloc``.
    """

    def __init__(self, send: type[Any], effects: type[Any], channel: type[Any],
                 python_send: Callable[..., Any], reduce_to: Callable[[], Any]) -> None: ...
    def send(self, channel: Any, key: Any, value: Any, headers: Any = None,
             timestamp: int | None = None) -> Any: ...
    def effects_send(self, channel: Any, key: Any, value: Any, headers: Any = None,
                     timestamp: int | None = None) -> Any: ...


class ClassOnly:
    """A descriptor: ``on_class`` when read on its class, ``AttributeError(message)`` (with
    ``name`` and the instance) when read on an instance (``Effects.send``)."""

    def __init__(self, on_class: Any, name: str, message: str) -> None: ...
    def __get__(self, obj: Any, owner: Any = None) -> Any: ...
