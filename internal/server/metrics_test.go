package server

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/display"
	"github.com/hvkube/hvkube/internal/metrics"
	"github.com/hvkube/hvkube/internal/store"
)

// TestMetrics scrapes /metrics as Prometheus does: behind the token, in
// the text format, with the objects' gauges read from the store and the
// histograms fed by the handlers and hooks; and lints the result.
func TestMetrics(t *testing.T) {
	fl := &fileLogs{dir: t.TempDir()}
	var mx *metrics.Metrics
	ts := startWith(t, Options{Token: "s3cret", Sandboxes: fl, Actions: display.NewActions(fl)}, func(o *Options) {
		mx = metrics.New(o.Store)
		o.Metrics = mx
	})
	ctx := context.Background()
	for _, y := range []string{
		`{"apiVersion":"hvkube/v1","kind":"Sandbox","metadata":{"name":"a"},"spec":{}}`,
		`{"apiVersion":"hvkube/v1","kind":"Sandbox","metadata":{"name":"b"},"spec":{}}`,
		`{"apiVersion":"hvkube/v1","kind":"SandboxPool","metadata":{"name":"web"},"spec":{"replicas":3,"template":{"spec":{}}}}`,
		`{"name":"solo","sandboxName":"a","type":"mcp-agent"}`,
	} {
		o, err := api.DecodeOne([]byte(y), api.DecodeOptions{AgentShortForm: true})
		if err != nil {
			t.Fatal(err)
		}
		api.Default(o)
		if _, err := ts.st.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	sb, _ := ts.st.Get(ctx, api.KindSandbox, "a")
	sb.(*api.Sandbox).Status.Phase = api.SandboxRunning
	ts.st.UpdateStatus(ctx, sb)
	p, _ := ts.st.Get(ctx, api.KindSandboxPool, "web")
	p.(*api.SandboxPool).Status.Ready, p.(*api.SandboxPool).Status.Desired = 2, 3
	ts.st.UpdateStatus(ctx, p)
	mx.ObserveAcquire("resume", 30*time.Millisecond)
	shot, _ := http.NewRequest("GET", ts.URL+"/api/v1/sandboxes/a/screen?format=jpeg", nil)
	shot.Header.Set("Authorization", "Bearer s3cret")
	if resp, err := http.DefaultClient.Do(shot); err != nil || resp.StatusCode != 200 {
		t.Fatalf("screen: %v %v", resp, err)
	}
	mx.ObserveReconcile("pool", nil)
	mx.ObserveReconcile("pool", errors.New("boom"))

	if code, _, _ := ts.do(t, "GET", "/metrics", "", ""); code != http.StatusUnauthorized {
		t.Fatalf("/metrics without the token: %d", code)
	}
	req, _ := http.NewRequest("GET", ts.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	value := func(name string, labels ...string) float64 {
		t.Helper()
		f := fams[name]
		if f == nil {
			t.Fatalf("no metric %s", name)
		}
	next:
		for _, m := range f.Metric {
			for i := 0; i+1 < len(labels); i += 2 {
				if label(m, labels[i]) != labels[i+1] {
					continue next
				}
			}
			switch {
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
		t.Fatalf("no %s%v", name, labels)
		return 0
	}
	for _, tt := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"hvkube_sandboxes", []string{"phase", "Running"}, 1},
		{"hvkube_sandboxes", []string{"phase", "Pending"}, 1},
		{"hvkube_sandboxes", []string{"phase", "Error"}, 0},
		{"hvkube_agents", []string{"phase", "Pending"}, 1},
		{"hvkube_agents", []string{"phase", "Running"}, 0},
		{"hvkube_pool_ready", []string{"pool", "web"}, 2},
		{"hvkube_pool_desired", []string{"pool", "web"}, 3},
		{"hvkube_acquire_duration_seconds", []string{"how", "resume"}, 1},
		{"hvkube_screenshot_duration_seconds", []string{"format", "jpeg"}, 1},
		{"hvkube_input_duration_seconds", nil, 0},
		{"hvkube_reconcile_total", []string{"controller", "pool"}, 2},
		{"hvkube_reconcile_errors_total", []string{"controller", "pool"}, 1},
	} {
		if got := value(tt.name, tt.labels...); got != tt.want {
			t.Errorf("%s%v = %g, want %g", tt.name, tt.labels, got, tt.want)
		}
	}
	problems, err := testutil.GatherAndLint(mx.Gatherer())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "hvkube_") {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// startWith is start with a last change to the options once the store is
// open.
func startWith(t *testing.T, opts Options, change func(*Options)) *testServer {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts.Store = st
	change(&opts)
	srv := httptest.NewServer(New(opts).Handler())
	t.Cleanup(func() {
		srv.Close()
		st.Close()
	})
	return &testServer{Server: srv, st: st}
}
