package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// playwright runs Playwright (playwright-core, from a node_modules
// directory) in node against a sandbox's forwarded DevTools.
type playwright struct {
	node, nodeModules    string
	version, nodeVersion string
	// why, when set, is why Playwright cannot be run here.
	why string
}

func (p *playwright) ok() bool { return p.why == "" }

// findPlaywright looks for node on PATH and playwright-core in
// nodeModules; the result says why not when either is missing.
func findPlaywright(nodeModules string) *playwright {
	p := &playwright{nodeModules: nodeModules}
	if nodeModules == "" {
		p.why = "no node_modules directory given (--node-modules)"
		return p
	}
	node, err := exec.LookPath("node")
	if err != nil {
		p.why = "node is not on PATH"
		return p
	}
	p.node = node
	b, err := os.ReadFile(filepath.Join(nodeModules, "playwright-core", "package.json"))
	if err != nil {
		p.why = fmt.Sprintf("playwright-core is not installed in %s (npm install in examples/playwright installs it)", nodeModules)
		return p
	}
	var pkg struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(b, &pkg); err != nil || pkg.Version == "" {
		p.why = fmt.Sprintf("%s: playwright-core's package.json names no version", nodeModules)
		return p
	}
	p.version = pkg.Version
	if out, err := exec.Command(node, "--version").Output(); err == nil {
		p.nodeVersion = strings.TrimSpace(string(out))
	}
	return p
}

// playwrightScript connects Playwright over CDP to HVKUBE_CDP_URL with
// the token in HVKUBE_TOKEN, opens HVKUBE_PAGE_URL in the browser's first
// tab twice, checks the page's title (HVKUBE_PAGE_TITLE) and disconnects,
// leaving the browser running. It prints its times in milliseconds as
// JSON, and when the first goto began (milliseconds since the epoch, so
// that it compares with the host server's clock). Every value comes from the environment: nothing is pasted into
// the script.
const playwrightScript = `
const { chromium } = require('playwright-core');
(async () => {
  const env = process.env;
  const t0 = performance.now();
  const browser = await chromium.connectOverCDP(env.HVKUBE_CDP_URL, {
    headers: { Authorization: 'Bearer ' + env.HVKUBE_TOKEN }, timeout: 120000 });
  const t1 = performance.now();
  const context = browser.contexts()[0];
  const page = context.pages()[0] || await context.newPage();
  const t2 = performance.now();
  await page.goto(env.HVKUBE_PAGE_URL, { waitUntil: 'load', timeout: 120000 });
  const t3 = performance.now();
  const title = await page.title();
  if (title !== env.HVKUBE_PAGE_TITLE) throw new Error('page title ' + JSON.stringify(title) + ', want ' + JSON.stringify(env.HVKUBE_PAGE_TITLE));
  const t4 = performance.now();
  await page.goto(env.HVKUBE_PAGE_URL + '?again', { waitUntil: 'load', timeout: 120000 });
  const t5 = performance.now();
  await browser.close();
  process.stdout.write(JSON.stringify({ connect: t1 - t0, goto: t3 - t2, again: t5 - t4, gotoStartEpoch: performance.timeOrigin + t2 }));
})().catch((e) => { console.error(String((e && e.stack) || e)); process.exit(1); });
`

// playwrightRun is one run's times.
type playwrightRun struct {
	Connect, Goto, Again time.Duration
	// GotoStart is when the first goto began.
	GotoStart time.Time
	// Process is the node process from start to exit.
	Process time.Duration
}

// run runs playwrightScript against the forward cdp (http://HOST/api/v1/
// sandboxes/NAME/ports/9222) with token, opening pageURL, whose title is
// title. It takes five minutes at most.
func (p *playwright) run(ctx context.Context, cdp, token, pageURL, title string) (playwrightRun, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.node, "-e", playwrightScript)
	cmd.Env = append(os.Environ(),
		"NODE_PATH="+p.nodeModules,
		"HVKUBE_CDP_URL="+cdp,
		"HVKUBE_TOKEN="+token,
		"HVKUBE_PAGE_URL="+pageURL,
		"HVKUBE_PAGE_TITLE="+title,
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t := time.Now()
	err := cmd.Run()
	took := time.Since(t)
	if err != nil {
		return playwrightRun{}, fmt.Errorf("playwright: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	var ms struct {
		Connect, Goto, Again, GotoStartEpoch float64
	}
	if err := json.Unmarshal(stdout.Bytes(), &ms); err != nil {
		return playwrightRun{}, fmt.Errorf("playwright: %w: %.300q", err, stdout.String())
	}
	d := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	return playwrightRun{Connect: d(ms.Connect), Goto: d(ms.Goto), Again: d(ms.Again), Process: took,
		GotoStart: time.UnixMicro(int64(ms.GotoStartEpoch * 1000))}, nil
}
