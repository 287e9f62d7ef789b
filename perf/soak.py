"""``python -m perf.soak --minutes N --seed S``: the chaos harness for N minutes.

The same run as the CI chaos test (``devtools/chaos/harness.py``; docs/operations.md,
"Chaos test and soak"), but faults keep coming, drawn from the seeded schedule,
until N minutes have passed; then the drain and the independent verdict. Prints
the fault schedule with each recovery's time and the verdict; exits 0 on a clean
verdict with every task RUNNING, 1 otherwise.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from devtools.chaos.harness import ChaosSettings, run_chaos
from devtools.chaos.schedule import KINDS, parse_kinds


@click.command()
@click.option("--minutes", type=float, default=10.0, show_default=True,
              help="Play faults for this many minutes, then drain and judge.")
@click.option("--seed", type=int, default=1, show_default=True, help="Schedule seed.")
@click.option("--kinds", default="all", show_default=True,
              help=f"Comma-separated fault kinds: {','.join(KINDS)}, or all.")
@click.option("--rate", type=float, default=40.0, show_default=True,
              help="A records per second (about 60% more B records name them as causes).")
@click.option("--recovery", type=float, default=90.0, show_default=True,
              help="Bound on each recovery, s.")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path),
              help="Keep broker data, state and logs here (default a new /tmp dir, "
                   "removed when the run passes).")
def main(minutes: float, seed: int, kinds: str, rate: float, recovery: float,
         workdir: Path | None) -> None:
    """Run the chaos soak and print its verdict."""
    result = run_chaos(ChaosSettings(seed=seed, faults=None, minutes=minutes,
                                     kinds=parse_kinds(kinds), rate=rate,
                                     recovery_s=recovery, workdir=workdir))
    print(result.report())
    sys.exit(0 if result.ok else 1)


if __name__ == "__main__":
    main()
