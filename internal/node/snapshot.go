package node

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
)

// ReasonCaptured is the reason of a template captured from a sandbox.
const ReasonCaptured = "Captured"

// Capture makes the snapshot of a new template named template from
// sandbox as it is now (its memory and disk): the snapshot of the
// template's first generation, which its reconciler finds (capturedTemplate)
// once the Template object exists. The caller creates that object, with
// spec.source naming the sandbox and this node (the API server does, for
// the user who asked: a node creates no templates). The sandbox stops
// for the copy, then runs (or stays paused) as it was.
func (n *Node) Capture(ctx context.Context, sandbox, template string) (backend.TemplateInfo, error) {
	if s, ok := n.sessions.get(sandbox); ok {
		who := "its own spec.env"
		if s.agent != "" {
			who = "agent " + s.agent + "'s spec.env"
		}
		return backend.TemplateInfo{}, fmt.Errorf("sandbox %s holds session variables (%s): a template of it would keep them; take the snapshot once it is released: %w", sandbox, who, api.ErrConflict)
	}
	c, ok := n.be.(backend.Capturer)
	if !ok {
		return backend.TemplateInfo{}, fmt.Errorf("snapshots of sandboxes: the %s backend %w: %w", n.be.Name(), errNoAbility, api.ErrUnsupported)
	}
	if err := api.ValidateName("template", template); err != nil {
		return backend.TemplateInfo{}, err
	}
	unlock := n.locks.lock(sandbox)
	defer unlock()
	if err := n.releaseBefore(ctx, sandbox, "take a snapshot of"); err != nil {
		return backend.TemplateInfo{}, err
	}
	sb, err := n.sandboxFor(ctx, sandbox)
	if err != nil {
		return backend.TemplateInfo{}, err
	}
	if err := needPhase(sb, "take a snapshot of", api.SandboxRunning, api.SandboxPaused); err != nil {
		return backend.TemplateInfo{}, err
	}
	t := &api.Template{Metadata: api.ObjectMeta{Name: template, Generation: 1}}
	id := snapshotID(t)
	n.captures.add(id, n.now())
	start := n.now()
	info, err := c.CaptureTemplate(ctx, sandbox, id, func(step string) {
		n.log.Info("snapshot", "sandbox", sandbox, "template", template, "step", step)
	})
	if err != nil {
		return backend.TemplateInfo{}, err
	}
	n.captures.add(id, n.now())
	n.event(ctx, sb, api.EventNormal, "SnapshotTaken", fmt.Sprintf("captured for template %s in %s; the sandbox stood stopped %s", template, n.now().Sub(start).Round(time.Millisecond), info.Stopped.Round(time.Millisecond)))
	return info, nil
}

// captureGrace is how long a captured snapshot is kept without its
// Template object: the time its caller takes to create it.
const captureGrace = 2 * time.Minute

// captureBook is when each recent capture was made, so that the sweep of
// snapshots without a template leaves it until its Template exists.
type captureBook struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (b *captureBook) add(id string, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.at == nil {
		b.at = map[string]time.Time{}
	}
	b.at[id] = now
}

// recent reports whether id was captured within captureGrace of now.
func (b *captureBook) recent(id string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, at := range b.at {
		if now.Sub(at) >= captureGrace {
			delete(b.at, k)
		}
	}
	_, ok := b.at[id]
	return ok
}
