package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

// watchLines opens a watch of path (with its query) and returns its
// events as "TYPE name" strings; next(wait) answers "nothing" when no event
// comes within wait.
func watchLines(t *testing.T, ts *testServer, path string) (next func(wait time.Duration) string, code int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		return nil, resp.StatusCode
	}
	t.Cleanup(func() { resp.Body.Close() })
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return func(wait time.Duration) string {
		t.Helper()
		select {
		case l := <-lines:
			var ev struct {
				Type   string `json:"type"`
				Object struct {
					Metadata api.ObjectMeta `json:"metadata"`
				} `json:"object"`
			}
			if err := json.Unmarshal([]byte(l), &ev); err != nil {
				t.Fatalf("bad line %q: %v", l, err)
			}
			return ev.Type + " " + ev.Object.Metadata.Name
		case <-time.After(wait):
			return "nothing"
		}
	}, 200
}

// Waits for watch events: long for one that must come, short to see that
// none does.
const (
	eventWait   = 5 * time.Second
	nothingWait = 300 * time.Millisecond
)

func sandboxWithLabels(name, labels string) string {
	return fmt.Sprintf("apiVersion: hvkube/v1\nkind: Sandbox\nmetadata:\n  name: %s\n  labels: {%s}\n", name, labels)
}

// TestWatchSelectorTransitions: an object that leaves a watch's selector
// reaches it as DELETED, one that enters it as ADDED, as in Kubernetes.
func TestWatchSelectorTransitions(t *testing.T) {
	ts := start(t, Options{})
	put := func(name, labels string) {
		t.Helper()
		if code, _, b := ts.do(t, "PUT", "/api/v1/sandboxes/"+name, "application/yaml", sandboxWithLabels(name, labels)); code >= 300 {
			t.Fatalf("put: %d %s", code, b)
		}
	}
	put("a", "tier: web")
	put("b", "tier: db")
	next, _ := watchLines(t, ts, "/api/v1/sandboxes?watch=true&labelSelector="+url.QueryEscape("tier=web"))
	steps := []struct {
		do   func()
		want string
	}{
		{func() {}, "ADDED a"},
		{func() { put("a", "tier: web, x: one") }, "MODIFIED a"},
		{func() { put("a", "tier: db") }, "DELETED a"},
		{func() { put("a", "tier: db, x: z") }, "nothing"},
		{func() { put("b", "tier: web") }, "ADDED b"},
		{func() { ts.do(t, "DELETE", "/api/v1/sandboxes/b", "", "") }, "DELETED b"},
		{func() { ts.do(t, "DELETE", "/api/v1/sandboxes/a", "", "") }, "nothing"},
	}
	for i, s := range steps {
		s.do()
		wait := eventWait
		if s.want == "nothing" {
			wait = nothingWait
		}
		if got := next(wait); got != s.want {
			t.Fatalf("step %d: got %q, want %q", i, got, s.want)
		}
	}
}

// TestWatchFromResourceVersion: a watch from a resourceVersion gets
// exactly the later changes; one the server cannot honour is 410.
func TestWatchFromResourceVersion(t *testing.T) {
	ts := start(t, Options{})
	ts.do(t, "POST", "/api/v1/sandboxes", "application/yaml", sandboxWithLabels("a", ""))
	code, _, body := ts.do(t, "GET", "/api/v1/sandboxes", "", "")
	var list struct {
		Metadata ListMeta `json:"metadata"`
	}
	if code != 200 || json.Unmarshal(body, &list) != nil || list.Metadata.ResourceVersion == "" {
		t.Fatalf("list: %d %s", code, body)
	}
	next, code := watchLines(t, ts, "/api/v1/sandboxes?watch=true&resourceVersion="+list.Metadata.ResourceVersion)
	if code != 200 {
		t.Fatalf("watch from the list's revision: %d", code)
	}
	if got := next(nothingWait); got != "nothing" {
		t.Fatalf("a watch from the current revision replayed %q", got)
	}
	ts.do(t, "POST", "/api/v1/sandboxes", "application/yaml", sandboxWithLabels("b", ""))
	if got := next(eventWait); got != "ADDED b" {
		t.Fatalf("got %q, want ADDED b", got)
	}
	// From the same, now older, revision a watch replays what came after.
	again, code := watchLines(t, ts, "/api/v1/sandboxes?watch=true&resourceVersion="+list.Metadata.ResourceVersion)
	if code != 200 {
		t.Fatalf("watch from an older revision: %d", code)
	}
	if got := again(eventWait); got != "ADDED b" {
		t.Fatalf("replay from an older revision: %q, want ADDED b", got)
	}
	if _, code := watchLines(t, ts, "/api/v1/sandboxes?watch=true&resourceVersion=999999"); code != http.StatusGone {
		t.Fatalf("watch from a future revision: %d, want 410", code)
	}
	// A list may name any revision it is not older than.
	if code, _, b := ts.do(t, "GET", "/api/v1/sandboxes?resourceVersion="+list.Metadata.ResourceVersion, "", ""); code != 200 {
		t.Fatalf("list not older than a revision: %d %s", code, b)
	}
}

