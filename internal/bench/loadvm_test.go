package bench

import (
	"strings"
	"testing"
	"time"
)

func TestRatioFact(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	reset := Result{Name: "reset to clean (re-clone)", Samples: ms(400, 300, 500)}
	answer := Result{Name: loadvmAnswerName, Samples: ms(350, 250, 300, 900)}
	got := ratioFact(reset, answer)
	for _, want := range []string{"reset p50 400.0 ms", "1.33x", "answer p50 300.0 ms", "target ≤ 0.50x", "p95 500.0 ms vs 900.0 ms"} {
		if !strings.Contains(got, want) {
			t.Errorf("ratioFact = %q; want it to contain %q", got, want)
		}
	}
	if got := ratioFact(Result{}, answer); got != "" {
		t.Errorf("no reset samples: %q, want empty", got)
	}
	if got := ratioFact(reset, Result{}); got != "" {
		t.Errorf("no loadvm samples: %q, want empty", got)
	}
}
