"""Python client for hvkube: warm desktop sandboxes for computer-use agents."""

from ._client import AsyncClient, Client
from ._errors import Conflict, Forbidden, HvkubeError, InvalidInput, NotFound, Unauthorized
from .agents import Agent, AsyncAgent, AsyncPool, Pool
from .sandbox import AsyncSandbox, CommandResult, Sandbox

__all__ = ["Client", "AsyncClient", "Sandbox", "AsyncSandbox", "Agent", "AsyncAgent", "Pool", "AsyncPool",
           "CommandResult", "HvkubeError", "NotFound", "Conflict", "Unauthorized", "Forbidden", "InvalidInput"]
