"""Examples built on Parsley's public API only (``from parsley import ...``).

``examples.mailing_list``: a real mailing-list archive threaded and digested by
two Parsley processes, with an independent checker (``python -m
examples.mailing_list.demo``, or ``make demo``). ``examples.gateway``: an HTTP service whose
clients read their own writes through a lagging projection, with ``parsley.session`` tokens
(``python -m examples.gateway``; docs/session.md).
"""
