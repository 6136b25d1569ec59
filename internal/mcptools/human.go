package mcptools

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

// HumanAPI is the human-in-the-loop API of the REST server:
// POST /agents/NAME/hitl and GET /agents/NAME/hitl?wait=.
type HumanAPI interface {
	// Ask raises question for agent; api.ErrConflict while another is pending.
	Ask(ctx context.Context, agent, question string) (*api.HumanRequest, error)
	// Latest returns agent's latest request, waiting up to wait for its answer.
	Latest(ctx context.Context, agent string, wait time.Duration) (*api.HumanRequest, error)
}

// AskOver asks a person through h and waits up to wait for the answer.
// Asking again the question that is still pending waits for it rather than
// asking twice; another question pending is a conflict.
func AskOver(ctx context.Context, h HumanAPI, agent, question string, wait time.Duration) (string, error) {
	hr, err := h.Ask(ctx, agent, question)
	if errors.Is(err, api.ErrConflict) {
		cur, gerr := h.Latest(ctx, agent, 0)
		if gerr != nil || !cur.Pending() || cur.Question != question {
			return "", err
		}
		hr, err = cur, nil
	}
	if err != nil {
		return "", err
	}
	deadline := time.Now().Add(wait)
	for hr.Pending() {
		left := time.Until(deadline)
		if left <= 0 {
			return "", ErrNoAnswer
		}
		// The API waits whole seconds.
		left = (left + time.Second - 1).Truncate(time.Second)
		id := hr.ID
		if hr, err = h.Latest(ctx, agent, left); err != nil {
			return "", err
		}
		if hr.ID != id {
			return "", fmt.Errorf("the question was replaced by another (%q) before it was answered: %w", hr.Question, api.ErrConflict)
		}
	}
	return hr.Answer, nil
}
