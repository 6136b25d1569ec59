package backend

import (
	"context"
	"testing"
	"time"
)

func TestPhases(t *testing.T) {
	// Without Phases in the context, marking records nothing and is safe.
	StartSteps(context.Background()).Mark("nothing")

	var p Phases
	s := StartSteps(WithPhases(context.Background(), &p))
	time.Sleep(2 * time.Millisecond)
	s.Mark("first")
	s.Skip()
	s.Mark("second")
	got := p.Steps()
	if len(got) != 2 || got[0].Name != "first" || got[1].Name != "second" {
		t.Fatalf("steps: %+v", got)
	}
	if got[0].Took < 2*time.Millisecond || got[1].Took > got[0].Took {
		t.Fatalf("each step is timed from the end of the one before: %+v", got)
	}
	if again := p.Steps(); len(again) != 0 {
		t.Fatalf("Steps forgets what it returned: %+v", again)
	}
}
