package node

import (
	"fmt"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/testbench"
)

// BenchmarkAttemptLog times what every attempt pays on the node's disk
// before it runs: its log file (attemptlog.go), one line, and the close,
// for an agent seen for the first time. It reports the p50 and p95.
func BenchmarkAttemptLog(b *testing.B) {
	n := &Node{opt: Options{DataDir: b.TempDir()}}
	var all []time.Duration
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		lg := n.newRunLog(fmt.Sprintf("agent-%d", i), 1)
		lg.printf("attempt 1 of agent agent-%d", i)
		if err := lg.Close(); err != nil {
			b.Fatal(err)
		}
		all = append(all, time.Since(t0))
		if lg.f == nil {
			b.Fatal("no log file was created")
		}
	}
	testbench.Percentiles(b, "attempt", all)
}
