package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
)

// TestNodesReadOnly: a node's object is served (list, get) as the node
// wrote it, and nobody writes one through the API: a create or an apply
// is a 400 naming the field, and changes nothing.
func TestNodesReadOnly(t *testing.T) {
	ts := start(t, Options{})
	n := &api.Node{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindNode}, Metadata: api.ObjectMeta{Name: "host-1"}}
	o, err := ts.st.Create(context.Background(), n)
	if err != nil {
		t.Fatal(err)
	}
	n = o.(*api.Node)
	n.Status.Memory = api.NodeMemory{TotalMB: 24000, UsedMB: 1000, FreeMB: 18000}
	if _, err := ts.st.UpdateStatus(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	code, _, body := ts.do(t, "GET", "/api/v1/nodes/host-1", "", "")
	var got api.Node
	if code != http.StatusOK || json.Unmarshal(body, &got) != nil || got.Status.Memory.FreeMB != 18000 {
		t.Fatalf("get node: %d %s", code, body)
	}
	if code, _, body := ts.do(t, "GET", "/api/v1/nodes", "", ""); code != http.StatusOK || !strings.Contains(string(body), `"host-1"`) {
		t.Fatalf("list nodes: %d %s", code, body)
	}
	before := snapshot(t, ts)
	forged := `{"apiVersion":"hvkube/v1","kind":"Node","metadata":{"name":"host-1"},"status":{"memory":{"freeMB":999999}}}`
	for _, req := range []struct{ method, path string }{{"POST", "/api/v1/nodes"}, {"PUT", "/api/v1/nodes/host-1"}} {
		code, _, body := ts.do(t, req.method, req.path, "application/json", forged)
		if code != http.StatusBadRequest || !strings.Contains(string(body), "read-only") {
			t.Errorf("%s %s: %d %s, want 400 saying nodes are read-only", req.method, req.path, code, body)
		}
	}
	if after := snapshot(t, ts); after != before {
		t.Errorf("a refused write changed the store")
	}
}
