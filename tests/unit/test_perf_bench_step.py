"""``python -m perf.bench_step`` runs each of its loops and prints one figure per loop.

A smoke test only (benchmarks print figures, tests never time): a few hundred records on
librdkafka's mock cluster, one round, and the printed rows checked for shape.
"""

from __future__ import annotations

import pytest

from perf import bench_step


def _rows(out: str) -> dict[str, float]:
    rows = {}
    for line in out.splitlines():
        name, _, figure = line.rpartition(" ")
        if name.strip() in bench_step.LOOPS:
            rows[name.strip()] = float(figure)
    return rows


def test_every_loop_prints_a_positive_figure(capsys: pytest.CaptureFixture[str]) -> None:
    bench_step.main(["--number", "300", "--rounds", "1"])
    rows = _rows(capsys.readouterr().out)
    assert list(rows) == list(bench_step.LOOPS)
    assert all(v > 0 for v in rows.values()), rows


def test_only_times_the_loop_named(capsys: pytest.CaptureFixture[str]) -> None:
    bench_step.main(["--number", "300", "--rounds", "1", "--only", "worker step, batch relay"])
    assert list(_rows(capsys.readouterr().out)) == ["worker step, batch relay"]
    with pytest.raises(SystemExit):
        bench_step.main(["--only", "no such loop"])
