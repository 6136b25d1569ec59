// A playwright agent for hvkube (see ../playwright-agent.yaml): it drives
// the browser already open in the agent's sandbox over the Chrome DevTools
// protocol, fills a form, submits it and checks the page that answers.
//
// hvkube gives it, as for every command agent, HVKUBE_TASK_INPUT (the
// task's input as JSON) and, on the host, HVKUBE_TOKEN (the attempt's
// token); for a playwright agent also HVKUBE_CDP_URL, the sandbox's
// DevTools endpoint: the API's port forward on the host, the guest's own
// port in the guest. The token goes in the Authorization header of every
// request, the WebSocket included.
//
// Input: {"url": "http://…/form", "name": "…", "city": "…"} (url may also
// be the first argument). Exit code 0 is success; what it prints on
// standard output (JSON) is the agent's result.
//
//   npm ci && node form.mjs
import { chromium } from "playwright-core";

const input = JSON.parse(process.env.HVKUBE_TASK_INPUT || "{}");
const url = input.url || process.argv[2];
const name = input.name || "Ada Lovelace";
const city = input.city || "London";
const endpoint = process.env.HVKUBE_CDP_URL;
if (!url || !endpoint) {
  console.error("form.mjs: needs HVKUBE_CDP_URL and a url (task input {\"url\": …} or the first argument)");
  process.exit(2);
}
const headers = process.env.HVKUBE_TOKEN ? { Authorization: `Bearer ${process.env.HVKUBE_TOKEN}` } : {};
// A desktop under emulation is slow: generous timeouts.
const timeout = 120_000;

const browser = await chromium.connectOverCDP(endpoint, { headers, timeout });
// The browser's own profile (its cookies, its windows), not a new one.
const context = browser.contexts()[0];
const page = await context.newPage();
page.setDefaultTimeout(timeout);
let failure = "";
try {
  await page.goto(url);
  await page.fill("#name", name);
  await page.fill("#city", city);
  await Promise.all([page.waitForURL((u) => u.pathname.endsWith("/submit")), page.click("#send")]);
  const result = (await page.textContent("#result")) ?? "";
  if (!result.includes(name) || !result.includes(city)) {
    failure = `the answer ${JSON.stringify(result)} does not name ${name} from ${city}`;
  } else {
    console.log(JSON.stringify({ result, title: await page.title(), browser: browser.version() }));
  }
} catch (err) {
  failure = String(err);
} finally {
  // Only the page it opened is closed: the browser is the sandbox's and
  // stays open for whoever drives it next. Exiting ends the connection
  // (browser.close() is not called, as it may close the browser itself).
  await page.close().catch(() => {});
}
if (failure) {
  console.error(`form.mjs: ${failure}`);
  process.exit(1);
}
process.exit(0);
