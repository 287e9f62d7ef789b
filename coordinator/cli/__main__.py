"""``python -m coordinator.cli``: the same as ``parsley-coordinator``."""

from coordinator.cli import main

main()
