package node

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
)

// fakeReadier is a fake backend.Readier: every ID in cold is as cloned;
// it records what it is asked to ready, and refuses (no room) after
// room asks when room is not negative.
type fakeReadier struct {
	backend.Backend
	cold  map[string]bool
	asked []string
	room  int
}

func (f *fakeReadier) Unreadied(context.Context) []string {
	var out []string
	for id := range f.cold {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

func (f *fakeReadier) ReadyAhead(_ context.Context, id string) error {
	if f.room >= 0 && len(f.asked) >= f.room {
		return fmt.Errorf("no room: %w", api.ErrUnavailable)
	}
	f.asked = append(f.asked, id)
	delete(f.cold, id)
	return nil
}

// aheadSandbox is a sandbox for the ready-ahead tests: of pool (none when
// empty), in phase, ready idle ago before t0, held by agent.
func aheadSandbox(name, pool, phase string, idle time.Duration, agent string) *api.Sandbox {
	ready := aheadT0.Add(-idle)
	sb := &api.Sandbox{Metadata: api.ObjectMeta{Name: name}, Status: api.SandboxStatus{
		Phase: phase, BackendID: "id-" + name, ReadyAt: &ready, CurrentAgent: agent}}
	if pool != "" {
		sb.Metadata.OwnerReferences = []api.OwnerReference{{Kind: api.KindSandboxPool, Name: pool}}
	}
	return sb
}

var aheadT0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// TestReadyAhead: the node asks the backend to ready the idle desktops of
// a pool next in line for a claim, as many as the pool's busiest moment
// of the window and at least Options.ReadyAhead; sandboxes of no pool
// whenever idle; never one that runs, is held, goes, or is readied.
func TestReadyAhead(t *testing.T) {
	paused := api.SandboxPaused
	deleting := aheadSandbox("gone", "", paused, time.Hour, "")
	deleting.Metadata.DeletionTimestamp = &aheadT0
	for _, tc := range []struct {
		name  string
		ahead int
		room  int
		// rounds of sandboxes, each at a later time
		rounds [][]*api.Sandbox
		at     []time.Duration
		want   []string // asked in the last round
	}{{
		name: "the longest idle of a pool first", ahead: 2, room: -1,
		rounds: [][]*api.Sandbox{{
			aheadSandbox("p-a", "p", paused, time.Minute, ""),
			aheadSandbox("p-b", "p", paused, time.Hour, ""),
			aheadSandbox("p-c", "p", paused, 2*time.Hour, ""),
			aheadSandbox("p-d", "p", paused, 10*time.Second, ""),
		}},
		want: []string{"id-p-c", "id-p-b"},
	}, {
		name: "none, where no pool sandbox is idle and paused", ahead: 4, room: -1,
		rounds: [][]*api.Sandbox{{
			aheadSandbox("p-a", "p", api.SandboxRunning, time.Minute, ""),
			aheadSandbox("p-b", "p", paused, time.Hour, "agent-1"),
			aheadSandbox("p-c", "p", api.SandboxSaved, time.Hour, ""),
		}},
	}, {
		name: "a sandbox of no pool whenever it waits, not one going", ahead: 1, room: -1,
		rounds: [][]*api.Sandbox{{
			aheadSandbox("solo", "", paused, time.Second, ""),
			aheadSandbox("solo-run", "", api.SandboxRunning, time.Second, ""),
			deleting,
		}},
		want: []string{"id-solo"},
	}, {
		name: "the pool's busiest moment of the window counts", ahead: 1, room: -1,
		rounds: [][]*api.Sandbox{
			{
				aheadSandbox("p-a", "p", paused, time.Hour, "x1"),
				aheadSandbox("p-b", "p", paused, time.Hour, "x2"),
				aheadSandbox("p-c", "p", paused, time.Hour, "x3"),
			},
			{
				aheadSandbox("p-d", "p", paused, 4*time.Minute, ""),
				aheadSandbox("p-e", "p", paused, 3*time.Minute, ""),
				aheadSandbox("p-f", "p", paused, 2*time.Minute, ""),
				aheadSandbox("p-g", "p", paused, time.Minute, ""),
			},
		},
		at:   []time.Duration{0, 10 * time.Minute},
		want: []string{"id-p-d", "id-p-e", "id-p-f"},
	}, {
		name: "and is forgotten after it", ahead: 1, room: -1,
		rounds: [][]*api.Sandbox{
			{aheadSandbox("p-a", "p", paused, time.Hour, "x1"), aheadSandbox("p-b", "p", paused, time.Hour, "x2")},
			{aheadSandbox("p-d", "p", paused, 4*time.Minute, ""), aheadSandbox("p-e", "p", paused, 3*time.Minute, "")},
		},
		at:   []time.Duration{0, ReadyAheadWindow + time.Minute},
		want: []string{"id-p-d"},
	}, {
		name: "no room stops the round", ahead: 3, room: 1,
		rounds: [][]*api.Sandbox{{
			aheadSandbox("p-a", "p", paused, 3*time.Hour, ""),
			aheadSandbox("p-b", "p", paused, 2*time.Hour, ""),
			aheadSandbox("p-c", "p", paused, time.Hour, ""),
		}},
		want: []string{"id-p-a"},
	}, {
		name: "a readied desktop is not asked again; the next cold one is not asked past the count", ahead: 1, room: -1,
		rounds: [][]*api.Sandbox{
			{aheadSandbox("p-a", "p", paused, time.Hour, ""), aheadSandbox("p-b", "p", paused, time.Minute, "")},
			{aheadSandbox("p-a", "p", paused, time.Hour, ""), aheadSandbox("p-b", "p", paused, time.Minute, "")},
		},
		at: []time.Duration{0, time.Minute},
	}, {
		name: "negative: nothing", ahead: -1, room: -1,
		rounds: [][]*api.Sandbox{{aheadSandbox("p-a", "p", paused, time.Hour, "")}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			fr := &fakeReadier{cold: map[string]bool{}, room: tc.room}
			for _, round := range tc.rounds {
				for _, sb := range round {
					fr.cold[sb.Status.BackendID] = true
				}
			}
			var now time.Time
			n := &Node{be: fr, opt: Options{ReadyAhead: tc.ahead}, log: slog.New(slog.DiscardHandler), now: func() time.Time { return now }}
			for i, round := range tc.rounds {
				now = aheadT0
				if i < len(tc.at) {
					now = aheadT0.Add(tc.at[i])
				}
				fr.asked = nil
				if got := n.readyAheadRound(context.Background(), round); got != len(fr.asked) {
					t.Errorf("round %d: says it asked for %d, asked %v", i, got, fr.asked)
				}
			}
			if fmt.Sprint(fr.asked) != fmt.Sprint(tc.want) && !(len(fr.asked) == 0 && len(tc.want) == 0) {
				t.Errorf("asked %v, want %v", fr.asked, tc.want)
			}
		})
	}
}
