// Package testbench is what Go benchmarks of real desktops use to report
// their latencies as docs/benchmarks.md records them: p50 and p95.
package testbench

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// Percentiles reports the p50 and p95 (nearest rank) of ds, in
// milliseconds, as the metrics p50-WHAT-ms and p95-WHAT-ms.
func Percentiles(b *testing.B, what string, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	for _, p := range []int{50, 95} {
		rank := max((p*len(s)+99)/100-1, 0)
		b.ReportMetric(float64(s[rank].Microseconds())/1000, fmt.Sprintf("p%d-%s-ms", p, what))
	}
}
