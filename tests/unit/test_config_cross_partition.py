"""``cross_partition_causes``: the setting, and the policy a process's tasks apply.

docs/failing-closed.md, "Cross-partition causes": ``auto`` refuses when the received
topics' partition counts are equal and warns otherwise; ``refuse`` and ``warn`` choose
one policy whatever the counts; the older ``refuse_cross_partition_causes = true``
still means ``refuse``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.config import ParsleyConfig
from parsley.engine.cross_partition import CrossPartition, cross_partition_policy

BASE = {"PARSLEY_BOOTSTRAP_SERVERS": "h:1", "PARSLEY_APPLICATION_ID_PREFIX": "p"}
EQUAL = {"a": 2, "b": 2}
UNEQUAL = {"a": 2, "b": 1}


def test_auto_refuses_with_equal_counts_and_warns_with_different_counts() -> None:
    assert cross_partition_policy(EQUAL, "auto") is CrossPartition.REFUSE
    assert cross_partition_policy({"a": 3}, "auto") is CrossPartition.REFUSE
    assert cross_partition_policy(UNEQUAL, "auto") is CrossPartition.WARN
    assert cross_partition_policy(UNEQUAL) is CrossPartition.WARN, "auto is the default"


def test_refuse_and_warn_apply_whatever_the_counts() -> None:
    for counts in (EQUAL, UNEQUAL, {"a": 3}):
        assert cross_partition_policy(counts, "refuse") is CrossPartition.REFUSE
        assert cross_partition_policy(counts, "warn") is CrossPartition.WARN


def test_the_policy_rejects_an_unknown_setting() -> None:
    with pytest.raises(ValueError, match="cross_partition_causes must be one of"):
        cross_partition_policy(EQUAL, "ignore")


def test_setting_defaults_to_auto_and_is_read_from_file_and_environment(
    tmp_path: Path,
) -> None:
    assert ParsleyConfig.load(environ=BASE).cross_partition_causes == "auto"
    path = tmp_path / "p.toml"
    for value in ("auto", "refuse", "warn"):
        path.write_text(f'cross_partition_causes = "{value}"\n')
        assert ParsleyConfig.load(path, environ=BASE).cross_partition_causes == value
    env = {**BASE, "PARSLEY_CROSS_PARTITION_CAUSES": " Refuse "}
    assert ParsleyConfig.load(path, environ=env).cross_partition_causes == "refuse", \
        "the environment overrides the file"
    assert ParsleyConfig.load(path, environ=BASE, cross_partition_causes="auto") \
        .cross_partition_causes == "auto", "an explicit override wins"


def test_the_older_boolean_still_means_refuse(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text("refuse_cross_partition_causes = true\n")
    assert ParsleyConfig.load(path, environ=BASE).cross_partition_causes == "refuse"
    env = {**BASE, "PARSLEY_REFUSE_CROSS_PARTITION_CAUSES": "TRUE"}
    assert ParsleyConfig.load(environ=env).cross_partition_causes == "refuse"
    env = {**BASE, "PARSLEY_REFUSE_CROSS_PARTITION_CAUSES": "false"}
    assert ParsleyConfig.load(path, environ=env).cross_partition_causes == "auto"
    assert ParsleyConfig("h:1", "p", cross_partition_causes="refuse",
                         refuse_cross_partition_causes=True).cross_partition_causes == "refuse"
    with pytest.raises(ValueError, match="contradicts"):
        ParsleyConfig("h:1", "p", cross_partition_causes="warn",
                      refuse_cross_partition_causes=True)


def test_setting_must_be_one_of_the_three_values() -> None:
    with pytest.raises(ValueError, match="cross_partition_causes must be one of"):
        ParsleyConfig.load(environ={**BASE, "PARSLEY_CROSS_PARTITION_CAUSES": "off"})
    with pytest.raises(ValueError, match="cross_partition_causes must be one of"):
        ParsleyConfig("h:1", "p", cross_partition_causes=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="is not true or false"):
        ParsleyConfig.load(environ={**BASE, "PARSLEY_REFUSE_CROSS_PARTITION_CAUSES": "yes"})
    with pytest.raises(ValueError, match="must be true or false"):
        ParsleyConfig("h:1", "p", refuse_cross_partition_causes=1)  # type: ignore[arg-type]
