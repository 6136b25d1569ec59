package node

import (
	"fmt"
	"github.com/hvkube/hvkube/internal/api"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/testbench"
)

// BenchmarkAttemptLog times what every attempt pays on the node's disk
// before it runs: its log's first line in the journal (logjournal.go) and
// the close, for an agent seen for the first time. It reports the p50 and
// p95.
func BenchmarkAttemptLog(b *testing.B) {
	n := &Node{opt: Options{DataDir: b.TempDir()}}
	n.journal.dir = n.agentsDir()
	var all []time.Duration
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		lg := n.newRunLog(&api.Agent{Metadata: api.ObjectMeta{Name: fmt.Sprintf("agent-%d", i), UID: "u"}}, 1)
		lg.printf("attempt 1 of agent agent-%d", i)
		if err := lg.Close(); err != nil {
			b.Fatal(err)
		}
		all = append(all, time.Since(t0))
		if _, ok := n.journal.open(journalKey(fmt.Sprintf("agent-%d", i), "u"), 1); !ok {
			b.Fatal("no log was written")
		}
	}
	testbench.Percentiles(b, "attempt", all)
}
