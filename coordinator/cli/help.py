"""Help-text rendering shared by the command-line tools (``parsley-coordinator``).

click renders an option's ``show_default`` given as a string in parentheses, as for a
description (``[default: (5); x>=0]``); the options here give the value itself (a
path, a number, a host), so :class:`PlainDefaultOption` shows it bare:
``[default: 5; x>=0]``.
"""

from __future__ import annotations

import click

__all__ = ["PlainDefaultOption"]


class PlainDefaultOption(click.Option):
    """A ``click.Option`` whose string ``show_default`` is shown without parentheses."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        """click's record with ``default: (VALUE)`` rewritten ``default: VALUE``."""
        record: tuple[str, str] | None = super().get_help_record(ctx)
        if record is None or not isinstance(self.show_default, str):
            return record
        opts, text = record
        return opts, text.replace(f"default: ({self.show_default})",
                                  f"default: {self.show_default}")
