package display

import (
	"context"
	"fmt"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
)

// OnBackend is a Desktop straight over a backend's abilities, by backend
// ID, with no objects and no control checks: for the conformance suite and
// benchmarks. The server goes through the node, which checks run states
// and take-overs.
func OnBackend(b backend.Backend) Desktop { return onBackend{b} }

type onBackend struct{ b backend.Backend }

func ability[T any](b backend.Backend, what string) (T, error) {
	v, ok := b.(T)
	if !ok {
		return v, fmt.Errorf("%s: the %s backend cannot do this: %w", what, b.Name(), api.ErrUnsupported)
	}
	return v, nil
}

func (o onBackend) Screenshot(ctx context.Context, id string, opts backend.ScreenshotOptions) ([]byte, string, error) {
	s, err := ability[backend.Screen](o.b, "screenshots")
	if err != nil {
		return nil, "", err
	}
	return s.Screenshot(ctx, id, opts)
}

func (o onBackend) ScreenSize(ctx context.Context, id string) (int, int, error) {
	s, err := ability[backend.Screen](o.b, "screen size")
	if err != nil {
		return 0, 0, err
	}
	return s.ScreenSize(ctx, id)
}

func (o onBackend) SendInput(ctx context.Context, id string, evs []backend.InputEvent) error {
	in, err := ability[backend.Input](o.b, "input")
	if err != nil {
		return err
	}
	return in.SendInput(ctx, id, evs)
}

func (o onBackend) TypeText(ctx context.Context, id, text string) error {
	t, err := ability[backend.TextInput](o.b, "typing non-ASCII text")
	if err != nil {
		return err
	}
	return t.TypeText(ctx, id, text)
}

func (o onBackend) CursorPosition(ctx context.Context, id string) (int, int, error) {
	c, err := ability[backend.Cursor](o.b, "cursor position")
	if err != nil {
		return 0, 0, err
	}
	return c.CursorPosition(ctx, id)
}
