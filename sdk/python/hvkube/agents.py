"""Agents (tasks run on a pool's desktops) and pools."""

from __future__ import annotations

import secrets
import time
from typing import Any

from ._client import AsyncClient, Client
from ._flow import Call, Flow, Sleep, arun, json_body, one, run

FINISHED = ("Completed", "Failed")


class _AgentOps:
    """What an agent does, for Agent and AsyncAgent alike (as sandbox._Ops
    for sandboxes): each operation is a flow, run by the subclass's _flow."""

    name: str

    def _flow(self, flow: Flow) -> Any:
        raise NotImplementedError

    def info(self) -> Any:
        return self._flow(one(Call("GET", f"agents/{self.name}", parse=json_body)))

    def wait(self, timeout: float = 600) -> Any:
        """Waits until the agent completes or fails, and returns its result."""
        return self._flow(_wait_agent(self.name, timeout))

    def result(self) -> Any:
        """The agent's result: ``status``, ``success``, ``output``,
        ``artifacts``, ``screenshots``, ``sandbox``, ``attempts``, ``message``."""
        return self._flow(one(Call("GET", f"agents/{self.name}/result", parse=json_body)))

    def file(self, path: str) -> Any:
        """A file of the latest attempt (``screenshots/final.png``,
        ``artifacts/...``), as the result lists them."""
        return self._flow(one(Call("GET", f"agents/{self.name}/files/{path}", parse=lambda r: r.content)))

    def delete(self) -> Any:
        """Deletes the agent (a running attempt is cancelled)."""
        return self._flow(one(Call("DELETE", f"agents/{self.name}")))


class Agent(_AgentOps):
    """An agent on an hvkube server: a task bound to a desktop of a pool."""

    def __init__(self, client: Client, name: str) -> None:
        self.client, self.name = client, name

    @classmethod
    def submit(cls, pool: str | None = None, *, steps: list[dict[str, Any]] | None = None, type: str = "workflow",
               input: dict[str, Any] | None = None, name: str | None = None, selector: dict[str, str] | None = None,
               spec: dict[str, Any] | None = None, client: Client | None = None) -> "Agent":
        """Submits an agent. ``pool`` picks a desktop of that pool (or
        ``selector`` by labels); ``steps`` are a workflow's actions;
        ``spec`` adds any other field of the Agent's spec (docs/agents.md)."""
        client = client or Client()
        obj = _new_agent(pool, steps, type, input, name, selector, spec)
        client.create("agents", obj)
        return cls(client, obj["metadata"]["name"])

    def _flow(self, flow: Flow) -> Any:
        return run(self.client, flow)

    @property
    def phase(self) -> str:
        return self.info().get("status", {}).get("phase", "Pending")


class AsyncAgent(_AgentOps):
    """Agent for asyncio: the same methods, awaited, on an AsyncClient
    (the phase is ``(await agent.info())["status"]["phase"]``)."""

    def __init__(self, client: AsyncClient, name: str) -> None:
        self.client, self.name = client, name

    @classmethod
    async def submit(cls, pool: str | None = None, *, steps: list[dict[str, Any]] | None = None,
                     type: str = "workflow", input: dict[str, Any] | None = None, name: str | None = None,
                     selector: dict[str, str] | None = None, spec: dict[str, Any] | None = None,
                     client: AsyncClient | None = None) -> "AsyncAgent":
        """Agent.submit, awaited."""
        client = client or AsyncClient()
        obj = _new_agent(pool, steps, type, input, name, selector, spec)
        await client.create("agents", obj)
        return cls(client, obj["metadata"]["name"])

    def _flow(self, flow: Flow) -> Any:
        return arun(self.client, flow)


class _PoolOps:
    """What a pool does, for Pool and AsyncPool alike."""

    name: str

    def _flow(self, flow: Flow) -> Any:
        raise NotImplementedError

    def info(self) -> Any:
        return self._flow(one(Call("GET", f"sandboxpools/{self.name}", parse=json_body)))

    def scale(self, replicas: int) -> Any:
        return self._flow(one(Call("PATCH", f"sandboxpools/{self.name}/scale", {"replicas": replicas})))

    def sandboxes(self) -> Any:
        """The pool's sandboxes (objects, as the server has them)."""
        return self._flow(_pool_sandboxes(self.name))

    def wait_ready(self, count: int | None = None, timeout: float = 300) -> Any:
        """Waits until ``count`` (default: all replicas) desktops are warm."""
        return self._flow(_wait_ready(self.name, count, timeout))

    def delete(self) -> Any:
        return self._flow(one(Call("DELETE", f"sandboxpools/{self.name}")))


