"""The house's user-error type: library code raises it, only a script's entry point prints it.

    from zoo.errors import UserError
    raise UserError(f"data dir {path} has no train/ folder")

A ``UserError`` is a problem the person running the command can fix (a bad flag, missing or corrupt
data, a checkpoint of another model): its message is one line naming the problem, without an
"error:" prefix. Library code never ends the interpreter (a model builder called from a notebook
raises, it does not exit); ``zoo.cli.entry_point`` turns the error into ``error: <message>`` on
stderr and exit status 1, with no traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """A problem the user can fix; ``str(error)`` is the one line the entry point prints."""


def one_line(error: BaseException, limit: int = 300) -> str:
    """The first non-empty line of ``error``'s message (at most ``limit`` characters), or its type's
    name when the message is empty: how a foreign library's exception is quoted in a UserError."""
    for line in str(error).splitlines():
        if line.strip():
            return line.strip()[:limit]
    return type(error).__name__
