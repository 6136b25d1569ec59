package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/metrics"
	"github.com/hvkube/hvkube/internal/store"
)

// The end-to-end scrape through the server (token, text format, a gauge
// or two of each kind) is internal/server's TestMetrics; these tests look
// at every gauge's arithmetic, the histograms' buckets, and what a scrape
// does when the store fails.

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// put stores o, then its status as set on o.
func put(t *testing.T, st *store.Store, o api.Object) {
	t.Helper()
	ctx := context.Background()
	api.Default(o)
	created, err := st.Create(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	o.GetMeta().ResourceVersion = created.GetMeta().ResourceVersion
	if _, err := st.UpdateStatus(ctx, o); err != nil {
		t.Fatal(err)
	}
}

func sandbox(name, phase string, control *api.SandboxControl) *api.Sandbox {
	sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
	sb.Metadata.Name = name
	sb.Status.Phase, sb.Status.Control = phase, control
	return sb
}

func agent(name, phase string, hr *api.HumanRequest) *api.Agent {
	a := &api.Agent{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindAgent}}
	a.Metadata.Name = name
	a.Spec.SandboxSelector = &api.SandboxSelector{Pool: "web"}
	a.Spec.Task.Steps = []api.Action{{Action: "wait", Duration: 1}}
	a.Status.Phase, a.Status.HumanRequest = phase, hr
	return a
}

func pool(name string, ready, desired, replicas int) *api.SandboxPool {
	p := &api.SandboxPool{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandboxPool}}
	p.Metadata.Name = name
	p.Status.Ready, p.Status.Desired, p.Status.Replicas = ready, desired, replicas
	return p
}

// families gathers m by name.
func families(t *testing.T, m *metrics.Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	return byName(fams)
}

