//go:build linux

// Package webtest runs the dashboard's browser scenarios (web/test/*.mjs,
// playwright-core on Debian's Chromium) against a server a Go test started.
// Tests only.
package webtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/web"
)

// Config is what a scenario gets on its standard input.
type Config struct {
	URL   string `json:"url"`
	Token string `json:"token,omitempty"`
	// DisplayToken is what a live-view link carries (the link scenario).
	DisplayToken string `json:"displayToken,omitempty"`
	Chromium     string `json:"chromium"`
	Pool         string `json:"pool,omitempty"`
	// PoolText is text the pool's card must show, such as "1/2".
	PoolText string `json:"poolText,omitempty"`
	Sandbox  string `json:"sandbox,omitempty"`
	Agent    string `json:"agent,omitempty"`
	Question string `json:"question,omitempty"`
	Answer   string `json:"answer,omitempty"`
	// Control makes the live scenario take control and hand it back.
	Control bool `json:"control,omitempty"`
	// LongTimeoutMS bounds waits for the desktop (live view, reset).
	LongTimeoutMS int    `json:"longTimeoutMs,omitempty"`
	Artifacts     string `json:"artifacts,omitempty"`
}

// Result is a scenario's last line of output.
type Result struct {
	OK    bool           `json:"ok"`
	Error string         `json:"error"`
	Notes map[string]any `json:"notes"`
}

// webDir is the repository's web/ directory.
func webDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "web")
}

// Require returns Chromium's path once everything a scenario needs is
// there: Chromium, Node.js, web/node_modules (npm ci) and the built
// dashboard in the test binary. A missing piece skips the test, or fails
// it when HVKUBE_REQUIRE_BROWSER is set (make test).
func Require(t testing.TB) string {
	t.Helper()
	browser := Chromium(t)
	if _, err := exec.LookPath("node"); err != nil {
		missing(t, "node is not installed: run make deps (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(webDir(), "node_modules", "playwright-core", "package.json")); err != nil {
		missing(t, "web/node_modules has no playwright-core: run make web (%v)", err)
	}
	if _, built := web.Files(); !built {
		missing(t, "the dashboard is not built into this binary: run make web")
	}
	return browser
}

// Chromium returns the path of Debian's Chromium; without it the test is
// skipped, or failed when HVKUBE_REQUIRE_BROWSER is set (make test).
func Chromium(t testing.TB) string {
	t.Helper()
	browser, err := exec.LookPath("chromium")
	if err != nil {
		missing(t, "chromium is not installed: run make deps (%v)", err)
	}
	return browser
}

// missing skips the test for what it lacks, or fails it when
// HVKUBE_REQUIRE_BROWSER is set.
func missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("HVKUBE_REQUIRE_BROWSER") != "" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// Run runs web/test/dashboard.mjs SCENARIO with cfg, within timeout. The
// browser and everything it started are killed when it returns.
func Run(t testing.TB, scenario string, cfg Config, timeout time.Duration) Result {
	t.Helper()
	if cfg.Artifacts == "" {
		// HVKUBE_WEBTEST_ARTIFACTS keeps the screenshots of failed
		// scenarios after the test.
		cfg.Artifacts = os.Getenv("HVKUBE_WEBTEST_ARTIFACTS")
	}
	if cfg.Artifacts == "" {
		cfg.Artifacts = t.TempDir()
	}
	in, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join("test", "dashboard.mjs"), scenario)
	cmd.Dir = webDir()
	cmd.Stdin = bytes.NewReader(in)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	// Its own process group, so that Chromium goes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	runErr := cmd.Run()
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var res Result
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("dashboard scenario %s: %v (%v)\nstdout:\n%s\nstderr:\n%s", scenario, runErr, err, out.String(), errOut.String())
	}
	if runErr != nil && res.OK {
		res.OK, res.Error = false, fmt.Sprintf("exit: %v", runErr)
	}
	if !res.OK && errOut.Len() > 0 {
		res.Error += "\nstderr:\n" + errOut.String()
	}
	return res
}

// MustRun is Run that fails the test when the scenario fails.
func MustRun(t testing.TB, scenario string, cfg Config, timeout time.Duration) Result {
	t.Helper()
	res := Run(t, scenario, cfg, timeout)
	if !res.OK {
		t.Fatalf("dashboard scenario %s failed: %s\nnotes: %v", scenario, res.Error, res.Notes)
	}
	t.Logf("dashboard scenario %s: %v", scenario, res.Notes)
	return res
}
