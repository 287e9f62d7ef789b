"""The sqlite ordering store: the OrderingStore protocol, rebuild, and its speed.

Checked against a plain dict as the reference model (no broker: sqlite is the
standard library's).
"""

from __future__ import annotations

import random
import struct
import time
from pathlib import Path

import pytest

from workers.ordering_store import SqliteOrderingStore, prefix_upper_bound, task_state_dir


def _model_scan(model: dict[bytes, bytes], prefix: bytes) -> list[tuple[bytes, bytes]]:
    return sorted((k, v) for k, v in model.items() if k.startswith(prefix))


def test_put_get_delete_roundtrip(tmp_path: Path) -> None:
    with SqliteOrderingStore.create(tmp_path) as store:
        assert store.get(b"v") is None
        store.put(b"v", b"\x01")
        store.put(b"f" + b"\x00" * 20, struct.pack(">q", 7))
        assert store.get(b"v") == b"\x01"
        store.put(b"v", b"\x02")
        assert store.get(b"v") == b"\x02", "put must replace the previous value"
        store.delete(b"v")
        assert store.get(b"v") is None
        store.delete(b"never-there")  # no error
        assert len(store) == 1
        assert store.get(b"f" + b"\x00" * 20) == struct.pack(">q", 7)


def test_empty_value_is_a_value_not_a_tombstone(tmp_path: Path) -> None:
    with SqliteOrderingStore.create(tmp_path) as store:
        store.put(b"k", b"")
        assert store.get(b"k") == b""
        with pytest.raises(TypeError):
            store.put(b"k", None)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            store.put("k", b"x")  # type: ignore[arg-type]


def test_scan_is_ascending_unsigned_and_prefix_bounded(tmp_path: Path) -> None:
    rng = random.Random(4)
    model: dict[bytes, bytes] = {}
    with SqliteOrderingStore.create(tmp_path) as store:
        for _ in range(3000):
            key = bytes(rng.choice(b"hcf\x00\x7f\x80\xff") for _ in range(rng.randint(0, 5)))
            value = rng.randbytes(rng.randint(0, 8))
            store.put(key, value)
            model[key] = value
        for key in list(model)[::7]:
            store.delete(key)
            del model[key]
        for prefix in [b"", b"h", b"\xff", b"\xff\xff", b"\x7f", b"\x80\xff", b"c\x00", b"zz"]:
            got = list(store.scan(prefix))
            assert got == _model_scan(model, prefix), f"scan({prefix!r}) differs from the model"
        assert [k for k, _ in store.scan()] == sorted(model), "full scan not in bytes order"


def test_scan_tolerates_writes_while_iterating(tmp_path: Path) -> None:
    with SqliteOrderingStore.create(tmp_path) as store:
        for i in range(1000):
            store.put(b"h" + struct.pack(">q", i), b"body%d" % i)
        seen = []
        for key, _value in store.scan(b"h"):
            seen.append(key)
            store.delete(key)  # the engine releases a held message during a scan
        assert len(seen) == 1000
        assert list(store.scan(b"h")) == []


def test_prefix_upper_bound() -> None:
    assert prefix_upper_bound(b"") is None
    assert prefix_upper_bound(b"\xff\xff") is None
    assert prefix_upper_bound(b"h") == b"i"
    assert prefix_upper_bound(b"a\xff") == b"b"
    assert prefix_upper_bound(b"a\x01\xff\xff") == b"a\x02"


def test_rebuild_keeps_latest_per_key_and_clears_first(tmp_path: Path) -> None:
    with SqliteOrderingStore.create(tmp_path) as store:
        store.put(b"stale", b"from a previous life")
        records: list[tuple[bytes, bytes | None]] = [
            (b"a", b"1"),
            (b"b", b"1"),
            (b"a", b"2"),
            (b"c", b"1"),
            (b"b", None),  # tombstone
            (b"d", None),  # tombstone for a key never written
            (b"c", b"2"),
        ]
        n = store.rebuild(records)
        assert n == 2
        assert list(store.scan()) == [(b"a", b"2"), (b"c", b"2")]
        assert store.get(b"stale") is None, "rebuild must clear what was there"