// TestEventsWatchFromResourceVersion: the audit log keeps history, so a
// watch of events resumes after any event it still holds.
func TestEventsWatchFromResourceVersion(t *testing.T) {
	ts := start(t, Options{})
	for _, n := range []string{"a", "b", "c"} {
		ts.do(t, "POST", "/api/v1/sandboxes", "application/yaml", sandboxWithLabels(n, ""))
	}
	code, _, body := ts.do(t, "GET", "/api/v1/events?resourceVersion=1", "", "")
	var list struct {
		Items []api.Event `json:"items"`
	}
	if code != 200 || json.Unmarshal(body, &list) != nil {
		t.Fatalf("events after 1: %d %s", code, body)
	}
	if len(list.Items) != 2 || list.Items[0].InvolvedObject.Name != "b" {
		t.Fatalf("events after the first: %s", body)
	}
}

// TestListPages: limit and continue page a list as Kubernetes does, with
// and without a selector, and bad tokens are refused.
func TestListPages(t *testing.T) {
	ts := start(t, Options{})
	for i := 0; i < 25; i++ {
		tier := "web"
		if i%2 == 1 {
			tier = "db"
		}
		ts.do(t, "POST", "/api/v1/sandboxes", "application/yaml", sandboxWithLabels(fmt.Sprintf("s%02d", i), "tier: "+tier))
	}
	for _, tt := range []struct {
		selector string
		limit    int
		pages    []int
	}{
		{"", 10, []int{10, 10, 5}},
		{"", 25, []int{25}},
		{"", 24, []int{24, 1}},
		{"tier=web", 5, []int{5, 5, 3}},
		{"tier=db", 100, []int{12}},
	} {
		var got []int
		var names []string
		cont := ""
		for len(got) < 10 {
			q := url.Values{"limit": {fmt.Sprint(tt.limit)}}
			if tt.selector != "" {
				q.Set("labelSelector", tt.selector)
			}
			if cont != "" {
				q.Set("continue", cont)
			}
			code, _, body := ts.do(t, "GET", "/api/v1/sandboxes?"+q.Encode(), "", "")
			var page struct {
				Metadata ListMeta      `json:"metadata"`
				Items    []api.Sandbox `json:"items"`
			}
			if code != 200 || json.Unmarshal(body, &page) != nil {
				t.Fatalf("page: %d %s", code, body)
			}
			got = append(got, len(page.Items))
			for _, it := range page.Items {
				names = append(names, it.Metadata.Name)
			}
			if cont = page.Metadata.Continue; cont == "" {
				break
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.pages) {
			t.Errorf("selector %q limit %d: pages %v, want %v", tt.selector, tt.limit, got, tt.pages)
		}
		for i := 1; i < len(names); i++ {
			if names[i] <= names[i-1] {
				t.Errorf("selector %q limit %d: %s after %s", tt.selector, tt.limit, names[i], names[i-1])
			}
		}
	}
	if code, _, body := ts.do(t, "GET", "/api/v1/sandboxes?limit=5&continue="+url.QueryEscape(strings.Repeat("A", 20)), "", ""); code != 400 || !strings.Contains(string(body), `"field":"continue"`) {
		t.Fatalf("bad continue: %d %s", code, body)
	}
}
