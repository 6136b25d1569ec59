package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hvkube/hvkube/internal/bench"
)

// TestBenchQEMUCompareLoadvm: --compare-loadvm reaches the benchmark's
// options, is off by default, and its help says what it costs.
func TestBenchQEMUCompareLoadvm(t *testing.T) {
	var got []bench.QEMUOptions
	saved := runQEMUBench
	runQEMUBench = func(ctx context.Context, o bench.QEMUOptions) (*bench.Report, error) {
		got = append(got, o)
		return &bench.Report{Title: "stub"}, nil
	}
	defer func() { runQEMUBench = saved }()
	for _, args := range [][]string{{"--compare-loadvm", "--runs", "3"}, {"--runs", "3"}} {
		cmd := newBenchQEMUCmd()
		cmd.SetArgs(args)
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		if err := cmd.ExecuteContext(context.Background()); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
	if len(got) != 2 || !got[0].CompareLoadvm || got[0].Runs != 3 || got[1].CompareLoadvm {
		t.Fatalf("options %+v: want CompareLoadvm only with --compare-loadvm", got)
	}
	var help bytes.Buffer
	cmd := newBenchQEMUCmd()
	cmd.SetArgs([]string{"--help"})
	cmd.SetOut(&help)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--compare-loadvm", "loadvm in place", "one more cold boot"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, help.String())
		}
	}
}

// TestBenchClaimsFlags: bench claims passes its sizes on, defaults to the
// Kubernetes store (with the section of its own), and refuses sizes
// below one.
func TestBenchClaimsFlags(t *testing.T) {
	var got []bench.ClaimsOptions
	saved := runClaimsBench
	runClaimsBench = func(ctx context.Context, o bench.ClaimsOptions) (*bench.Report, error) {
		got = append(got, o)
		return &bench.Report{Title: "stub"}, nil
	}
	defer func() { runClaimsBench = saved }()
	run := func(args ...string) error {
		cmd := newBenchClaimsCmd()
		cmd.SetArgs(args)
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		return cmd.ExecuteContext(context.Background())
	}
	if err := run("--nodes", "3", "--per-node", "7", "--claims", "40", "--parallel", "5", "--kube-assets", "/nonexistent"); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("ran %d times, want 1", len(got))
	}
	o := got[0]
	if o.Nodes != 3 || o.PerNode != 7 || o.Claims != 40 || o.Parallel != 5 || o.StoreName != "kubernetes" || o.Store == nil || o.Cleanup {
		t.Errorf("options %+v", o)
	}
	if want := "hvkube bench claims --store kubernetes --nodes 3 --per-node 7 --claims 40 --parallel 5"; o.Command != want {
		t.Errorf("command %q, want %q", o.Command, want)
	}
	if err := run("--nodes", "0"); err == nil {
		t.Error("--nodes 0 accepted")
	}
}

func TestRequestCounterKinds(t *testing.T) {
	tests := []struct{ method, url, want string }{
		{"GET", "/apis/hvkube.io/v1/namespaces/ns/sandboxes/sb-1", "GET"},
		{"GET", "/apis/hvkube.io/v1/namespaces/ns/sandboxes", "LIST"},
		{"GET", "/apis/hvkube.io/v1/namespaces/ns/sandboxes?watch=true&resourceVersion=5", "WATCH"},
		{"PUT", "/apis/hvkube.io/v1/namespaces/ns/sandboxes/sb-1/status", "PUT"},
		{"POST", "/apis/hvkube.io/v1/namespaces/ns/agents", "POST"},
		{"POST", "/api/v1/namespaces/ns/events", "event POST"},
		{"PATCH", "/api/v1/namespaces/ns/events/sb-1.18a2", "event PATCH"},
	}
	c := &requestCounter{}
	rt := c.wrap(roundTripperFunc(func(*http.Request) (*http.Response, error) { return &http.Response{StatusCode: 200}, nil }))
	for _, tt := range tests {
		req := httptest.NewRequest(tt.method, "http://api"+tt.url, nil)
		before := c.counts()[tt.want]
		if _, err := rt.RoundTrip(req); err != nil {
			t.Fatal(err)
		}
		if got := c.counts()[tt.want]; got != before+1 {
			t.Errorf("%s %s: %s counted %d times, want %d", tt.method, tt.url, tt.want, got, before+1)
		}
	}
}
