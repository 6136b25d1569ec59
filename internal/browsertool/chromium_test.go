//go:build linux

package browsertool

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image/png"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/cdp"
	"github.com/hvkube/hvkube/internal/testbench"
	"github.com/hvkube/hvkube/internal/web/webtest"
)

// headless starts Debian's Chromium headless with DevTools on a port of
// its own, and returns its endpoint; it skips the test without Chromium
// (fails it under make test, which installs it).
func headless(t testing.TB) *cdp.Endpoint {
	t.Helper()
	bin := webtest.Chromium(t)
	// Not t.TempDir: Chromium's helper processes write there for a moment
	// after the browser ends, which fails its removal.
	profile, err := os.MkdirTemp("", "browsertool-profile-")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+profile, "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
		"--window-size=800,600", "about:blank")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		cmd.Wait()
		for i := 0; i < 50 && os.RemoveAll(profile) != nil; i++ {
			time.Sleep(100 * time.Millisecond)
		}
	})
	found := make(chan int, 1)
	go func() {
		re := regexp.MustCompile(`DevTools listening on ws://127\.0\.0\.1:(\d+)/`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				var port int
				fmt.Sscan(m[1], &port)
				found <- port
			}
		}
	}()
	var port int
	select {
	case port = <-found:
	case <-time.After(60 * time.Second):
		t.Fatal("chromium did not say where DevTools listens within a minute")
	}
	return cdp.NewEndpoint(port, func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", port))
	})
}

const formPage = `<!doctype html><title>Form</title>
<main><h1>Sign up</h1>
<form action="/done" method="get">
<label>Name <input id="name" name="name"></label>
<label><input type="checkbox" id="agree" name="agree"> I agree</label>
<label>Colour <select id="colour" name="colour"><option value="r">Red</option><option value="b">Blue</option></select></label>
<button type="button" id="go" onclick="document.getElementById('out').textContent='clicked ' + event.detail">Go</button>
<p id="out">not yet</p>
<p id="state"></p>
<div style="height:3000px">tall</div>
<a href="/done">Done page</a>
</form></main>
<script>
for (const e of document.querySelectorAll("input, select")) e.addEventListener("change", () => {
  document.getElementById("state").textContent = "state " + document.getElementById("name").value + " " +
    document.getElementById("agree").checked + " " + document.getElementById("colour").value;
});
</script>`

func site(t testing.TB) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		if r.URL.Path == "/done" {
			fmt.Fprintf(w, "<!doctype html><title>Done</title><p>done %s</p>", r.URL.RawQuery)
			return
		}
		fmt.Fprint(w, formPage)
	}))
	t.Cleanup(s.Close)
	return s.URL
}

// runner runs calls and returns their results.
type runner struct {
	t  testing.TB
	x  *Executor
	ep *cdp.Endpoint
	n  int
}

func (r *runner) calls(specs ...string) []Result {
	r.t.Helper()
	var calls []Call
	for _, s := range specs {
		name, in, _ := strings.Cut(s, " ")
		if in == "" {
			in = "{}"
		}
		r.n++
		calls = append(calls, Call{Type: "tool_use", ID: fmt.Sprintf("toolu_%d", r.n), Name: name, ToolsetName: ToolsetName, Input: json.RawMessage(in)})
	}
	if err := CheckCalls(calls); err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return r.x.Run(ctx, "sb", r.ep, calls)
}

// ok runs one call that must succeed and returns its text (all text
// blocks) and its other blocks.
func (r *runner) ok(spec string) (string, []any) {
	r.t.Helper()
	res := r.calls(spec)[0]
	txt, rest := split(res)
	if res.IsError {
		r.t.Fatalf("%s: error %s", spec, txt)
	}
	return txt, rest
}

// fail runs one call that must fail and returns its text.
func (r *runner) fail(spec string) string {
	r.t.Helper()
	res := r.calls(spec)[0]
	txt, rest := split(res)
	if !res.IsError || len(rest) != 0 {
		r.t.Fatalf("%s: %v %q %v, want an error of text alone", spec, res.IsError, txt, rest)
	}
	return txt
}

func split(res Result) (string, []any) {
	var txt []string
	var rest []any
	for _, c := range res.Content {
		if tb, ok := c.(TextBlock); ok {
			txt = append(txt, tb.Text)
		} else {
			rest = append(rest, c)
		}
	}
	return strings.Join(txt, "\n"), rest
}

