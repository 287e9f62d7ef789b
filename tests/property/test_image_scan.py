"""A restore through the sqlite store's ``image_scan`` is the restore through ``scan``.

``SqliteOrderingStore.rebuild`` validates every held blob as it loads the changelog,
and ``image_scan`` then yields a placeholder (``VALIDATED_HELD``) in place of each held
body, so that the engine's restore does not read the bodies back from disk. Property:
over random changelog replays (valid and corrupt held blobs, overwrites, tombstones,
coverage rows, name bindings, the version entry present, absent or wrong),
``load_image(image_items(store))`` gives the same image, or the same refusal, as
``load_image(store.scan())``, for the native codec and the pure-Python reference alike.
No broker: sqlite is the standard library's.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parsley.engine import state_codec as sc
from parsley.engine.channel import ChannelId
from parsley.native import NATIVE
from parsley.refusals import ParsleyFailClosedError
from workers import ordering_store
from workers.ordering_store import SqliteOrderingStore

CHANNELS = [ChannelId(uuid.UUID(int=(7 << 64) + i), i % 2) for i in range(1, 3)]

LOADERS: list[Callable[[Iterable[tuple[bytes, bytes]]], sc.OrderingImage]] = [
    sc.reference_load_image]
if NATIVE is not None:
    LOADERS.append(NATIVE.load_image)


def _held_blob(position: int) -> bytes:
    return sc.reference_encode_held(
        sc.HeldMessage(timestamp_ms=position, key=b"k", value=b"x" * (position % 40)))


@st.composite
def _records(draw: Any) -> list[tuple[bytes, bytes | None]]:
    """A changelog replay, in offset order: (key, value-or-tombstone)."""
    records: list[tuple[bytes, bytes | None]] = []
    version = draw(st.sampled_from([sc.VERSION_VALUE, sc.VERSION_VALUE, None, b"\x02"]))
    if version is not None:
        records.append((sc.VERSION_KEY, version))
    for ch in CHANNELS:
        coverage = draw(st.integers(min_value=-1, max_value=12))
        records.append((sc.fed_key(ch), sc.encode_long(coverage)))
    if draw(st.booleans()):
        records.append((sc.name_key("a"), sc.encode_binding(CHANNELS[0].topic_id)))
    for ch in draw(st.lists(st.sampled_from(CHANNELS), max_size=2)):
        records.append((sc.frontier_key(ch), sc.encode_long(draw(st.integers(0, 9)))))
        records.append((sc.past_key(ch), sc.encode_long(draw(st.integers(0, 9)))))
    # Keys the restore refuses, at the edges of the held range: empty, a bare 'h', held
    # keys of other lengths, and unknown tags just below and above it.
    odd = st.sampled_from([b"", b"h", b"h" + bytes(5), b"h" + bytes(30), b"g", b"i\x00",
                           b"z"])
    for key in draw(st.lists(odd, max_size=1)):
        records.append((key, draw(st.sampled_from([_held_blob(1), b"\x01"]))))
    ops = draw(st.lists(st.tuples(
        st.sampled_from(CHANNELS), st.integers(min_value=0, max_value=14),
        st.sampled_from(["valid", "valid", "corrupt", "tombstone"]),
        st.binary(max_size=12)), max_size=30))
    for ch, position, kind, junk in ops:
        key = sc.held_key(ch, position)
        if kind == "valid":
            records.append((key, _held_blob(position)))
        elif kind == "corrupt":
            records.append((key, junk))
        else:
            records.append((key, None))
    return records


def _outcome(load: Callable[[Iterable[tuple[bytes, bytes]]], sc.OrderingImage],
             items: Iterable[tuple[bytes, bytes]]) -> object:
    try:
        image = load(items)
    except ParsleyFailClosedError as exc:
        return ("refused", exc.reason, exc.detail)
    return ("image", image.has_version, image.fed, image.frontier, image.past,
            image.names, image.held)


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages of 2 rows, so that every scan resumes after its last key many times."""
    monkeypatch.setattr(ordering_store, "_SCAN_PAGE", 2)


@pytest.mark.slow
@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=_records())
def test_the_image_scan_restores_what_the_full_scan_restores(
        small_pages: None, records: list[tuple[bytes, bytes | None]]) -> None:
    with tempfile.TemporaryDirectory() as tmp, SqliteOrderingStore.create(tmp) as store:
        store.rebuild(records)
        for load in LOADERS:
            assert _outcome(load, sc.image_items(store)) == _outcome(load, store.scan())


def test_held_bodies_are_not_read_back_after_a_sound_rebuild(tmp_path: Any) -> None:
    records = [(sc.VERSION_KEY, sc.VERSION_VALUE),
               (sc.fed_key(CHANNELS[0]), sc.encode_long(5))]
    records += [(sc.held_key(CHANNELS[0], p), _held_blob(p)) for p in range(5)]
    with SqliteOrderingStore.create(tmp_path) as store:
        store.rebuild(records)
        items = list(sc.image_items(store))
        assert [k for k, _ in items] == [k for k, _ in store.scan()]
        held = [v for k, v in items if k[:1] == b"h"]
        assert held == [sc.VALIDATED_HELD] * 5
        assert store.get(sc.held_key(CHANNELS[0], 3)) == _held_blob(3), "the body stays stored"


def test_a_corrupt_held_blob_or_a_write_after_the_rebuild_reads_the_bodies(
        tmp_path: Any) -> None:
    good = [(sc.VERSION_KEY, sc.VERSION_VALUE), (sc.fed_key(CHANNELS[0]), sc.encode_long(5)),
            (sc.held_key(CHANNELS[0], 1), _held_blob(1))]
    corrupt = (sc.held_key(CHANNELS[0], 2), b"\x09junk")
    with SqliteOrderingStore.create(tmp_path) as store:
        store.rebuild([*good, corrupt])
        assert list(sc.image_items(store)) == list(store.scan())
        store.rebuild([*good, corrupt, (sc.held_key(CHANNELS[0], 2), None)])
        assert sc.VALIDATED_HELD in [v for _, v in sc.image_items(store)], (
            "a corrupt blob deleted later does not count")
        store.put(sc.held_key(CHANNELS[0], 3), _held_blob(3))
        assert list(sc.image_items(store)) == list(store.scan())


def test_a_write_during_the_image_scan_is_refused(tmp_path: Any, small_pages: None) -> None:
    records = [(sc.VERSION_KEY, sc.VERSION_VALUE), (sc.fed_key(CHANNELS[0]), sc.encode_long(9))]
    records += [(sc.held_key(CHANNELS[0], p), _held_blob(p)) for p in range(8)]
    with SqliteOrderingStore.create(tmp_path) as store:
        store.rebuild(records)
        items = store.image_scan()
        assert next(items)[0] == sc.fed_key(CHANNELS[0])
        assert next(items)[1] == sc.VALIDATED_HELD
        store.delete(sc.held_key(CHANNELS[0], 7))
        with pytest.raises(RuntimeError, match="written during its image scan"):
            list(items)
