"""The request-facing errors of the engine's front end, and the text check every entry point applies.

Raised by the tokenizer manager and the ``Engine``; the HTTP layer maps them onto status codes
(``RequestError`` 400, ``RequestFailedError`` 500, ``EngineDeadError`` 503).
"""

from __future__ import annotations


class EngineDeadError(RuntimeError):
    """A child process of the engine died; the message names it and its exit code."""


class ServerShutdown(EngineDeadError):
    """The server is stopping (SIGTERM/SIGINT): pending requests end with this, and it is not a fault."""


class RequestError(ValueError):
    """The request is invalid (the message names the parameter); the engine keeps serving."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def rid_in_use(rid: str) -> RequestError:
    """The error for a request naming the rid of one that is still running."""
    return RequestError(f"a request with rid {rid!r} is already running; pass a unique rid", "rid")


class RequestFailedError(RuntimeError):
    """The request failed while the engine served it (the message names the cause, and the
    plugin when a hook raised); only this request ended, the engine keeps serving."""


def unicode_problem(text: str) -> str | None:
    """Why ``text`` cannot be encoded as UTF-8 (a lone surrogate such as ``"\\ud800"``), or ``None``."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"{exc.reason} at character {exc.start}"
    return None


def check_text(text: str, field: str) -> None:
    """Raise :class:`RequestError` naming ``field`` for text that is not valid Unicode."""
    problem = unicode_problem(text)
    if problem is not None:
        raise RequestError(f"{field} is not valid Unicode text: {problem}", field)
