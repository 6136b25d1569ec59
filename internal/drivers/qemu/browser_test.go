//go:build linux

package qemu

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
)

// requireBrowserImage skips when the browser-desktop image is not built,
// unless HVKUBE_REQUIRE_BROWSER_IMAGE is set (make test sets it, as it
// builds the image: there a missing image is a failure).
func requireBrowserImage(t testing.TB) string {
	t.Helper()
	dir := DefaultImageDir()
	if _, err := os.Stat(filepath.Join(dir, "browser-desktop", "current", "image.json")); err != nil {
		if os.Getenv("HVKUBE_REQUIRE_BROWSER_IMAGE") != "" {
			t.Fatalf("the browser-desktop image is not built (%v): run make image-browser", err)
		}
		t.Skipf("the browser-desktop image is not built: run make image-browser (%v)", err)
	}
	return dir
}

// browserImageInfo is what the browser-desktop image.json says about its
// browser and automation ports.
type browserImageInfo struct {
	Browser struct {
		WindowClass     string `json:"windowClass"`
		StartTitle      string `json:"startTitle"`
		ChromiumVersion string `json:"chromiumVersion"`
	} `json:"browser"`
	Automation struct {
		CDP       int `json:"cdp"`
		WebDriver int `json:"webdriver"`
	} `json:"automation"`
}