class Pool(_PoolOps):
    """A pool of warm desktops cloned from one template."""

    def __init__(self, client: Client, name: str) -> None:
        self.client, self.name = client, name

    @classmethod
    def create(cls, name: str, template: str, replicas: int = 1, *, warm_tier: str = "paused",
               release_policy: str = "reset", client: Client | None = None) -> "Pool":
        """Creates a pool whose desktops carry the label ``pool: NAME``."""
        client = client or Client()
        client.create("sandboxpools", _new_pool(name, template, replicas, warm_tier, release_policy))
        return cls(client, name)

    def _flow(self, flow: Flow) -> Any:
        return run(self.client, flow)


class AsyncPool(_PoolOps):
    """Pool for asyncio: the same methods, awaited, on an AsyncClient."""

    def __init__(self, client: AsyncClient, name: str) -> None:
        self.client, self.name = client, name

    @classmethod
    async def create(cls, name: str, template: str, replicas: int = 1, *, warm_tier: str = "paused",
                     release_policy: str = "reset", client: AsyncClient | None = None) -> "AsyncPool":
        """Pool.create, awaited."""
        client = client or AsyncClient()
        await client.create("sandboxpools", _new_pool(name, template, replicas, warm_tier, release_policy))
        return cls(client, name)

    def _flow(self, flow: Flow) -> Any:
        return arun(self.client, flow)


def _new_agent(pool: str | None, steps: list[dict[str, Any]] | None, type: str, input: dict[str, Any] | None,
               name: str | None, selector: dict[str, str] | None, spec: dict[str, Any] | None) -> dict[str, Any]:
    body: dict[str, Any] = dict(spec or {})
    body.setdefault("type", type)
    labels = dict(selector or {})
    if pool:
        labels["pool"] = pool
    if labels:
        body["sandboxSelector"] = {"matchLabels": labels}
    task = dict(body.get("task") or {})
    if steps is not None:
        task["steps"] = steps
    if input is not None:
        task["input"] = input
    if task:
        body["task"] = task
    name = name or "agent-" + secrets.token_hex(4)
    return {"apiVersion": "hvkube/v1", "kind": "Agent", "metadata": {"name": name}, "spec": body}


def _wait_agent(name: str, timeout: float) -> Flow:
    deadline = time.monotonic() + timeout
    while True:
        phase = (yield Call("GET", f"agents/{name}", parse=json_body)).get("status", {}).get("phase", "Pending")
        if phase in FINISHED:
            return (yield Call("GET", f"agents/{name}/result", parse=json_body))
        if time.monotonic() > deadline:
            raise TimeoutError(f"agent {name} not finished after {timeout}s: {phase}")
        yield Sleep(0.2)


def _new_pool(name: str, template: str, replicas: int, warm_tier: str, release_policy: str) -> dict[str, Any]:
    return {"apiVersion": "hvkube/v1", "kind": "SandboxPool", "metadata": {"name": name},
            "spec": {"replicas": replicas, "warmTier": warm_tier, "releasePolicy": release_policy,
                     "template": {"metadata": {"labels": {"pool": name}}, "spec": {"templateRef": template}}}}


def _pool_sandboxes(name: str) -> Flow:
    out = yield Call("GET", "sandboxes", params={"labelSelector": f"pool={name}"}, parse=json_body)
    return out.get("items") or []


def _wait_ready(name: str, count: int | None, timeout: float) -> Flow:
    deadline = time.monotonic() + timeout
    while True:
        want = count
        if want is None:
            want = (yield Call("GET", f"sandboxpools/{name}", parse=json_body)).get("spec", {}).get("replicas", 0)
        warm = [s for s in (yield from _pool_sandboxes(name))
                if s.get("status", {}).get("phase") in ("Paused", "Running", "Saved")
                and not s.get("status", {}).get("currentAgent")]
        if len(warm) >= want:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"pool {name}: {len(warm)} of {want} warm after {timeout}s")
        yield Sleep(0.2)
