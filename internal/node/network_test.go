package node

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/clock"
	"github.com/hvkube/hvkube/internal/store"
)

// TestSandboxNetworkStatus: the node gives the backend the sandbox's
// effective network, writes status.network when the sandbox starts, and
// when its egress denials grow writes the count and the latest denial
// with one EgressDenied event, at most once per observation interval
// however often it looks.
func TestSandboxNetworkStatus(t *testing.T) {
	d := newDirectNode(t, clock.NewFake(time.Now()))
	d.create(yamlObj(t, sandboxYAML("box", "  templateRef: desk\n  network: {egress: {allow: [\"127.0.0.1:8080\"]}}\n")))
	d.reconcile("box")
	spec, ok := d.be.Network("box")
	if !ok || spec.Mode != api.NetworkNAT || len(spec.Egress.Allow) != 1 || spec.Egress.Allow[0] != "127.0.0.1:8080" {
		t.Fatalf("the backend got network %+v, want nat allowing 127.0.0.1:8080", spec)
	}
	sb := d.sandbox("box")
	if nw := sb.Status.Network; nw == nil || nw.Mode != api.NetworkNAT || nw.Address != "10.0.2.15" || nw.DeniedConnections != 0 {
		t.Fatalf("status.network after the start: %+v", nw)
	}

	last := api.NetworkDenial{Time: d.clk.Now().UTC(), Destination: "127.0.0.1:9090", Reason: "Blocked", Rule: "127.0.0.0/8 (loopback)"}
	d.be.SetDenied("box", 3, last)
	res := d.reconcile("box")
	sb = d.sandbox("box")
	if nw := sb.Status.Network; nw == nil || nw.DeniedConnections != 3 || nw.LastDenied == nil || nw.LastDenied.Destination != "127.0.0.1:9090" {
		t.Fatalf("status.network after 3 denials: %+v", nw)
	}
	evs := eventMessages(t, d, reasonEgressDenied)
	if len(evs) != 1 || !strings.Contains(evs[0], "3 in all") || !strings.Contains(evs[0], "127.0.0.1:9090") || !strings.Contains(evs[0], "Blocked") {
		t.Fatalf("EgressDenied events %q, want one with the count, the destination and the reason", evs)
	}
	if res.RequeueAfter != interval(sb) {
		t.Errorf("next look after %s, want the interval %s", res.RequeueAfter, interval(sb))
	}

	// More denials, looked at again at once (the status write is itself
	// observed): held back until the interval has passed.
	last.Destination = "192.168.1.1:22"
	d.be.SetDenied("box", 5, last)
	d.clk.Advance(time.Second)
	res = d.reconcile("box")
	if nw := d.sandbox("box").Status.Network; nw.DeniedConnections != 3 {
		t.Errorf("status within the interval: %d denials, want still 3", nw.DeniedConnections)
	}
	if got := len(eventMessages(t, d, reasonEgressDenied)); got != 1 {
		t.Errorf("%d EgressDenied events within the interval, want 1", got)
	}
	if want := interval(sb) - time.Second; res.RequeueAfter != want {
		t.Errorf("next look after %s, want %s (when the interval ends)", res.RequeueAfter, want)
	}
	d.clk.Advance(res.RequeueAfter)
	d.reconcile("box")
	if nw := d.sandbox("box").Status.Network; nw.DeniedConnections != 5 || nw.LastDenied.Destination != "192.168.1.1:22" {
		t.Errorf("status after the interval: %+v, want 5 denials, the latest to 192.168.1.1:22", nw)
	}
	if evs := eventMessages(t, d, reasonEgressDenied); len(evs) != 2 || !strings.Contains(evs[1], "2 more") {
		t.Errorf("EgressDenied events %q, want a second for the 2 more", evs)
	}
	// Nothing new: nothing written, no event.
	d.clk.Advance(interval(sb))
	d.reconcile("box")
	if got := len(eventMessages(t, d, reasonEgressDenied)); got != 2 {
		t.Errorf("%d EgressDenied events without new denials, want 2", got)
	}
}

