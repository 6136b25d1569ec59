package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

func TestNodeTable(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	beat := now.Add(-3 * time.Second)
	n := &api.Node{Metadata: api.ObjectMeta{Name: "host-1"}, Status: api.NodeStatus{
		Backend:       "qemu",
		Memory:        api.NodeMemory{TotalMB: 24105, AvailableMB: 4800, LimitMB: 19284, UsedMB: 18390, ReservedMB: 120, FreeMB: 40},
		Sandboxes:     map[string]int{api.SandboxPaused: 300, api.SandboxRunning: 2, api.SandboxSaved: 5, api.SandboxPending: 3},
		Templates:     []api.NodeTemplate{{Name: "linux-desktop", Snapshot: "ld-1", Fit: 0}, {Name: "browser-desktop", Snapshot: "bd-1", Fit: 1}},
		Pressure:      api.NodePressure{Moved: 5},
		Conditions:    []api.Condition{{Type: "MemoryPressure", Status: api.ConditionTrue}},
		LastHeartbeat: &beat,
	}}
	var b strings.Builder
	p := newTablePrinter(&b, api.KindNode, true, false, func() time.Time { return now })
	p.print(n)
	p.tw.Flush()
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("table:\n%s", b.String())
	}
	want := []string{"host-1", "MemoryPressure", "18390Mi", "120Mi", "40Mi", "2", "300", "5", "linux-desktop=0,browser-desktop=1", "3s", "qemu", "24105Mi", "4800Mi", "19284Mi", "5", "3", "-"}
	if got := strings.Fields(lines[1]); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("row\n got %v\nwant %v", got, want)
	}

	// A node the cluster marked lost says so, whatever its memory; the
	// address is where the API servers reach its agent.
	n.Status.Conditions = append(n.Status.Conditions, api.Condition{Type: "Ready", Status: api.ConditionFalse, Reason: "NodeLost"})
	n.Status.Address = "10.0.0.7:8090"
	b.Reset()
	p = newTablePrinter(&b, api.KindNode, true, false, func() time.Time { return now })
	p.print(n)
	p.tw.Flush()
	got := strings.Fields(strings.Split(strings.TrimSpace(b.String()), "\n")[1])
	if got[1] != "NodeLost" || got[len(got)-1] != "10.0.0.7:8090" {
		t.Errorf("lost node's row: %v", got)
	}
}
