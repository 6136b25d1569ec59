package node

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/testbench"
)

// BenchmarkAttemptLog times what every attempt pays on the node's disk
// before it runs: its directory and its log file (newRunLog), one line,
// and the close, for an agent seen for the first time. It reports the
// p50 and p95 of the whole and of each part.
func BenchmarkAttemptLog(b *testing.B) {
	root := b.TempDir()
	var dirs, creates, all []time.Duration
	for i := 0; b.Loop(); i++ {
		dir := filepath.Join(root, "agents", fmt.Sprintf("agent-%d", i), "1")
		t0 := time.Now()
		if err := os.MkdirAll(dir, 0o700); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		lg := newRunLog(dir) // finds the directory made, creates the file
		t2 := time.Now()
		lg.printf("attempt 1 of agent agent-%d", i)
		if err := lg.Close(); err != nil {
			b.Fatal(err)
		}
		dirs, creates, all = append(dirs, t1.Sub(t0)), append(creates, t2.Sub(t1)), append(all, time.Since(t0))
		if lg.f == nil {
			b.Fatal("no log file was created")
		}
	}
	testbench.Percentiles(b, "dir", dirs)
	testbench.Percentiles(b, "logfile", creates)
	testbench.Percentiles(b, "attempt", all)
}
