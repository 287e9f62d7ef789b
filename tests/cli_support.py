"""What the CLI tests share: the command line of ``parsley-coordinator`` and a relay app.

``RELAY_APP`` is the text of an application module (write it as ``cliapp.py`` in the run's
working directory and name ``cliapp:processes``): one process ``relay`` that receives the
topic named by the environment variable ``CLI_SRC`` and sends ``b"cli:" + value`` to
``CLI_OUT``, keys unchanged.
"""

from __future__ import annotations

import sys
from typing import Final

CLI: Final = [sys.executable, "-m", "coordinator.cli"]
"""``parsley-coordinator`` as this interpreter runs it (the venv's entry point does the same)."""

RELAY_APP: Final = '''
import os
from parsley import Channel, Effects, Process
from parsley.serdes import BYTES

OUT = Channel(os.environ["CLI_OUT"], BYTES, BYTES)


def handle(delivery, state):
    return Effects.builder().send(OUT, delivery.key, b"cli:" + delivery.value).build()


processes = [Process("relay").receives(Channel(os.environ["CLI_SRC"], BYTES, BYTES), handle)
             .sends(OUT)]
'''
