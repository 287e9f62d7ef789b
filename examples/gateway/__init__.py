"""The gateway example: a comments service whose clients read their own writes.

A Parsley projection (``projection.py``) folds comments into thread rows; an HTTP gateway
(``app.py``, Starlette) writes comments stamped with the client's session token and serves
a thread only once the read model covers that token (``view.py``: the gateway's lagging
replica of the rows). ``python -m examples.gateway`` runs both (docs/session.md, "The
gateway example"). Needs the ``gateway`` extra: ``pip install -e ".[gateway]"``.
"""