func byName(fams []*dto.MetricFamily) map[string]*dto.MetricFamily {
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// series returns the series of family name whose labels are labels (a
// label name, then its value; none for an unlabelled family), or nil.
func series(fams map[string]*dto.MetricFamily, name string, labels ...string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.Metric {
		if len(m.Label) != len(labels)/2 {
			continue
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if labelOf(m, labels[i]) != labels[i+1] {
				continue next
			}
		}
		return m
	}
	return nil
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// gauge returns a gauge's value, failing the test when it is missing.
func gauge(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	m := series(fams, name, labels...)
	if m == nil || m.Gauge == nil {
		t.Fatalf("no gauge %s%v", name, labels)
	}
	return m.Gauge.GetValue()
}

// TestObjectGauges fills a real store with objects in every state the
// gauges count and checks each gauge, then changes the store and scrapes
// again: the gauges are read at each scrape, never cached.
func TestObjectGauges(t *testing.T) {
	st := openStore(t)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	held := &api.SandboxControl{ID: "c1", Holder: "ops", Since: now}
	for _, sb := range []*api.Sandbox{
		sandbox("run-1", api.SandboxRunning, nil),
		sandbox("run-2", api.SandboxRunning, held),
		sandbox("paused", api.SandboxPaused, nil),
		sandbox("saved", api.SandboxSaved, held),
		sandbox("new", "", nil), // no phase yet: Pending
		sandbox("odd", "Hibernating", nil),
	} {
		put(t, st, sb)
	}
	answered := &api.HumanRequest{ID: "q0", Question: "ok?", AskedAt: now, Answer: "yes", AnsweredAt: &now}
	for _, a := range []*api.Agent{
		agent("asking", api.AgentRunning, &api.HumanRequest{ID: "q1", Question: "which seat?", AskedAt: now}),
		agent("answered", api.AgentRunning, answered),
		agent("done", api.AgentCompleted, nil),
		agent("waiting", "", nil),
		agent("failed", api.AgentFailed, nil),
	} {
		put(t, st, a)
	}
	put(t, st, pool("web", 2, 3, 4))
	put(t, st, pool("db", 0, 0, 0))

	m := metrics.New(st)
	fams := families(t, m)
	tests := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"hvkube_sandboxes", []string{"phase", api.SandboxRunning}, 2},
		{"hvkube_sandboxes", []string{"phase", api.SandboxPaused}, 1},
		{"hvkube_sandboxes", []string{"phase", api.SandboxSaved}, 1},
		{"hvkube_sandboxes", []string{"phase", api.SandboxPending}, 1},
		{"hvkube_sandboxes", []string{"phase", "Hibernating"}, 1},
		{"hvkube_sandboxes_controlled", nil, 2},
		{"hvkube_agents", []string{"phase", api.AgentRunning}, 2},
		{"hvkube_agents", []string{"phase", api.AgentCompleted}, 1},
		{"hvkube_agents", []string{"phase", api.AgentPending}, 1},
		{"hvkube_agents", []string{"phase", api.AgentFailed}, 1},
		{"hvkube_human_requests_pending", nil, 1},
		{"hvkube_pool_ready", []string{"pool", "web"}, 2},
		{"hvkube_pool_desired", []string{"pool", "web"}, 3},
		{"hvkube_pool_replicas", []string{"pool", "web"}, 4},
		{"hvkube_pool_ready", []string{"pool", "db"}, 0},
		{"hvkube_pool_replicas", []string{"pool", "db"}, 0},
	}
	for _, tt := range tests {
		if got := gauge(t, fams, tt.name, tt.labels...); got != tt.want {
			t.Errorf("%s%v = %g, want %g", tt.name, tt.labels, got, tt.want)
		}
	}
	// Every known phase has a series, zero or not, so that series do not
	// come and go; an unknown phase adds one.
	for _, tt := range []struct {
		name   string
		phases []string
	}{
		{"hvkube_sandboxes", []string{api.SandboxPending, api.SandboxCreating, api.SandboxRunning, api.SandboxPaused, api.SandboxSaved, api.SandboxTerminating, api.SandboxTerminated, api.SandboxError, "Hibernating"}},
		{"hvkube_agents", []string{api.AgentPending, api.AgentScheduled, api.AgentRunning, api.AgentCompleted, api.AgentFailed, api.AgentCancelled}},
	} {
		if got, want := len(fams[tt.name].GetMetric()), len(tt.phases); got != want {
			t.Errorf("%s has %d series, want %d", tt.name, got, want)
		}
		total := 0.0
		for _, p := range tt.phases {
			total += gauge(t, fams, tt.name, "phase", p)
		}
		if want := map[string]float64{"hvkube_sandboxes": 6, "hvkube_agents": 5}[tt.name]; total != want {
			t.Errorf("%s sum to %g, want %g (each object once)", tt.name, total, want)
		}
	}

	// A change shows in the next scrape.
	ctx := context.Background()
	o, err := st.Get(ctx, api.KindSandbox, "run-2")
	if err != nil {
		t.Fatal(err)
	}
	sb := o.(*api.Sandbox)
	sb.Status.Phase, sb.Status.Control = api.SandboxError, nil
	if _, err := st.UpdateStatus(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Delete(ctx, api.KindSandboxPool, "db", store.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	fams = families(t, m)
	for _, tt := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"hvkube_sandboxes", []string{"phase", api.SandboxRunning}, 1},
		{"hvkube_sandboxes", []string{"phase", api.SandboxError}, 1},
		{"hvkube_sandboxes_controlled", nil, 1},
	} {
		if got := gauge(t, fams, tt.name, tt.labels...); got != tt.want {
			t.Errorf("after the change, %s%v = %g, want %g", tt.name, tt.labels, got, tt.want)
		}
	}
	if s := series(fams, "hvkube_pool_ready", "pool", "db"); s != nil {
		t.Errorf("the deleted pool db still has hvkube_pool_ready %g", s.Gauge.GetValue())
	}
}

// TestEmptyStore: a store with nothing in it still has a zero series for
// every phase, and no pool series.
func TestEmptyStore(t *testing.T) {
	fams := families(t, metrics.New(openStore(t)))
	for _, tt := range []struct {
		name   string
		labels []string
	}{
		{"hvkube_sandboxes", []string{"phase", api.SandboxRunning}},
		{"hvkube_agents", []string{"phase", api.AgentPending}},
		{"hvkube_sandboxes_controlled", nil},
		{"hvkube_human_requests_pending", nil},
	} {
		if got := gauge(t, fams, tt.name, tt.labels...); got != 0 {
			t.Errorf("%s%v = %g on an empty store", tt.name, tt.labels, got)
		}
	}
	for _, name := range []string{"hvkube_pool_ready", "hvkube_pool_desired", "hvkube_pool_replicas"} {
		if f := fams[name]; f != nil && len(f.Metric) > 0 {
			t.Errorf("%s has %d series with no pools", name, len(f.Metric))
		}
	}
}

