package main

import (
	"bytes"
	"context"
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
