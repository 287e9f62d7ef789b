"""The changelog replication rule and its settings (no broker).

docs/operations.md, "Production clusters": replication ``min(3, brokers)`` and
``min.insync.replicas`` 2 from 3 replicas on, else 1, unless configured; settings from code,
TOML and the environment.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.config import ParsleyConfig
from workers.changelog import changelog_replication

_maybe = st.none() | st.integers(1, 9)


def _reference(brokers: int, rf: int | None, isr: int | None) -> tuple[int, int]:
    replicas = rf if rf is not None else min(3, brokers)
    if isr is not None:
        return replicas, isr
    return replicas, {1: 1, 2: 1}.get(replicas, 2)


@given(brokers=st.integers(1, 12), rf=_maybe, isr=_maybe)
def test_rule_matches_the_documented_table(brokers: int, rf: int | None,
                                           isr: int | None) -> None:
    assert changelog_replication(brokers, rf, isr) == _reference(brokers, rf, isr)


@given(brokers=st.integers(1, 12))
def test_default_tolerates_one_broker_down_and_never_exceeds_the_cluster(brokers: int) -> None:
    replicas, min_isr = changelog_replication(brokers)
    assert 1 <= replicas <= min(3, brokers)
    # One replica down still leaves min.insync.replicas in sync (writes continue), and
    # with three replicas an acknowledged write is on two brokers.
    assert min_isr <= max(1, replicas - 1)
    assert replicas < 3 or min_isr == 2


def test_settings_from_code_file_and_environment(tmp_path: Path) -> None:
    assert ParsleyConfig("b:9092", "p").changelog_replication_factor is None
    assert ParsleyConfig("b:9092", "p").changelog_min_insync_replicas is None
    toml = tmp_path / "parsley.toml"
    toml.write_text('bootstrap_servers = "b:9092"\napplication_id_prefix = "p"\n'
                    "changelog_replication_factor = 2\n")
    from_file = ParsleyConfig.load(toml, environ={})
    assert from_file.changelog_replication_factor == 2
    env = {"PARSLEY_CHANGELOG_REPLICATION_FACTOR": "5",
           "PARSLEY_CHANGELOG_MIN_INSYNC_REPLICAS": "3"}
    from_env = ParsleyConfig.load(toml, environ=env)
    assert (from_env.changelog_replication_factor, from_env.changelog_min_insync_replicas) \
        == (5, 3)
    with pytest.raises(ValueError, match="PARSLEY_CHANGELOG_REPLICATION_FACTOR='x' is not"):
        ParsleyConfig.load(toml, environ={"PARSLEY_CHANGELOG_REPLICATION_FACTOR": "x"})


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"changelog_replication_factor": 0}, "changelog_replication_factor must be an int >= 1"),
    ({"changelog_min_insync_replicas": 0}, "changelog_min_insync_replicas must be an int >= 1"),
    ({"changelog_replication_factor": True}, "changelog_replication_factor must be an int"),
    ({"changelog_replication_factor": 2, "changelog_min_insync_replicas": 3},
     r"changelog_min_insync_replicas \(3\) exceeds changelog_replication_factor \(2\)"),
])
def test_bad_settings_are_refused_naming_them(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ParsleyConfig("b:9092", "p", **kwargs)  # type: ignore[arg-type]
