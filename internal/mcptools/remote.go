package mcptools

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/client"
)

// Remote is Desktops over the REST API of an hvkube server: what `hvkube
// mcp` serves on stdio. The server checks the token on every call, so a
// scoped token reaches its own sandbox and agent only.
type Remote struct {
	c *client.Client

	mu    sync.Mutex // guards sizes
	sizes map[string][2]int
}

// NewRemote returns Desktops over c.
func NewRemote(c *client.Client) *Remote {
	return &Remote{c: c, sizes: map[string][2]int{}}
}

// Get implements Objects.
func (r *Remote) Get(ctx context.Context, kind, name string) (api.Object, error) {
	return r.c.Get(ctx, kind, name)
}

// List implements Objects.
func (r *Remote) List(ctx context.Context, kind string) ([]api.Object, error) {
	return r.c.List(ctx, kind, "")
}

// Create implements Objects.
func (r *Remote) Create(ctx context.Context, o api.Object) (api.Object, error) {
	return r.c.Create(ctx, o)
}

// Delete implements Objects.
func (r *Remote) Delete(ctx context.Context, kind, name string) error {
	_, err := r.c.Delete(ctx, kind, name)
	return err
}

// Do implements Desktops.
func (r *Remote) Do(ctx context.Context, sandbox string, a api.Action, width int) (Result, error) {
	return DoOver(ctx, remoteScreens{r}, sandbox, a, width)
}

// Complete implements Desktops.
func (r *Remote) Complete(ctx context.Context, agent string, c Completion) error {
	return r.c.Complete(ctx, agent, client.CompleteRequest{Success: &c.Success, Output: c.Output, Message: c.Message})
}

// AskHuman implements Desktops.
func (r *Remote) AskHuman(ctx context.Context, agent, question string, wait time.Duration) (string, error) {
	return AskOver(ctx, remoteHuman{r.c}, agent, question, wait)
}

type remoteScreens struct{ r *Remote }

func (s remoteScreens) Screenshot(ctx context.Context, sandbox string, width int) ([]byte, error) {
	q := url.Values{}
	if width > 0 {
		q.Set("width", strconv.Itoa(width))
	}
	b, _, err := s.r.c.Screenshot(ctx, sandbox, q)
	return b, err
}

func (s remoteScreens) Input(ctx context.Context, sandbox string, a api.Action) ([]int, error) {
	res, err := s.r.c.Input(ctx, sandbox, a)
	return res.Coordinate, err
}

// ScreenSize reads the sandbox's resolution from its status, once.
func (s remoteScreens) ScreenSize(ctx context.Context, sandbox string) (int, int, error) {
	s.r.mu.Lock()
	wh, ok := s.r.sizes[sandbox]
	s.r.mu.Unlock()
	if ok {
		return wh[0], wh[1], nil
	}
	o, err := s.r.c.Get(ctx, api.KindSandbox, sandbox)
	if err != nil {
		return 0, 0, err
	}
	w, h, err := ScreenSizeOf(o.(*api.Sandbox))
	if err != nil {
		return 0, 0, err
	}
	s.r.mu.Lock()
	s.r.sizes[sandbox] = [2]int{w, h}
	s.r.mu.Unlock()
	return w, h, nil
}

// ScreenSizeOf is a sandbox's screen size from its status (or spec).
func ScreenSizeOf(sb *api.Sandbox) (int, int, error) {
	res := sb.Status.Resolution
	if res == "" {
		res = sb.Spec.Display.Resolution
	}
	if res == "" {
		return 0, 0, fmt.Errorf("sandbox %s has no screen yet (phase %s): %w", sb.Metadata.Name, sb.Status.Phase, api.ErrConflict)
	}
	w, h, err := api.ParseResolution(res)
	if err != nil {
		return 0, 0, fmt.Errorf("sandbox %s: resolution %q: %w", sb.Metadata.Name, res, err)
	}
	return w, h, nil
}

type remoteHuman struct{ c *client.Client }

func (h remoteHuman) Ask(ctx context.Context, agent, question string) (*api.HumanRequest, error) {
	hr, err := h.c.AskHuman(ctx, agent, question)
	return hr, notServed(err)
}

func (h remoteHuman) Latest(ctx context.Context, agent string, wait time.Duration) (*api.HumanRequest, error) {
	hr, err := h.c.HumanRequest(ctx, agent, wait)
	return hr, notServed(err)
}

// notServed names a server without the human-in-the-loop API.
func notServed(err error) error {
	var ce *client.Error
	if errors.As(err, &ce) && ce.Code == 404 && ce.Field == "" && len(ce.Message) > 12 && ce.Message[:12] == "no API route" {
		return fmt.Errorf("this server does not serve questions to people (POST /api/v1/agents/NAME/hitl): %w", api.ErrUnsupported)
	}
	return err
}
