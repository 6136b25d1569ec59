package node

import (
	"fmt"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/drivers/fake"
	"github.com/hvkube/hvkube/internal/reconcile"
)

// TestLoneNodeNeverFences: a node whose FenceAfter is negative (the one
// node inside hvkube serve on SQLite) keeps its attempts when its writes
// fail, while a node of a cluster cut off as long fences itself.
func TestLoneNodeNeverFences(t *testing.T) {
	r := newLostRig(t, -1)
	fenced := r.startNode("n1", fake.DefaultMemoryMB)
	lone := &lostNode{be: fake.New(fake.Options{}), part: &partition{Interface: r.st}, dir: t.TempDir()}
	lone.nd = New(Options{Store: lone.part, Backend: lone.be, Name: "lone", DataDir: lone.dir, Logger: r.log,
		StatusInterval: lostStatusInterval, FenceAfter: -1})
	if err := lone.nd.Start(r.ctx); err != nil {
		t.Fatal(err)
	}
	m := reconcile.NewManager(lone.part, r.log, time.Second)
	lone.nd.Register(m)
	if err := m.Start(r.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lone.part.setCut(false); m.Stop(); lone.nd.Stop() })

	fenced.part.setCut(true)
	lone.part.setCut(true)
	waitFor(t, 30*time.Second, 10*time.Millisecond, "the cluster's node fences itself", func() (bool, string) {
		return fenced.nd.fenced(), fmt.Sprintf("fenced %v", fenced.nd.fenced())
	})
	time.Sleep(lostFenceAfter)
	if lone.nd.fenced() {
		t.Error("the lone node fenced itself")
	}
}
