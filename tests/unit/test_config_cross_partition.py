"""``refuse_cross_partition_causes``: the setting, and the policy a process's tasks apply.

docs/failing-closed.md, "Cross-partition causes": equal partition counts always
refuse; different counts warn and count, unless the setting asks for the refusal.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.config import ParsleyConfig
from parsley.engine.engine import CrossPartition, cross_partition_policy

BASE = {"PARSLEY_BOOTSTRAP_SERVERS": "h:1", "PARSLEY_APPLICATION_ID_PREFIX": "p"}


def test_policy_refuses_with_equal_counts_or_the_setting() -> None:
    assert cross_partition_policy({"a": 2, "b": 2}, refuse=False) is CrossPartition.REFUSE
    assert cross_partition_policy({"a": 3}, refuse=False) is CrossPartition.REFUSE
    assert cross_partition_policy({"a": 2, "b": 1}, refuse=False) is CrossPartition.WARN
    assert cross_partition_policy({"a": 2, "b": 1}, refuse=True) is CrossPartition.REFUSE


def test_setting_defaults_off_and_is_read_from_file_and_environment(tmp_path: Path) -> None:
    assert ParsleyConfig.load(environ=BASE).refuse_cross_partition_causes is False
    path = tmp_path / "p.toml"
    path.write_text("refuse_cross_partition_causes = true\n")
    assert ParsleyConfig.load(path, environ=BASE).refuse_cross_partition_causes is True
    env = {**BASE, "PARSLEY_REFUSE_CROSS_PARTITION_CAUSES": "false"}
    assert ParsleyConfig.load(path, environ=env).refuse_cross_partition_causes is False
    env = {**BASE, "PARSLEY_REFUSE_CROSS_PARTITION_CAUSES": "TRUE"}
    assert ParsleyConfig.load(environ=env).refuse_cross_partition_causes is True


def test_setting_must_be_a_boolean() -> None:
    with pytest.raises(ValueError, match="is not true or false"):
        ParsleyConfig.load(environ={**BASE, "PARSLEY_REFUSE_CROSS_PARTITION_CAUSES": "yes"})
    with pytest.raises(ValueError, match="must be true or false"):
        ParsleyConfig("h:1", "p", refuse_cross_partition_causes=1)  # type: ignore[arg-type]