// TestSandboxWithoutItsNetwork: a sandbox whose template's snapshot has no
// network device says so (condition Network, reason NoNetworkDevice, and
// one event), and a sandbox with mode none is given mode none.
func TestSandboxWithoutItsNetwork(t *testing.T) {
	d := newDirectNode(t, clock.NewFake(time.Now()))
	d.create(yamlObj(t, sandboxYAML("old", "  templateRef: desk\n")))
	d.reconcile("old")
	d.be.SetNetworkUnavailable("old", "template snapshot desk-g1 has no network device: rebuild the template")
	for i := 0; i < 2; i++ {
		d.clk.Advance(time.Minute)
		d.reconcile("old")
	}
	sb := d.sandbox("old")
	c := api.FindCondition(sb.Status.Conditions, conditionNetwork)
	if c == nil || c.Status != api.ConditionFalse || c.Reason != reasonNoNetworkDevice || !strings.Contains(c.Message, "rebuild the template") {
		t.Fatalf("Network condition %+v", c)
	}
	if sb.Status.Network == nil || sb.Status.Network.Mode != api.NetworkNone {
		t.Errorf("status.network %+v, want mode none", sb.Status.Network)
	}
	if evs := eventMessages(t, d, reasonNoNetworkDevice); len(evs) != 1 {
		t.Errorf("NoNetworkDevice events %q, want 1", evs)
	}

	d.create(yamlObj(t, sandboxYAML("quiet", "  templateRef: desk\n  network: {mode: none}\n")))
	d.reconcile("quiet")
	if spec, _ := d.be.Network("quiet"); spec.Mode != api.NetworkNone {
		t.Errorf("the backend got mode %q, want none", spec.Mode)
	}
	if nw := d.sandbox("quiet").Status.Network; nw == nil || nw.Mode != api.NetworkNone || nw.Address != "" {
		t.Errorf("status.network %+v, want mode none without an address", nw)
	}
}

// eventMessages are the messages of the events of reason of the sandboxes
// these tests make.
func eventMessages(t *testing.T, d *directNode, reason string) []string {
	t.Helper()
	var out []string
	for _, name := range []string{"box", "old"} {
		for _, ev := range storeEventList(t, d, name) {
			if ev.Reason == reason {
				out = append(out, ev.Message)
			}
		}
	}
	return out
}

func storeEventList(t *testing.T, d *directNode, name string) []*api.Event {
	t.Helper()
	evs, err := d.st.ListEvents(d.ctx, store.EventFilter{Kind: api.KindSandbox, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// TestEgressReportsAreBounded: a node remembers at most maxEgressReports
// sandboxes' last EgressDenied events however many sandboxes it has seen
// denied; entries that hold nothing back go first, then the oldest, and
// the sandboxes still held back keep their entries.
func TestEgressReportsAreBounded(t *testing.T) {
	var r egressReports
	now := time.Unix(1_700_000_000, 0)
	for i := range maxEgressReports {
		r.mark(fmt.Sprintf("old-%d", i), now, time.Second) // expired by the next round
	}
	r.mark("held", now.Add(time.Minute), time.Hour)
	if got := r.size(); got != 1 {
		t.Fatalf("after the expired entries went: %d remembered, want 1", got)
	}
	later := now.Add(2 * time.Minute)
	for i := range 2 * maxEgressReports {
		r.mark(fmt.Sprintf("new-%d", i), later.Add(time.Duration(i)*time.Millisecond), time.Hour)
		if got := r.size(); got > maxEgressReports {
			t.Fatalf("%d remembered after %d marks, want at most %d", got, i+1, maxEgressReports)
		}
	}
	if !r.last("held").IsZero() {
		t.Fatal("the oldest entry stayed at the limit")
	}
	if last := r.last(fmt.Sprintf("new-%d", 2*maxEgressReports-1)); last.IsZero() {
		t.Fatal("the newest entry went")
	}
	r.forget(fmt.Sprintf("new-%d", 2*maxEgressReports-1))
	if got := r.size(); got != maxEgressReports-1 {
		t.Fatalf("after forget: %d, want %d", got, maxEgressReports-1)
	}
}
