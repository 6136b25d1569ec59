package display

import (
	"fmt"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

// TakeControl gives c the input of sb (status.control), as a person's
// take-over: refused while someone else holds it unless force, and for a
// sandbox being deleted. It returns the take-over it replaced, if any.
// It changes sb only; the caller writes it.
func TakeControl(sb *api.Sandbox, c api.SandboxControl, force bool) (taken *api.SandboxControl, err error) {
	name := sb.Metadata.Name
	switch held := sb.Status.Control; {
	case sb.Metadata.DeletionTimestamp != nil:
		return nil, fmt.Errorf("sandbox %s is being deleted: %w", name, api.ErrConflict)
	case held != nil && !force:
		return nil, fmt.Errorf("%s holds sandbox %s's input since %s (take-over %s); pass force to take it: %w",
			held.Holder, name, held.Since.Format(time.RFC3339), held.ID, api.ErrConflict)
	}
	taken, sb.Status.Control = sb.Status.Control, &c
	return taken, nil
}

// ReleaseControl ends sb's take-over id (any, with force). It returns the
// take-over it ended, nil when none was held (releasing is then done). It
// changes sb only; the caller writes it.
func ReleaseControl(sb *api.Sandbox, id string, force bool) (released *api.SandboxControl, err error) {
	c := sb.Status.Control
	switch {
	case c == nil:
		return nil, nil
	case id != "" && c.ID != id && !force:
		return nil, fmt.Errorf("take-over %s is not sandbox %s's (%s holds it as %s): %w", id, sb.Metadata.Name, c.Holder, c.ID, api.ErrConflict)
	}
	sb.Status.Control = nil
	return c, nil
}
