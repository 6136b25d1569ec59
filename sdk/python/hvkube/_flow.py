"""Operations written once for the sync and the async client.

An operation that takes more than one request (create, then wait until
something runs; poll until a deadline) is a generator: it yields a
:class:`Call` (a request, answered with what ``parse`` makes of the
response) or a :class:`Sleep`, and returns its result. :func:`run` drives
it on a Client, :func:`arun` on an AsyncClient. An error of a request is
raised inside the generator, at the ``yield`` that made it, so that the
operation can undo what it did (delete what it created) and raise again.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Generator

import httpx

from ._client import AsyncClient, Client


@dataclass
class Call:
    """One request of the API, its path under /api/v1."""

    method: str
    path: str
    json: Any = None
    params: dict[str, Any] | None = None
    timeout: float | None = None
    content: bytes | None = None
    headers: dict[str, str] | None = None
    parse: Callable[[httpx.Response], Any] = field(default=lambda r: None)

    def kwargs(self) -> dict[str, Any]:
        return {"json": self.json, "params": self.params, "timeout": self.timeout, "content": self.content,
                "headers": self.headers}


@dataclass
class Sleep:
    seconds: float


Flow = Generator["Call | Sleep", Any, Any]


def json_body(r: httpx.Response) -> Any:
    return r.json()


def one(call: Call) -> Flow:
    """A flow of one request, answering what call.parse makes of it."""
    return (yield call)


def run(client: Client, flow: Flow) -> Any:
    """Runs flow on a synchronous client and returns its result."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = flow.throw(error) if error is not None else flow.send(value)
        except StopIteration as stop:
            return stop.value
        value, error = None, None
        try:
            if isinstance(step, Sleep):
                time.sleep(step.seconds)
            else:
                value = step.parse(client.request(step.method, step.path, **step.kwargs()))
        except BaseException as e:  # handed to the flow, which re-raises what it does not handle
            error = e


async def arun(client: AsyncClient, flow: Flow) -> Any:
    """Runs flow on an asynchronous client and returns its result."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = flow.throw(error) if error is not None else flow.send(value)
        except StopIteration as stop:
            return stop.value
        value, error = None, None
        try:
            if isinstance(step, Sleep):
                await asyncio.sleep(step.seconds)
            else:
                value = step.parse(await client.request(step.method, step.path, **step.kwargs()))
        except BaseException as e:  # as in run; a cancellation too, so that the flow cleans up
            error = e