// TestBrowserDesktop builds a browser-desktop template (a cold boot that
// waits for Chromium's start page), clones it and resumes the clone:
// Chromium's window and its start page must be on the screen at once, with
// no program started in the clone, and its automation endpoints (CDP and
// chromedriver) must answer inside the guest at once.
func TestBrowserDesktop(t *testing.T) {
	imageDir := requireBrowserImage(t)
	var want browserImageInfo
	if b, err := os.ReadFile(filepath.Join(imageDir, "browser-desktop", "current", "image.json")); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(b, &want); err != nil {
		t.Fatalf("image.json: %v", err)
	}
	if want.Browser.WindowClass == "" || want.Browser.ChromiumVersion == "" || want.Automation.CDP == 0 || want.Automation.WebDriver == 0 {
		t.Fatalf("image.json has no Chromium browser block or automation ports: %+v (rebuild the image: make image-browser)", want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	b, err := New(ctx, Config{Dir: t.TempDir(), ImageDir: imageDir, NoSpares: true, BootTimeout: 8 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	defer deleteBrowserTest(b)

	start := time.Now()
	tpl, err := b.BuildTemplate(ctx, backend.TemplateSpec{ID: "browser-desktop-test", Image: api.QEMUImage{Image: "browser-desktop"}},
		func(msg string) { t.Logf("template: %s", msg) })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("template built in %s (boot %s)", time.Since(start).Round(time.Second), tpl.BootTime.Round(time.Second))
	// The image declares its automation ports, and the snapshot keeps them.
	if want := (api.Automation{CDP: 9222, WebDriver: 9515}); tpl.Automation != want {
		t.Errorf("template automation %+v, want %+v", tpl.Automation, want)
	}
	if again, err := b.InspectTemplate(ctx, tpl.ID); err != nil || again.Automation != tpl.Automation {
		t.Errorf("inspected template automation %+v (%v), want %+v", again.Automation, err, tpl.Automation)
	}

	info, err := b.Create(ctx, backend.SandboxSpec{ID: "browser-1", TemplateID: tpl.ID})
	if err != nil {
		t.Fatal(err)
	}
	if info.MemoryMB < 1024 {
		t.Errorf("clone has %d MB: the image recommends more for Chromium", info.MemoryMB)
	}
	if err := b.Resume(ctx, info.ID); err != nil {
		t.Fatal(err)
	}

	// The first X client run in the clone finds Chromium's window showing
	// the start page: it was on the screen when the snapshot was taken. A
	// cold Chromium start takes far longer than this bound under emulation.
	xctx, xcancel := context.WithTimeout(ctx, 30*time.Second)
	defer xcancel()
	res, err := b.Exec(xctx, info.ID, backend.ExecRequest{Path: "/usr/bin/xdotool",
		Args: []string{"search", "--onlyvisible", "--class", "^" + want.Browser.WindowClass + "$", "getwindowname", "%@"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || !strings.Contains(string(res.Stdout), want.Browser.StartTitle) {
		t.Fatalf("no Chromium window with the start page after resume: exit %d, out %q, err %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	// One Chromium browser process, the template's: nothing was started again.
	if got := chromiumBrowsers(t, xctx, b, info.ID); got != "1" {
		t.Errorf("Chromium browser processes in the clone: %q, want 1", got)
	}

	// The screen shows the start page: its header's colour (#1f6f5c) covers
	// a band across the maximised window. It was on the screen when the
	// snapshot was taken; a few seconds are allowed for a repaint after the
	// resume, far less than a cold Chromium start under emulation.
	screenShowsStartPage(t, ctx, b, info.ID)

	// The automation endpoints answer in the clone at once (checked inside
	// the guest: the NIC and hvkube's forward to it are tested elsewhere).
	actx, acancel := context.WithTimeout(ctx, 2*time.Minute)
	defer acancel()
	status, body := guestHTTP(t, actx, b, info.ID, "GET", want.Automation.CDP, "/json/version", "")
	var version struct {
		Browser, WebSocketDebuggerURL string
	}
	if err := json.Unmarshal(body, &version); status != 200 || err != nil {
		t.Fatalf("CDP /json/version: %d %q (%v)", status, body, err)
	}
	// Chromium calls itself Chrome here; the version is the package's.
	upstream, _, _ := strings.Cut(want.Browser.ChromiumVersion, "-")
	if version.Browser != "Chrome/"+upstream || !strings.HasPrefix(version.WebSocketDebuggerURL, "ws://localhost:") {
		t.Errorf("CDP /json/version: Browser %q, webSocketDebuggerUrl %q; want Chrome/%s and a ws://localhost: URL", version.Browser, version.WebSocketDebuggerURL, upstream)
	}

	status, body = guestHTTP(t, actx, b, info.ID, "GET", want.Automation.WebDriver, "/status", "")
	var wdStatus struct {
		Value struct {
			Ready bool `json:"ready"`
		} `json:"value"`
	}
	if err := json.Unmarshal(body, &wdStatus); status != 200 || err != nil || !wdStatus.Value.Ready {
		t.Fatalf("chromedriver /status: %d %q (%v)", status, body, err)
	}

	// A Selenium client's session: chromedriver attaches to the running
	// browser through its CDP port, sees the start page, and leaves the
	// browser running when the session ends.
	caps := fmt.Sprintf(`{"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {"debuggerAddress": "localhost:%d"}}}}`, want.Automation.CDP)
	status, body = guestHTTP(t, actx, b, info.ID, "POST", want.Automation.WebDriver, "/session", caps)
	var session struct {
		Value struct {
			SessionID string `json:"sessionId"`
		} `json:"value"`
	}
	if err := json.Unmarshal(body, &session); status != 200 || err != nil || session.Value.SessionID == "" {
		t.Fatalf("WebDriver new session attached to the browser: %d %q (%v)", status, body, err)
	}
	status, body = guestHTTP(t, actx, b, info.ID, "GET", want.Automation.WebDriver, "/session/"+session.Value.SessionID+"/title", "")
	var title struct {
		Value string `json:"value"`
	}
	if err := json.Unmarshal(body, &title); status != 200 || err != nil || title.Value != want.Browser.StartTitle {
		t.Errorf("WebDriver title: %d %q (%v), want %q", status, body, err, want.Browser.StartTitle)
	}
	if status, body = guestHTTP(t, actx, b, info.ID, "DELETE", want.Automation.WebDriver, "/session/"+session.Value.SessionID, ""); status != 200 {
		t.Errorf("WebDriver delete session: %d %q", status, body)
	}
	if got := chromiumBrowsers(t, actx, b, info.ID); got != "1" {
		t.Errorf("Chromium browser processes after the WebDriver session: %q, want 1", got)
	}
}

// chromiumBrowsers counts Chromium's browser processes in the sandbox: its
// other processes (renderers, zygotes, utilities) have a --type= argument.
func chromiumBrowsers(t *testing.T, ctx context.Context, b *Backend, id string) string {
	t.Helper()
	res, err := b.Exec(ctx, id, backend.ExecRequest{Path: "/bin/sh",
		Args: []string{"-c", "ps -C chromium -o args= | grep -c -v -e --type="}})
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(res.Stdout))
}

// guestHTTPScript sends one HTTP/1.1 request to 127.0.0.1:$2 with bash's
// /dev/tcp (the image has no HTTP client) and prints the status code, a
// newline and the body: $1 method, $3 path, $4 JSON body. The Host header
// is localhost:PORT, which both Chromium's DevTools and chromedriver accept.
const guestHTTPScript = `set -eu
LC_ALL=C
exec 3<>"/dev/tcp/127.0.0.1/$2"
printf '%s %s HTTP/1.1\r\nHost: localhost:%s\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s' "$1" "$3" "$2" "${#4}" "$4" >&3
read -r _ status _ <&3
len=-1
while IFS= read -r line <&3; do
	line=${line%$'\r'}
	[[ -n $line ]] || break
	case ${line,,} in content-length:*) len=$((${line#*:})) ;; esac
done
body=
if ((len > 0)); then
	read -r -N "$len" body <&3 || true
elif ((len < 0)); then
	body=$(cat <&3)
fi
printf '%s
%s' "$status" "$body"
`

// guestHTTP sends one request to 127.0.0.1:port inside the sandbox through
// the guest agent and returns the status code and the body.
func guestHTTP(t *testing.T, ctx context.Context, b *Backend, id, method string, port int, path, body string) (int, []byte) {
	t.Helper()
	res, err := b.Exec(ctx, id, backend.ExecRequest{Path: "/bin/bash",
		Args: []string{"-c", guestHTTPScript, "http", method, strconv.Itoa(port), path, body}})
	if err != nil {
		t.Fatalf("%s :%d%s: %v", method, port, path, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("%s :%d%s: exit %d, %q", method, port, path, res.ExitCode, res.Stderr)
	}
	line, rest, _ := bytes.Cut(res.Stdout, []byte("\n"))
	status, err := strconv.Atoi(string(line))
	if err != nil {
		t.Fatalf("%s :%d%s: no status line in %q", method, port, path, res.Stdout)
	}
	return status, rest
}

// screenShowsStartPage takes screenshots of sandbox id for up to 20 s
// until the start page's header colour (#1f6f5c) covers a band across the
// screen. On failure it reports what the screen showed instead: its most
// common colours and the visible windows.
func screenShowsStartPage(t *testing.T, ctx context.Context, b *Backend, id string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		img, typ, err := b.Screenshot(ctx, id, backend.ScreenshotOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if typ != "image/png" {
			t.Fatalf("screenshot type %q", typ)
		}
		pic, err := png.Decode(bytes.NewReader(img))
		if err != nil {
			t.Fatal(err)
		}
		bounds := pic.Bounds()
		counts := map[uint32]int{}
		header := 0
		for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
			for x := bounds.Min.X; x < bounds.Max.X; x++ {
				r, g, bl, _ := pic.At(x, y).RGBA()
				r, g, bl = r>>8, g>>8, bl>>8
				counts[r<<16|g<<8|bl]++
				if nearByte(r, 0x1f) && nearByte(g, 0x6f) && nearByte(bl, 0x5c) {
					header++
				}
			}
		}
		want := bounds.Dx() * 40
		if header >= want && len(counts) >= 10 {
			return
		}
		if time.Now().Before(deadline) {
			time.Sleep(2 * time.Second)
			continue
		}
		top := make([]uint32, 0, len(counts))
		for c := range counts {
			top = append(top, c)
		}
		sort.Slice(top, func(i, j int) bool { return counts[top[i]] > counts[top[j]] })
		var desc []string
		for _, c := range top[:min(6, len(top))] {
			desc = append(desc, fmt.Sprintf("#%06x×%d", c, counts[c]))
		}
		xctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		res, err := b.Exec(xctx, id, backend.ExecRequest{Path: "/bin/sh", Args: []string{"-c",
			`for w in $(xdotool search --onlyvisible --name '.*'); do xdotool getwindowname "$w"; xdotool getwindowgeometry "$w" | tail -n +2; done 2>&1 | head -c 2000`}})
		windows := ""
		if err == nil {
			windows = string(res.Stdout)
		}
		t.Fatalf("the screen does not show the start page: %d pixels of its header colour, want at least %d (a %dx%d screen, %d colours); most common: %s; visible windows:\n%s",
			header, want, bounds.Dx(), bounds.Dy(), len(counts), strings.Join(desc, " "), windows)
	}
}

func nearByte(v, want uint32) bool { return v+8 >= want && v <= want+8 }

// deleteBrowserTest deletes every sandbox and template of b.
func deleteBrowserTest(b *Backend) {
	ctx := context.Background()
	list, _ := b.List(ctx)
	for _, s := range list {
		b.Delete(ctx, s.ID)
	}
	b.DeleteTemplate(ctx, "browser-desktop-test")
}