// refOf is the reference read_page's text gives the line that holds what.
func refOf(t *testing.T, page, what string) string {
	t.Helper()
	for _, l := range strings.Split(page, "\n") {
		if strings.Contains(l, what) {
			if m := regexp.MustCompile(`\[(ref_\d+)\]`).FindStringSubmatch(l); m != nil {
				return m[1]
			}
		}
	}
	t.Fatalf("no line with %s and a reference in:\n%s", what, page)
	return ""
}

// eval evaluates expr on the front tab, as the test's own check.
func eval(t *testing.T, ep *cdp.Endpoint, expr string, out any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cur, err := ep.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ep.Attach(ctx, cur.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := cdp.NewPage(c).Eval(ctx, expr, out); err != nil {
		t.Fatal(err)
	}
}

// TestMembersOnChromium drives a page in headless Chromium through the
// members as a model calls them: by reference and by viewport pixel, the
// page's own events and state checked from outside.
func TestMembersOnChromium(t *testing.T) {
	ep := headless(t)
	base := site(t)
	r := &runner{t: t, x: NewExecutor(), ep: ep}

	txt, rest := r.ok(`navigate {"url": "` + base + `/"}`)
	if !strings.Contains(txt, "Navigated to "+base+"/ — Form") || len(rest) != 1 {
		t.Fatalf("navigate: %q %v", txt, rest)
	}
	if st := rest[0].(StateBlock); len(st.Tabs) != 1 || !st.Tabs[0].Active || st.Tabs[0].Title != "Form" {
		t.Errorf("navigate's browser_state: %+v", st)
	}
	page, _ := r.ok(`read_page`)
	for _, want := range []string{`heading "Sign up"`, `textbox "Name"`, `checkbox "I agree"`, `button "Go"`, `link "Done page"`} {
		if !strings.Contains(page, want) {
			t.Errorf("read_page has no %s:\n%s", want, page)
		}
	}
	button := refOf(t, page, `button "Go"`)
	if found, _ := r.ok(`find {"query": "the Go button"}`); !strings.Contains(strings.Split(found, "\n")[0], "["+button+"]") {
		t.Errorf("find the Go button: %s, want %s first", found, button)
	}
	if controls, _ := r.ok(`read_page {"filter": "interactive"}`); strings.Contains(controls, "heading") || !strings.Contains(controls, button) {
		t.Errorf("read_page interactive: %s", controls)
	}

	// A click by reference is a real one (event.detail counts it).
	r.ok(`left_click {"target": {"type": "ref", "ref": "` + button + `"}}`)
	var out string
	eval(t, ep, `document.getElementById("out").textContent`, &out)
	if out != "clicked 1" {
		t.Errorf("after left_click by ref: %q", out)
	}
	r.ok(`double_click {"target": {"type": "ref", "ref": "` + button + `"}}`)
	eval(t, ep, `document.getElementById("out").textContent`, &out)
	if out != "clicked 2" {
		t.Errorf("after double_click: %q", out)
	}

	// Form fields by reference fire the page's change events.
	r.ok(`form_input {"target": {"type": "ref", "ref": "` + refOf(t, page, `textbox "Name"`) + `"}, "value": "Ada"}`)
	r.ok(`form_input {"target": {"type": "ref", "ref": "` + refOf(t, page, `checkbox "I agree"`) + `"}, "value": true}`)
	r.ok(`form_input {"target": {"type": "ref", "ref": "` + refOf(t, page, `combobox "Colour"`) + `"}, "value": "Blue"}`)
	if txt, _ := r.ok(`get_page_text`); !strings.Contains(txt, "state Ada true b") {
		t.Errorf("get_page_text after form_input: %q", txt)
	}
	if txt := r.fail(`form_input {"target": {"type": "ref", "ref": "` + refOf(t, page, `combobox "Colour"`) + `"}, "value": "Green"}`); !strings.Contains(txt, `no option "Green"`) {
		t.Errorf("a select's missing option: %q", txt)
	}

	// By pixel: a click into the field, then type and keys there.
	var box [2]float64
	eval(t, ep, `(() => { const r = document.getElementById("name").getBoundingClientRect(); return [Math.round(r.x + r.width/2), Math.round(r.y + r.height/2)] })()`, &box)
	r.ok(fmt.Sprintf(`triple_click {"target": {"type": "coordinate", "x": %.0f, "y": %.0f}}`, box[0], box[1]))
	r.ok(`type {"text": "Grace"}`)
	r.ok(`key {"text": "BackSpace", "repeat": 2}`)
	r.ok(`key {"text": "shift+a"}`)
	var value string
	eval(t, ep, `document.getElementById("name").value`, &value)
	if value != "GraA" {
		t.Errorf("the field after triple_click, type, key: %q, want GraA", value)
	}

	// The screenshot is the viewport; zoom enlarges a region.
	_, rest = r.ok(`screenshot`)
	var vp [2]int
	eval(t, ep, `[innerWidth, innerHeight]`, &vp)
	if w, h := pngSize(t, rest); w != vp[0] || h != vp[1] {
		t.Errorf("screenshot %dx%d, want the %dx%d viewport", w, h, vp[0], vp[1])
	}
	_, rest = r.ok(`zoom {"region": [0, 0, 200, 100]}`)
	if w, _ := pngSize(t, rest); w <= 200 {
		t.Errorf("zoom of a 200 px wide region: %d px wide", w)
	}

	r.ok(fmt.Sprintf(`scroll {"target": {"type": "coordinate", "x": 100, "y": 100}, "scroll_direction": "down", "scroll_amount": 5}`))
	var y float64
	for deadline := time.Now().Add(5 * time.Second); y == 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		eval(t, ep, `scrollY`, &y)
	}
	if y == 0 {
		t.Errorf("scroll down moved nothing")
	}
	r.ok(`scroll_to {"target": {"type": "ref", "ref": "` + button + `"}}`)

	// A link clicked by reference navigates; the page's references are
	// stale after, and the rest of the batch is not run.
	link := refOf(t, page, `link "Done page"`)
	res := r.calls(`left_click {"target": {"type": "ref", "ref": "`+link+`"}}`, `left_click {"target": {"type": "ref", "ref": "`+button+`"}}`, `wait {"duration": 0}`)
	if txt, rest := split(res[0]); res[0].IsError || len(rest) != 1 {
		t.Fatalf("the link's click: %v %q %v, want a browser_state of the new page", res[0].IsError, txt, rest)
	}
	if txt, _ := split(res[1]); !res[1].IsError || !strings.Contains(txt, button+" is stale") {
		t.Errorf("a reference of the page before: %v %q", res[1].IsError, txt)
	}
	if txt, _ := split(res[2]); !res[2].IsError || txt != notExecuted {
		t.Errorf("the call after a failed one: %v %q", res[2].IsError, txt)
	}
	if txt, _ := r.ok(`navigate {"url": "back"}`); !strings.Contains(txt, "— Form") {
		t.Errorf("navigate back: %q", txt)
	}
}