// histogram returns a histogram series, failing the test when missing.
func histogram(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) *dto.Histogram {
	t.Helper()
	m := series(fams, name, labels...)
	if m == nil || m.Histogram == nil {
		t.Fatalf("no histogram %s%v", name, labels)
	}
	return m.Histogram
}

// bucket returns the cumulative count of the bucket with upper bound le.
func bucket(t *testing.T, h *dto.Histogram, le float64) uint64 {
	t.Helper()
	for _, b := range h.Bucket {
		if math.Abs(b.GetUpperBound()-le) < 1e-9 {
			return b.GetCumulativeCount()
		}
	}
	t.Fatalf("no bucket le=%g", le)
	return 0
}

// TestHistogramsAndCounters observes durations and reconciles and checks
// counts, sums, the buckets they fall in, and the labels.
func TestHistogramsAndCounters(t *testing.T) {
	m := metrics.New(openStore(t))
	m.ObserveAcquire("resumed", 30*time.Millisecond)
	m.ObserveAcquire("resumed", 3*time.Millisecond)
	m.ObserveAcquire("cloned", 2*time.Second)
	m.ObserveScreenshot("", 15*time.Millisecond) // the default format
	m.ObserveScreenshot("png", 5*time.Millisecond)
	m.ObserveScreenshot("jpeg", 500*time.Microsecond)
	m.ObserveInput(7 * time.Millisecond)
	m.ObserveReconcile("pool", nil)
	m.ObserveReconcile("pool", errors.New("conflict"))
	m.ObserveReconcile("pool", nil)
	m.ObserveReconcile("agent", nil)
	fams := families(t, m)

	tests := []struct {
		name   string
		labels []string
		count  uint64
		sum    float64
		// le is a bucket bound and below how many samples fall at or
		// under it.
		le    float64
		below uint64
	}{
		{"hvkube_acquire_duration_seconds", []string{"how", "resumed"}, 2, 0.033, 0.005, 1},
		{"hvkube_acquire_duration_seconds", []string{"how", "resumed"}, 2, 0.033, 0.04, 2},
		{"hvkube_acquire_duration_seconds", []string{"how", "cloned"}, 1, 2, 1.28, 0},
		{"hvkube_acquire_duration_seconds", []string{"how", "cloned"}, 1, 2, 2.56, 1},
		{"hvkube_screenshot_duration_seconds", []string{"format", "png"}, 2, 0.020, 0.008, 1},
		{"hvkube_screenshot_duration_seconds", []string{"format", "jpeg"}, 1, 0.0005, 0.001, 1},
		{"hvkube_input_duration_seconds", nil, 1, 0.007, 0.004, 0},
		{"hvkube_input_duration_seconds", nil, 1, 0.007, 0.008, 1},
	}
	for _, tt := range tests {
		h := histogram(t, fams, tt.name, tt.labels...)
		if h.GetSampleCount() != tt.count {
			t.Errorf("%s%v count %d, want %d", tt.name, tt.labels, h.GetSampleCount(), tt.count)
		}
		if math.Abs(h.GetSampleSum()-tt.sum) > 1e-9 {
			t.Errorf("%s%v sum %g, want %g", tt.name, tt.labels, h.GetSampleSum(), tt.sum)
		}
		if got := bucket(t, h, tt.le); got != tt.below {
			t.Errorf("%s%v bucket le=%g holds %d, want %d", tt.name, tt.labels, tt.le, got, tt.below)
		}
	}
	if s := series(fams, "hvkube_screenshot_duration_seconds", "format", ""); s != nil {
		t.Error("a screenshot of no format was recorded under format=\"\", want png")
	}

	for _, tt := range []struct {
		name, controller string
		want             float64
	}{
		{"hvkube_reconcile_total", "pool", 3},
		{"hvkube_reconcile_errors_total", "pool", 1},
		{"hvkube_reconcile_total", "agent", 1},
	} {
		s := series(fams, tt.name, "controller", tt.controller)
		if s == nil || s.Counter == nil {
			t.Errorf("no counter %s{controller=%s}", tt.name, tt.controller)
			continue
		}
		if got := s.Counter.GetValue(); got != tt.want {
			t.Errorf("%s{controller=%s} = %g, want %g", tt.name, tt.controller, got, tt.want)
		}
	}
	if s := series(fams, "hvkube_reconcile_errors_total", "controller", "agent"); s != nil && s.Counter.GetValue() != 0 {
		t.Errorf("agent reconciles that all succeeded count %g errors", s.Counter.GetValue())
	}
}

