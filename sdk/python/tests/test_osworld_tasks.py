"""The OSWorld task runner's records: what a failure is put down to, and
the summary (no server: its records are written here)."""

import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location(
    "osworld_tasks", Path(__file__).resolve().parents[1] / "benchmarks" / "osworld_tasks.py")
tasks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tasks)


def test_failure_cause_looks_at_what_osworld_logged():
    cases = [
        # the error says it
        ({"evaluator_error": "ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443)"},
         "network: huggingface.co"),
        # the error says nothing; Chrome's error page in the logged errors does
        ({"evaluator_error": "[DEBUG] Could not find target tab matching URL. Available tabs:",
          "evaluator_logged_errors": ["[DEBUG] - Tab URL: chrome-error://chromewebdata/"]},
         "network: another site"),
        # the error's own cause comes before the logged ones
        ({"setup_error": "TaskTimeout: past 1500 s",
          "setup_logged_errors": ["Max retries exceeded with url: /x"]},
         "timeout"),
        ({"evaluator_error": "IndexError: list index out of range"}, "other"),
        # a setup download the host could not fetch, from any site
        ({"setup_error": "Exception: Setup step 2 failed: _download_setup - Failed to download https://arxiv.org/pdf/x.pdf. No retries left."},
         "network: another site"),
        # a task that opens outside sites, whose tab never got a URL
        ({"evaluator_error": "[DEBUG] active_tab_url is not a string, got <class 'NoneType'>: None",
          "evaluator_logged_errors": ["BrowserType.connect_over_cdp: Unexpected status 502"],
          "sites": ["www.united.com"]},
         "network: another site"),
        # the same with no outside site: DevTools' own failure
        ({"evaluator_error": "[DEBUG] active_tab_url is not a string, got <class 'NoneType'>: None",
          "evaluator_logged_errors": ["BrowserType.connect_over_cdp: Unexpected status 502"]},
         "playwright"),
        # a page load that timed out, on a task that opens outside sites
        ({"evaluator_error": "[ACTIVE_TAB_INFO] Failed to go to the target URL page: Page.goto: Timeout 60000ms exceeded.",
          "sites": ["mbta.com"]},
         "network: another site"),
    ]
    for record, want in cases:
        assert tasks.failure_cause(record) == want, record


def test_outside_sites_leave_out_downloads():
    example = {
        "config": [
            {"type": "download", "parameters": {"files": [
                {"url": "https://huggingface.co/x/y.xlsx", "path": "/home/user/y.xlsx"},
                {"url": "https://arxiv.org/pdf/1.pdf", "path": "/home/user/1.pdf"}]}},
            {"type": "chrome_open_tabs", "parameters": {"urls_to_open": ["https://www.delta.com/"]}},
            {"type": "launch", "parameters": {"command": ["google-chrome", "--remote-debugging-port=1337"]}},
        ],
        "evaluator": {"result": {"type": "active_tab_info", "goto_prefix": "https://"},
                      "expected": {"type": "rule", "rules": {"url": "https://www.delta.com/flight-search"}},
                      "func": "check_direct_json_object"},
    }
    assert tasks.outside_sites(example) == ["www.delta.com"]
    assert tasks.outside_sites({"config": [{"type": "execute", "parameters": {
        "command": ["curl", "http://localhost:5000/x", "http://127.0.0.1:9222"]}}]}) == []


def test_summary_counts_network_failures_apart():
    lines = [
        {"domain": "os", "id": "a", "setup": "ok", "evaluator": "ok", "score": 0.0},
        {"domain": "os", "id": "b", "setup": "ok", "evaluator": "error",
         "evaluator_error": "IndexError: list index out of range", "cause": "other"},
        {"domain": "chrome", "id": "c", "setup": "ok", "evaluator": "error",
         "evaluator_error": "[DEBUG] Could not find target tab matching URL.",
         "evaluator_logged_errors": ["[DEBUG] - Tab URL: chrome-error://chromewebdata/"],
         "cause": "other"},  # written before that cause was told apart
        {"domain": "chrome", "id": "d", "setup": "error",
         "setup_error": "Failed to download https://huggingface.co/x", "cause": "network: huggingface.co"},
        # the scripted agent made no output file: the evaluator ran
        {"domain": "os", "id": "e", "setup": "ok", "evaluator": "error",
         "evaluator_logged_errors": ["Failed to get file."], "cause": "other"},
    ]
    out = tasks.summary(lines)
    assert "| chrome | 2 | 1 | 0 | 1 | 1 network: another site, 1 network: huggingface.co |" in out
    assert "| os | 3 | 3 | 2 | 1 | 1 other |" in out
    assert "| **all** | 5 | 4 (80 %) | 2 (40 %) | 2 | |" in out
    assert "Without the 2 failures from the network: setup succeeded 3 of 3 (100 %), the evaluator ran 2 of 3 (67 %)." in out


def test_task_timeout_is_not_caught_as_an_exception():
    # OSWorld's getters retry on any Exception: a timeout must get past them.
    caught = None
    try:
        try:
            raise tasks.TaskTimeout("past 1500 s")
        except Exception:  # as a getter's retry loop catches
            caught = "getter"
    except tasks.TaskTimeout:
        caught = "runner"
    assert caught == "runner"
