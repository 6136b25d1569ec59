"""Agents (tasks run on a pool's desktops) and pools."""

from __future__ import annotations

import secrets
import time
from typing import Any

from ._client import Client

FINISHED = ("Completed", "Failed")


class Agent:
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
        client.create("agents", {"apiVersion": "hvkube/v1", "kind": "Agent", "metadata": {"name": name}, "spec": body})
        return cls(client, name)

    def info(self) -> dict[str, Any]:
        return self.client.get("agents", self.name)

    @property
    def phase(self) -> str:
        return self.info().get("status", {}).get("phase", "Pending")

    def wait(self, timeout: float = 600) -> dict[str, Any]:
        """Waits until the agent completes or fails, and returns its result."""
        deadline = time.monotonic() + timeout
        while self.phase not in FINISHED:
            if time.monotonic() > deadline:
                raise TimeoutError(f"agent {self.name} not finished after {timeout}s: {self.phase}")
            time.sleep(0.2)
        return self.result()

    def result(self) -> dict[str, Any]:
        """The agent's result: ``status``, ``success``, ``output``,
        ``artifacts``, ``screenshots``, ``sandbox``, ``attempts``, ``message``."""
        return self.client.request("GET", f"agents/{self.name}/result").json()

    def file(self, path: str) -> bytes:
        """A file of the latest attempt (``screenshots/final.png``,
        ``artifacts/...``), as the result lists them."""
        return self.client.request("GET", f"agents/{self.name}/files/{path}").content

    def delete(self) -> None:
        """Deletes the agent (a running attempt is cancelled)."""
        self.client.delete("agents", self.name)


class Pool:
    """A pool of warm desktops cloned from one template."""

    def __init__(self, client: Client, name: str) -> None:
        self.client, self.name = client, name

    @classmethod
    def create(cls, name: str, template: str, replicas: int = 1, *, warm_tier: str = "paused",
               release_policy: str = "reset", client: Client | None = None) -> "Pool":
        """Creates a pool whose desktops carry the label ``pool: NAME``."""
        client = client or Client()
        client.create("sandboxpools", {"apiVersion": "hvkube/v1", "kind": "SandboxPool", "metadata": {"name": name},
                                       "spec": {"replicas": replicas, "warmTier": warm_tier, "releasePolicy": release_policy,
                                                "template": {"metadata": {"labels": {"pool": name}},
                                                             "spec": {"templateRef": template}}}})
        return cls(client, name)

    def info(self) -> dict[str, Any]:
        return self.client.get("sandboxpools", self.name)

    def scale(self, replicas: int) -> None:
        self.client.request("PATCH", f"sandboxpools/{self.name}/scale", json={"replicas": replicas})

    def sandboxes(self) -> list[dict[str, Any]]:
        return self.client.list("sandboxes", label_selector=f"pool={self.name}")

    def wait_ready(self, count: int | None = None, timeout: float = 300) -> None:
        """Waits until ``count`` (default: all replicas) desktops are warm."""
        deadline = time.monotonic() + timeout
        while True:
            want = count if count is not None else self.info().get("spec", {}).get("replicas", 0)
            warm = [s for s in self.sandboxes() if s.get("status", {}).get("phase") in ("Paused", "Running", "Saved")
                    and not s.get("status", {}).get("currentAgent")]
            if len(warm) >= want:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"pool {self.name}: {len(warm)} of {want} warm after {timeout}s")
            time.sleep(0.2)

    def delete(self) -> None:
        self.client.delete("sandboxpools", self.name)
