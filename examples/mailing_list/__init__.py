"""The mailing-list pipeline: real linux-ext4 threads through two Parsley processes.

Modules: ``threads`` (the archive and its union-find threads), ``partition``
(Kafka's murmur2 key partitioning), ``ingest`` (the edge producer), ``app``
(the ``threader`` and ``digest`` processes), ``checker`` (the independent
verdict), ``naive`` (a plain consumer's view, for contrast), ``demo`` (the
orchestration behind ``make demo``).
"""
