#!/usr/bin/env python3
"""A selenium agent for hvkube (see ../selenium-agent.yaml).

It drives the browser already open in the agent's sandbox through the
WebDriver server in the guest (chromedriver), fills a form, submits it and
checks the page that answers.

hvkube gives it, as for every command agent, HVKUBE_TASK_INPUT (the task's
input as JSON) and, on the host, HVKUBE_TOKEN (the attempt's token); for a
selenium agent also HVKUBE_WEBDRIVER_URL, the sandbox's WebDriver endpoint
(the API's port forward on the host, the guest's own port in the guest),
and HVKUBE_DEBUGGER_ADDRESS, where chromedriver finds the running browser
(goog:chromeOptions debuggerAddress: without it chromedriver would start a
browser of its own). The token goes in the Authorization header of every
request.

Input: {"url": "http://.../form", "name": "...", "city": "..."} (url may
also be the first argument). Exit code 0 is success; what it prints on
standard output (JSON) is the agent's result.

Written for Debian's python3-selenium (4.8); Selenium 4.26 and later can
pass the token in a ClientConfig instead (see docs/api.md, Port forwards).
"""

import json
import os
import sys

from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.remote_connection import RemoteConnection
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

# A desktop under emulation is slow: generous timeouts (seconds).
TIMEOUT = 120


class BearerConnection(RemoteConnection):
    """A WebDriver connection that sends hvkube's token with each request."""

    token = ""

    @classmethod
    def get_remote_connection_headers(cls, parsed_url, keep_alive=False):
        headers = super().get_remote_connection_headers(parsed_url, keep_alive)
        if cls.token:
            headers["Authorization"] = "Bearer " + cls.token
        return headers


def connect(url, token, debugger_address):
    options = webdriver.ChromeOptions()
    options.debugger_address = debugger_address
    BearerConnection.token = token
    return webdriver.Remote(command_executor=BearerConnection(url), options=options)


def main():
    task = json.loads(os.environ.get("HVKUBE_TASK_INPUT") or "{}")
    url = task.get("url") or (sys.argv[1] if len(sys.argv) > 1 else "")
    name = task.get("name", "Grace Hopper")
    city = task.get("city", "Arlington")
    endpoint = os.environ.get("HVKUBE_WEBDRIVER_URL", "")
    if not url or not endpoint:
        print("form.py: needs HVKUBE_WEBDRIVER_URL and a url (task input {\"url\": ...} or the first argument)", file=sys.stderr)
        return 2
    driver = connect(endpoint, os.environ.get("HVKUBE_TOKEN", ""),
                     os.environ.get("HVKUBE_DEBUGGER_ADDRESS", "localhost:9222"))
    try:
        # A tab of its own in the sandbox's browser, closed at the end.
        first = driver.current_window_handle
        driver.switch_to.new_window("tab")
        driver.set_page_load_timeout(TIMEOUT)
        try:
            driver.get(url)
            wait = WebDriverWait(driver, TIMEOUT)
            wait.until(EC.presence_of_element_located((By.ID, "name"))).send_keys(name)
            driver.find_element(By.ID, "city").send_keys(city)
            driver.find_element(By.ID, "send").click()
            result = wait.until(EC.presence_of_element_located((By.ID, "result"))).text
            if name not in result or city not in result:
                print(f"form.py: the answer {result!r} does not name {name} from {city}", file=sys.stderr)
                return 1
            print(json.dumps({"result": result, "title": driver.title}))
            return 0
        finally:
            driver.close()
            driver.switch_to.window(first)
    finally:
        # Ends the WebDriver session; the browser it attached to stays.
        driver.quit()


if __name__ == "__main__":
    sys.exit(main())
