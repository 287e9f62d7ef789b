"""The seed sweep: ``PARSLEY_SIM_SEEDS`` (e.g. ``"1-300"``, ``"17"``, ``"1-20,42"``).

CI runs the default, seeds 1-300 (README.md, "The verification kit", as Java's
``CausalOrderPropertyTest``). A failing seed replays alone with ``PARSLEY_SIM_SEEDS=<seed>``.
"""

from __future__ import annotations

import os

__all__ = ["DEFAULT_SEEDS", "parse_seeds", "sweep_seeds"]

DEFAULT_SEEDS = "1-300"


def parse_seeds(text: str) -> list[int]:
    """Parse ``"a-b,c,..."`` into an ascending list of distinct seeds.

    Raises:
        ValueError: an empty list, a malformed item, or a range whose end
            precedes its start.
    """
    seeds: set[int] = set()
    for item in text.replace(" ", "").split(","):
        if not item:
            continue
        lo, sep, hi = item.partition("-")
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first:
            raise ValueError(f"seed range {item!r} ends before it starts")
        seeds.update(range(first, last + 1))
    if not seeds:
        raise ValueError(f"no seeds in {text!r}")
    return sorted(seeds)


def sweep_seeds() -> list[int]:
    """The seeds this run sweeps: ``PARSLEY_SIM_SEEDS`` or :data:`DEFAULT_SEEDS`."""
    return parse_seeds(os.environ.get("PARSLEY_SIM_SEEDS", DEFAULT_SEEDS))