// TestLint: with every family holding series, the registry passes
// Prometheus' lint with no problem at all.
func TestLint(t *testing.T) {
	st := openStore(t)
	now := time.Now().UTC()
	put(t, st, sandbox("a", api.SandboxRunning, &api.SandboxControl{ID: "c", Holder: "ops", Since: now}))
	put(t, st, agent("q", api.AgentRunning, &api.HumanRequest{ID: "q", Question: "?", AskedAt: now}))
	put(t, st, pool("web", 1, 1, 1))
	m := metrics.New(st)
	m.ObserveAcquire("restored", time.Second)
	m.ObserveScreenshot("jpeg", time.Millisecond)
	m.ObserveInput(time.Millisecond)
	m.ObserveReconcile("scheduler", errors.New("x"))
	problems, err := testutil.GatherAndLint(m.Gatherer())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	n, err := testutil.GatherAndCount(m.Gatherer(), "hvkube_sandboxes", "hvkube_pool_ready", "hvkube_reconcile_errors_total")
	if err != nil {
		t.Fatal(err)
	}
	if want := 8 + 1 + 1; n != want {
		t.Errorf("%d series in three families, want %d", n, want)
	}
}

// TestNilMetrics: a nil *Metrics records nothing and does not panic, so
// that callers need not check.
func TestNilMetrics(t *testing.T) {
	var m *metrics.Metrics
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("a nil *Metrics panicked: %v", r)
		}
	}()
	m.ObserveAcquire("resumed", time.Second)
	m.ObserveScreenshot("png", time.Second)
	m.ObserveInput(time.Second)
	m.ObserveReconcile("pool", errors.New("x"))
}

// failingLister is the real store, but List of the kinds in fail returns
// an error; it records how far off the deadline of each List's context
// is (or -1 for none).
type failingLister struct {
	st   *store.Store
	fail map[string]bool

	mu        sync.Mutex // guards deadlines
	deadlines []time.Duration
}

func (f *failingLister) List(ctx context.Context, kind string, sel api.Selector) ([]api.Object, string, error) {
	left := time.Duration(-1)
	if d, ok := ctx.Deadline(); ok {
		left = time.Until(d)
	}
	f.mu.Lock()
	f.deadlines = append(f.deadlines, left)
	f.mu.Unlock()
	if f.fail[kind] {
		return nil, "", fmt.Errorf("list %s: database is locked", kind)
	}
	return f.st.List(ctx, kind, sel)
}

// TestStoreFails: a kind whose list fails is reported as a scrape error,
// and the other families are still served; each list is bounded by
// ScrapeTimeout.
func TestStoreFails(t *testing.T) {
	st := openStore(t)
	put(t, st, sandbox("a", api.SandboxRunning, nil))
	put(t, st, pool("web", 1, 2, 3))
	for _, tt := range []struct {
		name       string
		fail       []string
		missing    []string // families not served
		served     []string // families served
		errorNames string   // a family the error names
	}{
		{"agents", []string{api.KindAgent}, []string{"hvkube_agents", "hvkube_human_requests_pending"},
			[]string{"hvkube_sandboxes", "hvkube_pool_replicas", "hvkube_reconcile_total"}, "hvkube_agents"},
		{"pools", []string{api.KindSandboxPool}, []string{"hvkube_pool_ready", "hvkube_pool_desired", "hvkube_pool_replicas"},
			[]string{"hvkube_sandboxes", "hvkube_agents"}, "hvkube_pool_ready"},
		{"everything", []string{api.KindSandbox, api.KindAgent, api.KindSandboxPool},
			[]string{"hvkube_sandboxes", "hvkube_sandboxes_controlled", "hvkube_agents", "hvkube_pool_ready"},
			[]string{"hvkube_reconcile_total", "go_goroutines"}, "hvkube_sandboxes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fl := &failingLister{st: st, fail: map[string]bool{}}
			for _, k := range tt.fail {
				fl.fail[k] = true
			}
			m := metrics.New(fl)
			m.ObserveReconcile("pool", nil)
			fams, err := m.Gatherer().Gather()
			if err == nil || !strings.Contains(err.Error(), "database is locked") || !strings.Contains(err.Error(), tt.errorNames) {
				t.Errorf("Gather error %v, want the store's error, naming %s", err, tt.errorNames)
			}
			got := byName(fams)
			for _, name := range tt.missing {
				if f := got[name]; f != nil && len(f.Metric) > 0 {
					t.Errorf("%s served although its list failed", name)
				}
			}
			for _, name := range tt.served {
				if got[name] == nil {
					t.Errorf("%s not served when another family's list failed", name)
				}
			}

			// The handler serves what it has, with 200, as Prometheus
			// wants of a partial scrape.
			rec := httptest.NewRecorder()
			m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
			if rec.Code != http.StatusOK {
				t.Errorf("/metrics answered %d, want 200", rec.Code)
			}
			for _, name := range tt.served {
				if !strings.Contains(rec.Body.String(), "\n"+name+" ") && !strings.Contains(rec.Body.String(), "\n"+name+"{") {
					t.Errorf("/metrics lacks %s", name)
				}
			}

			fl.mu.Lock()
			defer fl.mu.Unlock()
			if len(fl.deadlines) == 0 {
				t.Fatal("the store was not listed")
			}
			for _, left := range fl.deadlines {
				if left < 0 || left > metrics.ScrapeTimeout {
					t.Errorf("a list's context ends in %s, want within ScrapeTimeout (%s)", left, metrics.ScrapeTimeout)
				}
			}
		})
	}
}

