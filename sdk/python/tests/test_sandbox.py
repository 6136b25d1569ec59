"""The SDK against a real server and a real desktop."""

from __future__ import annotations

import struct
import time

import pytest

from hvkube import Client, Conflict, HvkubeError, InvalidInput, NotFound, Sandbox, Unauthorized


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def test_screenshot_is_a_png_of_the_screen(desk):
    w, h = desk.screen_size()
    assert (w, h) == png_size(desk.screenshot())
    assert png_size(desk.screenshot(width=640))[0] == 640


def test_move_and_click_move_the_pointer(desk):
    desk.move_mouse(101, 202)
    assert desk.cursor_position() == (101, 202)
    desk.left_click(300, 250)
    assert desk.cursor_position() == (300, 250)
    desk.action({"type": "move", "x": 50, "y": 60})  # OpenAI's vocabulary
    assert desk.cursor_position() == (50, 60)


def test_commands_run_returns_the_exit_code(desk):
    r = desk.commands.run("echo hello; echo oops >&2; exit 3")
    assert (r.exit_code, r.stdout, r.stderr) == (3, "hello\n", "oops\n")
    assert desk.commands.run(["cat"], stdin="piped").stdout == "piped"


def test_clipboard_round_trip(desk):
    desk.clipboard = "from the SDK"
    assert desk.clipboard == "from the SDK"


def test_errors_carry_the_api_message(desk, server):
    client, url, _ = server
    with pytest.raises(InvalidInput) as e:
        desk.left_click(100000, 5)
    assert e.value.field == "coordinate" and "coordinate" in e.value.message
    with pytest.raises(NotFound) as e:
        Sandbox.connect("no-such-sandbox", client=client)
    assert "no-such-sandbox" in e.value.message
    with pytest.raises(Unauthorized):
        Client(url, "wrong-token").list("sandboxes")


def test_paused_sandbox_refuses_input_until_resumed(desk):
    desk.pause()
    try:
        with pytest.raises(Conflict) as e:
            desk.write("x")
        assert "Paused" in e.value.message
    finally:
        desk.resume()
    desk.move_mouse(10, 10)


def test_stream_url_is_a_view_page(desk, server):
    _, url, _ = server
    page = desk.stream_url()
    assert page.startswith(url) and f"sandboxes/{desk.name}" in page and "token=" in page


def test_context_manager_deletes_what_it_created(server, template):
    client, _, _ = server
    with Sandbox.create(template, client=client) as sb:
        name = sb.name
        assert sb.phase == "Running"
    with pytest.raises(NotFound):
        for _ in range(300):
            client.get("sandboxes", name)
            time.sleep(0.1)


def test_browser_tools_pass_the_model_blocks(desk):
    call = {"type": "tool_use", "id": "toolu_1", "name": "screenshot", "toolset_name": "browser", "input": {}}
    # Another tool's call is refused as a whole, naming the field.
    with pytest.raises(InvalidInput) as e:
        desk.browser_tools([call, dict(call, id="toolu_2", toolset_name="computer")])
    assert e.value.field == "[1].toolset_name"
    # The linux desktop's guest has no browser for the toolset: the
    # server says so.
    with pytest.raises(HvkubeError) as e:
        desk.browser_tools(call)
    assert "browser" in e.value.message