func pngSize(t *testing.T, blocks []any) (int, int) {
	t.Helper()
	if len(blocks) != 1 {
		t.Fatalf("%d blocks, want one image", len(blocks))
	}
	img := blocks[0].(ImageBlock)
	b, err := base64.StdEncoding.DecodeString(img.Source.Data)
	if err != nil || img.Source.MediaType != "image/png" {
		t.Fatalf("image: %v %s", err, img.Source.MediaType)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Width, cfg.Height
}

// TestTabsOnChromium opens, lists, switches and closes tabs: each result
// is one browser_state block, the new tab opened and in front.
func TestTabsOnChromium(t *testing.T) {
	ep := headless(t)
	r := &runner{t: t, x: NewExecutor(), ep: ep}
	_, rest := r.ok(`list_tabs`)
	first := rest[0].(StateBlock).Tabs[0].TabID
	txt, rest := r.ok(`new_tab`)
	if txt != "" || len(rest) != 1 {
		t.Fatalf("new_tab: %q %v, want one browser_state alone", txt, rest)
	}
	st := rest[0].(StateBlock)
	if len(st.Tabs) != 2 || len(st.StateChanges) != 1 || st.StateChanges[0].Type != "tab_opened" || st.StateChanges[0].TabID != st.Tabs[0].TabID || !st.Tabs[0].Active {
		t.Fatalf("new_tab's state: %+v", st)
	}
	opened := st.Tabs[0].TabID
	_, rest = r.ok(`switch_tab {"tab_id": "` + first + `"}`)
	if st := rest[0].(StateBlock); st.Tabs[0].TabID != first || !st.Tabs[0].Active || st.StateChanges != nil {
		t.Errorf("switch_tab: %+v", st)
	}
	_, rest = r.ok(`close_tab {"tab_id": "` + opened + `"}`)
	if st := rest[0].(StateBlock); len(st.Tabs) != 1 {
		t.Errorf("close_tab: %+v", st)
	}
	if txt := r.fail(`close_tab {"tab_id": "` + first + `"}`); !strings.Contains(txt, "only tab") {
		t.Errorf("closing the last tab: %q", txt)
	}
	if txt := r.fail(`switch_tab {"tab_id": "nope"}`); !strings.Contains(txt, "tab_id") {
		t.Errorf("switch to no such tab: %q", txt)
	}
}

// TestBadInputOnChromium: a model's mistakes come back as error results
// that name the field, and change nothing.
func TestBadInputOnChromium(t *testing.T) {
	ep := headless(t)
	r := &runner{t: t, x: NewExecutor(), ep: ep}
	for _, tt := range []struct{ call, say string }{
		{`navigate {"url": "file:///etc/passwd"}`, "Only http and https"},
		{`navigate {"url": "javascript:alert(1)"}`, "Only http and https"},
		{`navigate {}`, "url: required"},
		{`scroll {"target": {"type": "coordinate", "x": 1, "y": 1}, "scroll_direction": "down", "scroll_amount": 11}`, "scroll_amount: 11 is out of range 1..10"},
		{`scroll {"target": {"type": "coordinate", "x": 1, "y": 1}, "scroll_direction": "sideways"}`, "scroll_direction"},
		{`left_click {"target": {"type": "coordinate", "x": 5000, "y": 1}}`, "off the"},
		{`left_click {"target": {"type": "coordinate", "x": 1.5, "y": 1}}`, "integer x and y"},
		{`left_click {"target": {"type": "ref", "ref": "ref_99"}}`, "ref_99 is stale or not found"},
		{`left_click {"target": {"type": "node"}}`, "target.type"},
		{`left_click {"target": {"type": "coordinate", "x": 1, "y": 1}, "modifiers": "hyper"}`, "modifiers"},
		{`left_mouse_down {"target": {"type": "ref", "ref": "ref_1"}}`, "takes a coordinate target"},
		{`wait {"duration": 31}`, "duration: 31 is out of range"},
		{`hold_key {"text": "a", "duration": -1}`, "duration"},
		{`key {"text": "NoSuchKey"}`, "is not a key"},
		{`key {"text": "a", "repeat": 101}`, "repeat"},
		{`zoom {"region": [10, 10, 5, 5]}`, "region"},
		{`read_page {"filter": "some"}`, "filter"},
		{`find {"query": "the"}`, "query"},
		{`javascript_exec {"text": "1"}`, "javascript_exec is not enabled in this environment"},
		{`file_upload {}`, "not enabled"},
		{`teleport {}`, "not a member"},
		{`type {"text": 5}`, "text: not a string"},
	} {
		if txt := r.fail(tt.call); !strings.Contains(txt, tt.say) {
			t.Errorf("%s: %q, want it to say %q", tt.call, txt, tt.say)
		}
	}
	var href string
	eval(t, ep, `location.href`, &href)
	if href != "about:blank" {
		t.Errorf("the page after refused calls: %s", href)
	}
}

// BenchmarkMembersOnChromium times members on headless Chromium on this
// host (no guest between): read_page, a click by reference, a screenshot.
func BenchmarkMembersOnChromium(b *testing.B) {
	ep := headless(b)
	base := site(b)
	r := &runner{t: b, x: NewExecutor(), ep: ep}
	one := func(spec string) (time.Duration, string) {
		start := time.Now()
		res := r.calls(spec)[0]
		d := time.Since(start)
		txt, _ := split(res)
		if res.IsError {
			b.Fatalf("%s: %s", spec, txt)
		}
		return d, txt
	}
	one(`navigate {"url": "` + base + `/"}`)
	_, page := one(`read_page`)
	button := regexp.MustCompile(`button "Go" \[(ref_\d+)\]`).FindStringSubmatch(page)[1]
	var read, click, shot []time.Duration
	for b.Loop() {
		d, _ := one(`read_page`)
		read = append(read, d)
		d, _ = one(`left_click {"target": {"type": "ref", "ref": "` + button + `"}}`)
		click = append(click, d)
		d, _ = one(`screenshot`)
		shot = append(shot, d)
	}
	testbench.Percentiles(b, "read_page", read)
	testbench.Percentiles(b, "click-ref", click)
	testbench.Percentiles(b, "screenshot", shot)
	b.ReportMetric(0, "ns/op")
}
