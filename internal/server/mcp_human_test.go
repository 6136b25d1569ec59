package server

import (
	"context"
	"errors"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/store"
)

// TestServerHumanStatus: MCP's ask_human calls the operations of the
// questions API, whose errors keep their category (and field).
func TestServerHumanStatus(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h := serverHuman{New(Options{Store: st})}
	a := &api.Agent{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindAgent}}
	a.Metadata.Name = "waiting"
	a.Spec.Type = "mcp-agent"
	api.Default(a)
	if _, err := st.Create(ctx, a); err != nil {
		t.Fatal(err)
	}

	_, err = h.Ask(ctx, "nobody", "ok?")
	if !errors.Is(err, api.ErrNotFound) || errors.Is(err, api.ErrUnsupported) {
		t.Errorf("ask for a missing agent: %v, want ErrNotFound", err)
	}
	if _, err := h.Ask(ctx, "waiting", " "); api.FieldOf(err) != "question" || !errors.Is(err, api.ErrInvalid) {
		t.Errorf("an empty question: %v, want ErrInvalid naming question", err)
	}
	if _, err := h.Ask(ctx, "waiting", "ok?"); !errors.Is(err, api.ErrConflict) {
		t.Errorf("a pending agent asks: %v, want ErrConflict", err)
	}
	if _, err := h.Latest(ctx, "waiting", 0); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("no question asked: %v, want ErrNotFound", err)
	}
}
