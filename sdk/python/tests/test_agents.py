"""Agents and pools through the SDK, on a real desktop."""

from __future__ import annotations

import pytest

from hvkube import Agent, InvalidInput


def test_workflow_agent_completes_with_its_artifact(pool, server):
    client, _, _ = server
    a = Agent.submit("sdk", client=client, input={"city": "Lisbon"}, steps=[
        {"action": "exec", "command": ["sh", "-c", "echo Lisbon > /tmp/result.txt"]},
        {"action": "assert", "fileContains": {"path": "/tmp/result.txt", "text": "Lisbon"}, "duration": 10},
    ], spec={"output": {"artifacts": ["/tmp/result.txt"]}})
    res = a.wait(300)
    assert res["status"] == "completed" and res["success"], res
    assert res["sandbox"].startswith("sdk-")
    assert a.file("artifacts/result.txt") == b"Lisbon\n"


def test_failing_assert_fails_the_agent(pool, server):
    client, _, _ = server
    a = Agent.submit("sdk", client=client, steps=[
        {"action": "assert", "fileContains": {"path": "/tmp/absent.txt", "text": "x"}, "duration": 1},
    ], spec={"completion": {"maxRetries": 0}})
    res = a.wait(300)
    assert res["status"] == "failed" and not res["success"]
    assert res["message"]


def test_bad_agent_names_the_field(server):
    client, _, _ = server
    with pytest.raises(InvalidInput) as e:
        Agent.submit("sdk", client=client, steps=[{"action": "no_such_action"}])
    assert e.value.field and "action" in e.value.field