func TestNodeGauges(t *testing.T) {
	st := openStore(t)
	n := &api.Node{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindNode}}
	n.Metadata.Name = "host-1"
	n.Status = api.NodeStatus{
		Memory:     api.NodeMemory{TotalMB: 24000, AvailableMB: 6000, LimitMB: 19200, UsedMB: 17000, ReservedMB: 200, FreeMB: 2000},
		Sandboxes:  map[string]int{api.SandboxPaused: 290, api.SandboxRunning: 10, api.SandboxSaved: 4},
		Templates:  []api.NodeTemplate{{Name: "desk", Snapshot: "desk-1", GuestMB: 512, CloneMB: 58, Fit: 34}},
		Pressure:   api.NodePressure{Moved: 4},
		Conditions: []api.Condition{{Type: "MemoryPressure", Status: api.ConditionTrue}},
	}
	put(t, st, n)
	fams := families(t, metrics.New(st))
	tests := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"hvkube_node_memory_bytes", []string{"node", "host-1", "kind", "used"}, 17000 << 20},
		{"hvkube_node_memory_bytes", []string{"node", "host-1", "kind", "free"}, 2000 << 20},
		{"hvkube_node_memory_bytes", []string{"node", "host-1", "kind", "total"}, 24000 << 20},
		{"hvkube_node_sandboxes", []string{"node", "host-1", "phase", api.SandboxPaused}, 290},
		{"hvkube_node_sandboxes", []string{"node", "host-1", "phase", api.SandboxPending}, 0},
		{"hvkube_node_template_fit", []string{"node", "host-1", "template", "desk", "snapshot", "desk-1"}, 34},
		{"hvkube_node_template_clone_bytes", []string{"node", "host-1", "template", "desk", "snapshot", "desk-1"}, 58 << 20},
		{"hvkube_node_memory_pressure", []string{"node", "host-1"}, 1},
	}
	if m := series(fams, "hvkube_node_moved_to_disk_total", "node", "host-1"); m == nil || m.Counter.GetValue() != 4 {
		t.Errorf("hvkube_node_moved_to_disk_total = %v, want 4", m)
	}
	for _, tt := range tests {
		if got := gauge(t, fams, tt.name, tt.labels...); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
}

// TestEventDrops: the store's count of events it did not write is read at
// each scrape, as a counter by why.
func TestEventDrops(t *testing.T) {
	m := metrics.New(openStore(t))
	drops := map[string]uint64{"queue-full": 3}
	m.CountEventDrops(func() map[string]uint64 { return maps.Clone(drops) })
	read := func() map[string]float64 {
		out := map[string]float64{}
		if f := families(t, m)["hvkube_events_dropped_total"]; f != nil {
			for _, mt := range f.GetMetric() {
				out[mt.GetLabel()[0].GetValue()] = mt.GetCounter().GetValue()
			}
		}
		return out
	}
	if got := read(); len(got) != 1 || got["queue-full"] != 3 {
		t.Fatalf("hvkube_events_dropped_total: %v, want queue-full 3", got)
	}
	drops["rate-limit"] = 7
	if got := read(); got["queue-full"] != 3 || got["rate-limit"] != 7 {
		t.Fatalf("after more drops: %v, want queue-full 3, rate-limit 7", got)
	}
}
