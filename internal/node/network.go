package node

import (
	"fmt"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
)

// A sandbox's network, as the node reports it: status.network says what
// the backend runs (mode, the guest's address) and what its egress policy
// refused (how many, the latest). The node writes it when the sandbox
// starts and when an observation finds it changed. A growing count is
// also an EgressDenied warning event with the count and the latest
// refusal: one per observation interval at most, however often the guest
// is refused (every status write is itself observed again at once).
//
// A sandbox that asked for a network and has none, because its template's
// snapshot has no network device, says so in its Network condition
// (reason NoNetworkDevice: rebuild the template) and an event.

// Reasons of the network's events and condition.
const (
	reasonEgressDenied    = "EgressDenied"
	reasonNoNetworkDevice = "NoNetworkDevice"
	// conditionNetwork is the condition type of a sandbox without the
	// network it asked for.
	conditionNetwork = "Network"
)

// networkUpdate is what an observation changes of a sandbox's network.
type networkUpdate struct {
	// status is status.network to write; nil leaves it as it is.
	status *api.SandboxNetworkStatus
	// missing is the Network condition's message when the sandbox has no
	// network it asked for; empty otherwise.
	missing string
	// denied is the EgressDenied event's message, empty for none.
	denied string
	// retry is when to look again for a grown count held back.
	retry time.Duration
}

// networkOf computes what an observation of sb, whose backend reports
// info, changes of its network. It records when an EgressDenied event is
// due; the caller records the event.
func (n *Node) networkOf(sb *api.Sandbox, info backend.Info) networkUpdate {
	rep := info.Network
	if rep == nil {
		return networkUpdate{}
	}
	u := networkUpdate{missing: rep.Unavailable}
	want := &api.SandboxNetworkStatus{Mode: rep.Mode, Address: rep.Address, DeniedConnections: rep.Denied, LastDenied: rep.LastDenied}
	prev := sb.Status.Network
	if prev == nil {
		prev = &api.SandboxNetworkStatus{}
	}
	switch {
	case want.DeniedConnections < prev.DeniedConnections:
		// The backend lost count (it ended without recording it): the
		// status does not go back.
		want.DeniedConnections, want.LastDenied = prev.DeniedConnections, prev.LastDenied
	case want.DeniedConnections > prev.DeniedConnections:
		now, every := n.now(), interval(sb)
		if last := n.egress.last(sb.Metadata.Name); !last.IsZero() && now.Sub(last) < every {
			want.DeniedConnections, want.LastDenied = prev.DeniedConnections, prev.LastDenied
			u.retry = every - now.Sub(last)
			break
		}
		n.egress.mark(sb.Metadata.Name, now, every)
		u.denied = deniedMessage(want.DeniedConnections, want.DeniedConnections-prev.DeniedConnections, want.LastDenied)
	}
	u.status = want
	return u
}

// apply writes u into a sandbox's status (inside updateStatus).
func (u networkUpdate) apply(s *api.SandboxStatus, generation int64, now time.Time) {
	if u.status != nil {
		s.Network = u.status
	}
	if u.missing != "" {
		api.SetCondition(&s.Conditions, api.Condition{Type: conditionNetwork, Status: api.ConditionFalse, Reason: reasonNoNetworkDevice,
			Message: u.missing, ObservedGeneration: generation}, now)
	}
}

// newlyMissing reports whether u says a network is missing that sb's
// status does not say yet (an event is due).
func (u networkUpdate) newlyMissing(sb *api.Sandbox) bool {
	if u.missing == "" {
		return false
	}
	c := api.FindCondition(sb.Status.Conditions, conditionNetwork)
	return c == nil || c.Reason != reasonNoNetworkDevice
}

// deniedMessage is the EgressDenied event's message.
func deniedMessage(total, more int64, last *api.NetworkDenial) string {
	msg := fmt.Sprintf("the egress policy refused %d more connection(s), %d in all", more, total)
	if last == nil {
		return msg
	}
	msg += fmt.Sprintf("; the latest to %s", last.Destination)
	if last.Name != "" && last.Name+" (DNS)" != last.Destination {
		msg += " (" + last.Name + ")"
	}
	msg += ": " + last.Reason
	if last.Rule != "" {
		msg += " " + last.Rule
	}
	return msg
}

// egressReports remembers, per sandbox of one node, when the last
// EgressDenied event was recorded and for how long it holds the next one
// back. It is the process's: a node that restarts may report once more.
type egressReports struct {
	mu sync.Mutex // guards at
	at map[string]egressReport
}

type egressReport struct {
	at, until time.Time
}

// maxEgressReports bounds the memory. Past it, the entries that hold
// nothing back any more go first, then the oldest.
const maxEgressReports = 4096

func (r *egressReports) last(sandbox string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.at[sandbox].at
}

// mark records an event for sandbox at now, holding the next one back
// for every.
func (r *egressReports) mark(sandbox string, now time.Time, every time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at == nil {
		r.at = map[string]egressReport{}
	}
	if _, ok := r.at[sandbox]; !ok && len(r.at) >= maxEgressReports {
		oldest := ""
		for k, e := range r.at {
			if !now.Before(e.until) {
				delete(r.at, k)
			} else if oldest == "" || e.at.Before(r.at[oldest].at) {
				oldest = k
			}
		}
		if len(r.at) >= maxEgressReports {
			delete(r.at, oldest)
		}
	}
	r.at[sandbox] = egressReport{at: now, until: now.Add(every)}
}

// forget drops the entry of a sandbox deleted or gone from this node.
func (r *egressReports) forget(sandbox string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.at, sandbox)
}

// size is how many sandboxes r remembers.
func (r *egressReports) size() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.at)
}
