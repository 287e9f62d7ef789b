"""``python -m perf.soak --minutes N --seed S``: the chaos harness for N minutes.

The same run as the CI chaos test (``devtools/chaos/harness.py``; docs/operations.md,
"Chaos test and soak"), but faults keep coming, drawn from the seeded schedule,
until N minutes have passed; then the drain and the independent verdict. Prints
the fault schedule with each recovery's time and the verdict; exits 0 on a clean
verdict with every task RUNNING, 1 otherwise. ``--brokers 3`` plays on a private
3-broker cluster, where ``--kinds every`` draws from every kind, the cluster's included.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from devtools.chaos.harness import ChaosSettings, run_chaos
from devtools.chaos.schedule import ALL_KINDS, CLUSTER_KINDS, KINDS, parse_kinds


@click.command()
@click.option("--minutes", type=float, default=10.0, show_default=True,
              help="Play faults for this many minutes, then drain and judge.")
@click.option("--seed", type=int, default=1, show_default=True, help="Schedule seed.")
@click.option("--kinds", default="all", show_default=True,
              help=f"Comma-separated fault kinds: {','.join(KINDS)}, or all (those); with "
                   f"--brokers 3 also {','.join(CLUSTER_KINDS)}, or cluster (those), or "
                   "every (all of them).")
@click.option("--brokers", type=click.IntRange(1, 9), default=1, show_default=True,
              help="1: a private broker; 3: a private KRaft cluster (replication 3, "
                   "min.insync.replicas 2).")
@click.option("--restart", type=click.Choice(["transient", "never"]), default="transient",
              show_default=True,
              help="The coordinator's restart policy (never: only broker faults make sense).")
@click.option("--rate", type=float, default=40.0, show_default=True,
              help="A records per second (about 60% more B records name them as causes).")
@click.option("--recovery", type=float, default=90.0, show_default=True,
              help="Bound on each recovery, s.")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path),
              help="Keep broker data, state and logs here (default a new /tmp dir, "
                   "removed when the run passes).")
def main(minutes: float, seed: int, kinds: str, brokers: int, restart: str, rate: float,
         recovery: float, workdir: Path | None) -> None:
    """Run the chaos soak and print its verdict."""
    chosen = ALL_KINDS if kinds.strip() == "every" else parse_kinds(kinds)
    if brokers < 3 and set(chosen) & set(CLUSTER_KINDS):
        raise click.UsageError(f"{sorted(set(chosen) & set(CLUSTER_KINDS))} need --brokers 3")
    result = run_chaos(ChaosSettings(seed=seed, faults=None, minutes=minutes,
                                     kinds=chosen, rate=rate, recovery_s=recovery,
                                     workdir=workdir, brokers=brokers, restart=restart))
    print(result.report())
    sys.exit(0 if result.ok else 1)


if __name__ == "__main__":
    main()