def test_rebuild_across_chunks_matches_model(tmp_path: Path) -> None:
    rng = random.Random(11)
    records: list[tuple[bytes, bytes | None]] = []
    model: dict[bytes, bytes] = {}
    for _ in range(20_000):
        key = b"k%d" % rng.randrange(3000)
        value = None if rng.random() < 0.3 else rng.randbytes(4)
        records.append((key, value))
        if value is None:
            model.pop(key, None)
        else:
            model[key] = value
    with SqliteOrderingStore.create(tmp_path) as store:
        assert store.rebuild(records) == len(model)
        assert list(store.scan()) == sorted(model.items())


def test_failed_rebuild_leaves_store_unchanged(tmp_path: Path) -> None:
    with SqliteOrderingStore.create(tmp_path) as store:
        store.put(b"keep", b"me")
        with pytest.raises(TypeError):
            store.rebuild([(b"a", b"1"), (b"b", 5)])  # type: ignore[list-item]
        assert list(store.scan()) == [(b"keep", b"me")]


def test_create_discards_the_previous_file(tmp_path: Path) -> None:
    with SqliteOrderingStore.create(tmp_path) as store:
        store.put(b"a", b"1")
    (tmp_path / "ordering.sqlite").write_bytes(b"garbage, as after a crash mid-write")
    with SqliteOrderingStore.create(tmp_path) as store:
        assert list(store.scan()) == []


def test_task_state_dir() -> None:
    assert task_state_dir("/s", "p-proc", 3) == Path("/s/p-proc/3")
    with pytest.raises(ValueError):
        task_state_dir("/s", "a/b", 0)
    with pytest.raises(ValueError):
        task_state_dir("/s", "app", -1)


@pytest.mark.slow
def test_rebuild_of_100k_rows_is_fast(tmp_path: Path) -> None:
    rng = random.Random(5)
    channel = rng.randbytes(20)
    records: list[tuple[bytes, bytes | None]] = [
        (b"h" + channel + struct.pack(">q", i), rng.randbytes(120)) for i in range(100_000)
    ]
    with SqliteOrderingStore.create(tmp_path) as store:
        start = time.perf_counter()
        n = store.rebuild(records)
        elapsed = time.perf_counter() - start
        print(f"\nrebuild of {n} rows (150-byte rows): {elapsed:.3f} s")
        assert n == 100_000
        start = time.perf_counter()
        count = sum(1 for _ in store.scan(b"h" + channel))
        print(f"scan of {count} rows: {time.perf_counter() - start:.3f} s")
        assert count == 100_000


def test_satisfies_the_engine_protocol_and_matches_the_in_memory_store(tmp_path: Path) -> None:
    from parsley.engine.store import InMemoryOrderingStore, OrderingStore

    rng = random.Random(23)
    records: list[tuple[bytes, bytes | None]] = []
    for _ in range(5000):
        key = bytes([rng.choice(b"vfcpnh")]) + rng.randbytes(rng.randint(0, 3))
        records.append((key, None if rng.random() < 0.25 else rng.randbytes(rng.randint(0, 9))))
    reference = InMemoryOrderingStore.from_records(records)
    with SqliteOrderingStore.create(tmp_path) as store:
        assert isinstance(store, OrderingStore)
        store.rebuild(records)
        for prefix in [b"", b"h", b"f", b"v", b"n\x00"]:
            assert list(store.scan(prefix)) == list(reference.scan(prefix)), (
                f"scan({prefix!r}) differs from InMemoryOrderingStore"
            )
        for key, _ in records[:500]:
            assert store.get(key) == reference.get(key)


def test_held_bodies_do_not_inflate_the_file(tmp_path: Path) -> None:
    # An ordinary rowid table keeps 1 KiB bodies out of the key B-tree; as WITHOUT ROWID
    # 2,000 held rows of 1.25 KB made a file ~3.3x the bodies' size (446 MiB for 10^5).
    bodies = 2_000 * 1_250
    with SqliteOrderingStore.create(tmp_path) as store:
        store.rebuild((b"h" + bytes(20) + struct.pack(">q", i), random.randbytes(1_250))
                      for i in range(2_000))
        size = store.path.stat().st_size
    assert size < 1.5 * bodies, f"{size} bytes on disk for {bodies} bytes of bodies"
