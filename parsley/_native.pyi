"""Type stubs for the extension module ``parsley._native`` (the crate in ``native/``).

Each function mirrors the pure-Python reference named in its docstring; see those
for shapes, units and refusals.
"""

def version() -> str: ...
