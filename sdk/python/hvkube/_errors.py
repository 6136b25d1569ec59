"""Errors the hvkube API answers, as exceptions."""

from __future__ import annotations

import httpx


class HvkubeError(Exception):
    """An error answered by the hvkube API.

    ``message`` is the API's own message, ``field`` the input field it names
    (if any) and ``status`` the HTTP status.
    """

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message
        self.field = field


class NotFound(HvkubeError):
    """404: no such object or route."""


class Conflict(HvkubeError):
    """409: the name is taken, a stale version, or a sandbox not in the state
    the operation needs (say, Paused for input)."""


class Unauthorized(HvkubeError):
    """401: the token is missing or wrong."""


class Forbidden(HvkubeError):
    """403: the token does not reach what was asked for."""


class InvalidInput(HvkubeError):
    """400: bad input; ``field`` names it."""


_BY_STATUS = {400: InvalidInput, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict}


def raise_for(resp: httpx.Response) -> None:
    """Raises the error resp answers, if it is one."""
    if resp.status_code < 400:
        return
    message, field = resp.reason_phrase, None
    try:
        body = resp.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        message = body["error"]
        field = body.get("field") or None
    elif resp.text:
        message = resp.text.strip()[:1000]
    raise _BY_STATUS.get(resp.status_code, HvkubeError)(resp.status_code, message, field)
