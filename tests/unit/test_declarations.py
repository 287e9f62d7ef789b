"""Declarations: values, builder, effects, cluster names and start-time validation."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from multiprocess.reduction import ForkingPickler

from parsley.declarations import (
    EARLIEST,
    LATEST,
    TASK_ID_MIN_DIGITS,
    Channel,
    Delivery,
    Effects,
    Process,
    State,
    Store,
    application_id,
    group_instance_id,
    ordering_changelog,
    same_store,
    store_changelog,
    task_width,
    transactional_id,
    validate_declarations,
)
from parsley.refusals import ParsleyFailClosedError, Reason
from parsley.serdes import BYTES, JSON, STRING

ROOT_DIR = Path(__file__).resolve().parents[2]

ORDERS: Channel[str, Any] = Channel("orders", STRING, JSON)
AUDIT: Channel[str, Any] = Channel("audit", STRING, JSON)
COUNTS: Store[str, int] = Store("counts", STRING, JSON)


def _none(delivery: Delivery[Any, Any], state: State) -> Effects:
    return Effects.none()


# --- Channel and Store -------------------------------------------------------------


def test_channel_starts_at_earliest_and_starting_at_returns_a_copy() -> None:
    assert ORDERS.initial_position is EARLIEST
    late = ORDERS.starting_at(LATEST)
    assert late.initial_position is LATEST
    assert ORDERS.initial_position is EARLIEST, "starting_at must not change the original"
    assert (late.name, late.key_serde, late.value_serde) == ("orders", STRING, JSON)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "channel name must not be blank"),
        ("   ", "channel name must not be blank"),
        ("x-__parsley.y", "channel name 'x-__parsley.y' uses the reserved prefix __parsley."),
        ("a b", "channel name 'a b' is not a legal Kafka topic name part"),
        ("..", "channel name '..' is not a legal Kafka topic name part"),
        ("t" * 250, "is over 249 characters"),
    ],
)
def test_bad_channel_names_are_refused(name: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        Channel(name, STRING, STRING)


def test_composed_ordering_changelog_is_a_reserved_channel_name() -> None:
    with pytest.raises(ValueError, match="uses the reserved prefix"):
        Channel(ordering_changelog("x", "p"), STRING, STRING)


def test_channel_and_store_check_their_serdes_and_types() -> None:
    with pytest.raises(TypeError, match="channel 'orders' value serde must have callable"):
        Channel("orders", STRING, object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="store 'counts' key serde must have callable"):
        Store("counts", "utf-8", JSON)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="channel name must be a str, got int"):
        Channel(7, STRING, STRING)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="initial position must be EARLIEST or LATEST"):
        Channel("orders", STRING, STRING, "latest")  # type: ignore[arg-type]


def test_store_names_are_checked() -> None:
    with pytest.raises(ValueError, match="store name must not be blank"):
        Store(" ", STRING, STRING)
    with pytest.raises(ValueError, match=r"store name '__parsley\.x' uses the reserved prefix"):
        Store("__parsley.x", STRING, STRING)


def test_same_store_is_name_and_equivalent_serdes() -> None:
    assert same_store(COUNTS, COUNTS)
    assert same_store(COUNTS, Store("counts", STRING, JSON)), "an equal look-alike is the same"
    assert not same_store(COUNTS, Store("counts", STRING, BYTES)), "other serdes"
    assert not same_store(COUNTS, Store("totals", STRING, JSON)), "other name"


# --- Process builder -----------------------------------------------------------------


def test_chained_builder_accumulates_and_leaves_earlier_steps_unchanged() -> None:
    base = Process("tally")
    one = base.receives(ORDERS, _none)
    full = one.sends(AUDIT).stores(COUNTS).receives(AUDIT, _none)
    assert base.inputs == () and one.outputs == () and one.declared_stores == ()
    assert full.received_topics == ("orders", "audit")
    assert full.outputs == (AUDIT,)
    assert full.declared_stores == (COUNTS,)
    assert full.input("orders") is not None and full.input("orders").handler is _none  # type: ignore[union-attr]
    assert full.output("audit") is AUDIT and full.output("orders") is None
    assert full.store("counts") is COUNTS and full.store("nope") is None
    more = full.sends(Channel("dlq", BYTES, BYTES)).stores(Store("seen", STRING, JSON))
    assert [c.name for c in more.outputs] == ["audit", "dlq"]
    assert [s.name for s in more.declared_stores] == ["counts", "seen"]


def test_builder_refuses_duplicates_and_bad_arguments() -> None:
    p = Process("tally").receives(ORDERS, _none).sends(AUDIT).stores(COUNTS)
    with pytest.raises(ValueError, match="process 'tally' receives channel 'orders' twice"):
        p.receives(Channel("orders", BYTES, BYTES), _none)
    with pytest.raises(ValueError, match="process 'tally' declares send channel 'audit' twice"):
        p.sends(Channel("audit", BYTES, BYTES))
    with pytest.raises(ValueError, match="process 'q' declares send channel 'x' twice"):
        Process("q").sends(Channel("x", BYTES, BYTES), Channel("x", BYTES, BYTES))
    with pytest.raises(ValueError, match="process 'tally' declares store 'counts' twice"):
        p.stores(Store("counts", BYTES, BYTES))
    with pytest.raises(TypeError, match="process 'tally': handler for 'audit' is not callable"):
        p.receives(AUDIT, "not a function")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"process 'tally': receives\(\) needs a Channel"):
        p.receives("orders", _none)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="process name must not be blank"):
        Process("")
    with pytest.raises(ValueError, match=r"process name 'a__parsley\.b' uses the reserved prefix"):
        Process("a__parsley.b")


# --- Effects -------------------------------------------------------------------------


def test_effects_builder_keeps_order_and_fields() -> None:
    builder = (Effects.builder()
               .send(AUDIT, "k1", {"n": 1})
               .put(COUNTS, "a", 1)
               .send(AUDIT, "k2", None, headers={"trace": b"t"}, timestamp=5)
               .delete(COUNTS, "b"))
    effects = builder.build()
    assert [(s.key, s.value, s.headers, s.timestamp_ms) for s in effects.sends] == [
        ("k1", {"n": 1}, (), None), ("k2", None, (("trace", b"t"),), 5)]
    assert [(w.store, w.key, w.value) for w in effects.writes] == [
        (COUNTS, "a", 1), (COUNTS, "b", None)]
    builder.put(COUNTS, "c", 3)
    assert len(effects.writes) == 2, "a built Effects must not see later builder calls"
    assert Effects.none() == Effects() and Effects.none().sends == () == Effects.none().writes


def test_headers_as_pairs_keep_order_and_null_values() -> None:
    effects = Effects.builder().send(AUDIT, "k", 1, headers=[("b", None), ("a", bytearray(b"x"))])
    assert effects.build().sends[0].headers == (("b", None), ("a", b"x"))


def test_reserved_application_header_is_refused_at_the_builder() -> None:
    with pytest.raises(ParsleyFailClosedError) as info:
        Effects.builder().send(AUDIT, "k", 1, headers=[("parsley.causes", b"\x01\x00")])
    assert info.value.reason is Reason.RESERVED_HEADER_USED
    # Seed 001 gives one shape for the reason, the emission's own headers included.
    assert info.value.detail == "serializer for audit wrote reserved header 'parsley.causes'"


def test_builder_refuses_negative_timestamp_null_put_and_bad_headers() -> None:
    with pytest.raises(ValueError, match="audit: timestamp must be >= 0 ms, got -1"):
        Effects.builder().send(AUDIT, "k", 1, timestamp=-1)
    with pytest.raises(ValueError, match=r"counts: put needs a value; use delete\(store, key\)"):
        Effects.builder().put(COUNTS, "k", None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="audit: header 'h' value must be bytes or None, got str"):
        Effects.builder().send(AUDIT, "k", 1, headers={"h": "text"})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="audit: a header key must be a str"):
        Effects.builder().send(AUDIT, "k", 1, headers=[(1, b"")])  # type: ignore[list-item]


def test_builder_and_constructor_check_a_send_alike() -> None:
    # The builder fills a Send without the class call: the same checks, the same values.
    import enum

    from parsley.effects import Send, Write

    class Ms(enum.IntEnum):
        T = 5

    for bad, error in ((True, TypeError), (1.5, TypeError), ("7", TypeError),
                       (-1, ValueError), (2**63, ValueError), (2**70, ValueError),
                       (Ms.T, None), (0, None), (None, None), (2**63 - 1, None)):
        for make in (lambda ts: Effects.builder().send(AUDIT, "k", 1, timestamp=ts).build()
                     .sends[0],
                     lambda ts: Effects.send(AUDIT, "k", 1, timestamp=ts).sends[0],
                     lambda ts: Send(AUDIT, "k", 1, None, ts)):
            if error is None:
                send = make(bad)
                assert send == Send(AUDIT, "k", 1, (), bad)
                assert (send.channel, send.key, send.value, send.headers,
                        send.timestamp_ms) == (AUDIT, "k", 1, (), bad)
            else:
                with pytest.raises(error, match="audit: timestamp must be"):
                    make(bad)
    with pytest.raises(TypeError, match="send needs a Channel, got str"):
        Effects.builder().send("audit", "k", 1)  # type: ignore[arg-type]
    effects = Effects.builder().send(AUDIT, "k", 1).send(AUDIT, "j", 2).build()
    assert [s.key for s in effects.sends] == ["k", "j"] and effects.writes == ()
    assert Effects.builder().put(COUNTS, "k", 3).delete(COUNTS, "j").build().writes == (
        Write(COUNTS, "k", 3), Write(COUNTS, "j", None))


@pytest.mark.parametrize("args, kwargs", [
    ((AUDIT, "k", 1), {}),
    ((AUDIT, None, None), {}),
    ((AUDIT, "k", 1), {"headers": {"h": b"1", "g": None}}),
    ((AUDIT, "k", 1), {"headers": [("b", None), ("a", bytearray(b"x"))], "timestamp": 7}),
    ((AUDIT, "k", 1), {"timestamp": 0}),
    ((AUDIT, "k", 1), {"timestamp": -1}),
    ((AUDIT, "k", 1), {"timestamp": True}),
    ((AUDIT, "k", 1), {"headers": {"h": "text"}}),
    ((AUDIT, "k", 1), {"headers": [(1, b"")]}),
    ((AUDIT, "k", 1), {"headers": [("parsley.causes", b"\x01\x00")]}),
    (("audit", "k", 1), {}),
])
def test_the_one_send_constructor_is_the_builder_of_one_send(args: Any, kwargs: Any) -> None:
    # Effects.send is the relay's short cut: equal Effects, or the same error in the
    # same words, for every argument the builder takes or refuses.
    def outcome(make: Any) -> Any:
        try:
            return make()
        except Exception as error:  # compared below: its type, reason and words
            return (type(error), getattr(error, "reason", None), str(error))

    by_builder = outcome(lambda: Effects.builder().send(*args, **kwargs).build())
    by_one = outcome(lambda: Effects.send(*args, **kwargs))
    assert by_one == by_builder
    if isinstance(by_one, Effects):
        assert type(by_one.sends) is tuple and type(by_one.writes) is tuple
        assert len(by_one.sends) == 1 and by_one.writes == ()


def test_the_one_send_constructor_does_not_chain() -> None:
    # Effects.send(a, ...).send(b, ...) would drop a's send: it is the class's alone.
    effects = Effects.send(AUDIT, "k", 1)
    with pytest.raises(AttributeError, match=r"'Effects' object has no attribute 'send': "
                       r".*does not chain.*Effects\.builder\(\)"):
        effects.send(AUDIT, "j", 2)  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match=r"'Effects' object has no attribute 'sendd'$"):
        effects.sendd  # type: ignore[attr-defined]  # noqa: B018
    assert Effects.builder().send(AUDIT, "k", 1).send(AUDIT, "j", 2).build().sends[1].key == "j"


# --- names on the cluster --------------------------------------------------------------


def test_composed_names() -> None:
    assert application_id("shop", "tally") == "shop-tally"
    assert ordering_changelog("shop", "tally") == "shop-tally-__parsley.ordering-changelog"
    assert store_changelog("shop", "tally", "counts") == "shop-tally-counts-changelog"
    assert transactional_id("shop", "tally", 7) == "shop-tally-task-007"
    assert group_instance_id("shop", "tally", 7) == "shop-tally-task-007"
    assert transactional_id("shop", "tally", 0, 4) == "shop-tally-task-000"
    assert TASK_ID_MIN_DIGITS == 3


@pytest.mark.parametrize("width", [1, 12, 1000, 1001, 12345])
def test_instance_ids_sort_in_task_order(width: int) -> None:
    ids = [group_instance_id("p", "q", i, width) for i in range(width)]
    assert sorted(ids) == ids, f"ids for W={width} must sort in task order"
    assert len(set(ids)) == width
    assert ids == [transactional_id("p", "q", i, width) for i in range(width)]


def test_task_numbers_are_checked() -> None:
    with pytest.raises(ValueError, match=r"task 4 is outside 0\.\.3"):
        transactional_id("p", "q", 4, 4)
    with pytest.raises(ValueError, match="a task number is an int >= 0, got -1"):
        group_instance_id("p", "q", -1)


def test_task_width_is_the_widest_received_topic() -> None:
    assert task_width({"orders": 3, "payments": 8, "refunds": 1}) == 8
    assert task_width([2]) == 2
    with pytest.raises(ValueError, match="needs at least one received topic"):
        task_width({})
    with pytest.raises(ValueError, match=r"partition counts must be ints >= 1, got \[0\]"):
        task_width([0])


# --- validate_declarations (docs/operations.md "Running", step 1) ------------------------


def test_valid_declarations_pass() -> None:
    tally = Process("tally").receives(ORDERS, _none).sends(AUDIT).stores(COUNTS)
    audit = Process("auditor").receives(AUDIT, _none).stores(COUNTS)
    validate_declarations("shop", [tally, audit])


def _one(name: str, *stores: Store[Any, Any], topic: str = "orders") -> Process:
    return Process(name).receives(Channel(topic, STRING, STRING), _none).stores(*stores)


@pytest.mark.parametrize(
    ("prefix", "processes", "message"),
    [
        ("shop", [], "at least one process must be declared"),
        ("shop", [_one("p"), _one("p")], "process name 'p' is declared twice"),
        ("shop", [Process("idle")],
         "process 'idle' receives nothing; declare receives(channel, handler)"),
        ("shop", [_one("p", Store("x-s", STRING, STRING)), _one("p-x", Store("s", STRING, STRING))],
         "the changelog of store 's' of 'p-x' and the changelog of store 'x-s' of 'p' both compose "
         "the name 'shop-p-x-s-changelog'"),
        ("shop", [_one("p", Store("s", STRING, STRING), topic="shop-p-s-changelog")],
         "process 'p' declares topic 'shop-p-s-changelog', which is the changelog of store 's' of "
         "'p'"),
        ("shop", [_one("p", Store("s", STRING, STRING)),
                  Process("q").receives(ORDERS, _none).sends(Channel("shop-p-s-changelog", BYTES,
                                                                     BYTES))],
         "process 'q' declares topic 'shop-p-s-changelog', which is the changelog of store 's' of "
         "'p'"),
        ("", [_one("p")], "application id prefix name must not be blank"),
        ("a__parsley.b", [_one("p")], "uses the reserved prefix"),
        ("x" * 230, [_one("p")], "is longer than 249 characters; shorten the prefix"),
    ],
)
def test_invalid_declarations_are_refused(prefix: str, processes: list[Process],
                                          message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        validate_declarations(prefix, processes)


def test_validate_declarations_refuses_a_non_process() -> None:
    with pytest.raises(TypeError, match="expected a Process, got str"):
        validate_declarations("shop", ["tally"])  # type: ignore[list-item]


# --- pickling into a spawned process ------------------------------------------------------


def _closure_process() -> Process:
    seen = Store("seen", STRING, JSON)
    weight = 3  # captured by the closure

    def handler(delivery: Delivery[str, Any], state: State) -> Effects:
        count = (state.get(seen, delivery.key) or 0) + weight
        return Effects.builder().put(seen, delivery.key, count).send(AUDIT, "k", count).build()

    return Process("tally").receives(ORDERS, handler).sends(AUDIT).stores(seen)


def test_declarations_with_closures_pickle_with_multiprocess() -> None:
    process = _closure_process()
    copy = ForkingPickler.loads(bytes(ForkingPickler.dumps(process)))
    assert copy.name == "tally" and copy.received_topics == ("orders",)
    assert copy.outputs == process.outputs and copy.declared_stores == process.declared_stores

    class _Reads:
        def __init__(self) -> None:
            self.stores: list[Store[Any, Any]] = []

        def get(self, store: Store[Any, Any], key: Any) -> Any:
            self.stores.append(store)
            return 4

    state = _Reads()
    effects = copy.inputs[0].handler(Delivery("orders", 0, 0, 0, "a", None), state)
    assert effects.writes[0].value == 7, "the closure's captured weight must survive pickling"
    assert state.stores[0] is copy.declared_stores[0], (
        "the closure's Store and the declared one must be one object after one pickle")


def test_one_name_per_reserved_prefix() -> None:
    # Cluster names and record headers have different reserved prefixes; one name each.
    import parsley.declarations as decl
    from parsley import wire

    assert decl.RESERVED_NAME_PREFIX == "__parsley."
    assert wire.RESERVED_PREFIX == "parsley."
    assert not hasattr(decl, "RESERVED_PREFIX"), "collides with wire.RESERVED_PREFIX"
    assert not hasattr(decl, "RESERVED_HEADER_PREFIX"), "duplicates wire.RESERVED_PREFIX"
    assert ordering_changelog("x", "p").endswith(f"-{decl.RESERVED_NAME_PREFIX}ordering-changelog")


def test_the_facade_re_exports_every_declaration_from_its_own_module() -> None:
    import importlib

    import parsley.declarations as decl

    homes = {"parsley.channels": ["EARLIEST", "LATEST", "RESERVED_NAME_PREFIX", "Channel",
                                  "InitialPosition", "Store", "same_store"],
             "parsley.effects": ["BatchHandler", "Delivery", "Effects", "EffectsBuilder",
                                 "Handler", "RefusalLatch", "Send", "State", "Write"],
             "parsley.process": ["Input", "Process"],
             "parsley.naming": ["TASK_ID_MIN_DIGITS", "application_id", "group_instance_id",
                                "ordering_changelog", "store_changelog", "task_width",
                                "transactional_id", "validate_declarations"]}
    exported = sorted(name for names in homes.values() for name in names)
    assert sorted(decl.__all__) == exported
    for module_name, names in homes.items():
        module = importlib.import_module(module_name)
        for name in names:
            assert name in module.__all__, f"{module_name} does not export {name}"
            assert getattr(decl, name) is getattr(module, name), name
    source = (ROOT_DIR / "parsley" / "declarations.py").read_text()
    assert "import *" not in source
    assert len(source.splitlines()) < 120, "declarations.py is a thin facade"
