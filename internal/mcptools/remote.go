package mcptools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/cdp"
	"github.com/hvkube/hvkube/internal/client"
)

// Remote is Desktops over the REST API of an hvkube server: what `hvkube
// mcp` serves on stdio. The server checks the token on every call, so a
// scoped token reaches its own sandbox and agent only.
type Remote struct {
	c *client.Client
}

// NewRemote returns Desktops over c.
func NewRemote(c *client.Client) *Remote {
	return &Remote{c: c}
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

// Do implements Desktops through POST /sandboxes/NAME/input?width=W,
// which runs every action (screenshot and zoom answer with the image).
func (r *Remote) Do(ctx context.Context, sandbox string, a api.Action, width int) (Result, error) {
	body, err := json.Marshal(a)
	if err != nil {
		return Result{}, err
	}
	res, err := r.c.Act(ctx, sandbox, body, width)
	if err != nil {
		return Result{}, err
	}
	return Result{Coordinate: res.Coordinate, Image: res.Image, ContentType: res.ContentType}, nil
}

// Browser implements Browsers through the API's port forward of the
// sandbox's DevTools port, with the client's token: the server checks
// that the token reaches the sandbox, as it does for a port-forward.
func (r *Remote) Browser(ctx context.Context, sandbox string) (*cdp.Endpoint, error) {
	o, err := r.c.Get(ctx, api.KindSandbox, sandbox)
	if err != nil {
		return nil, err
	}
	sb := o.(*api.Sandbox)
	if err := NoBrowser(sb); err != nil {
		return nil, err
	}
	port := sb.Status.Automation.CDP
	base, header := r.c.PortForward(sandbox, port)
	return cdp.NewForwarded(base, port, header), nil
}

// Accessibility implements AccessibilityTrees over the API.
func (r *Remote) Accessibility(ctx context.Context, sandbox string) (string, error) {
	return r.c.Accessibility(ctx, sandbox)
}

// Complete implements Desktops.
func (r *Remote) Complete(ctx context.Context, agent string, c Completion) error {
	return r.c.Complete(ctx, agent, client.CompleteRequest{Success: &c.Success, Output: c.Output, Message: c.Message})
}

// AskHuman implements Desktops.
func (r *Remote) AskHuman(ctx context.Context, agent, question string, wait time.Duration) (string, error) {
	return AskOver(ctx, remoteHuman{r.c}, agent, question, wait)
}

type remoteHuman struct{ c *client.Client }

func (h remoteHuman) Ask(ctx context.Context, agent, question string) (*api.HumanRequest, error) {
	hr, err := h.c.AskHuman(ctx, agent, question)
	return hr, h.notServed(ctx, agent, err)
}

func (h remoteHuman) Latest(ctx context.Context, agent string, wait time.Duration) (*api.HumanRequest, error) {
	hr, err := h.c.HumanRequest(ctx, agent, wait)
	return hr, h.notServed(ctx, agent, err)
}

// notServed tells a server without the human-in-the-loop API by its
// status codes: a 404 for the questions of an agent that the same server
// answers 200 for is a route it lacks, whatever its message says (older
// servers word it differently, or answer in plain text).
func (h remoteHuman) notServed(ctx context.Context, agent string, err error) error {
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != http.StatusNotFound {
		return err
	}
	if _, gerr := h.c.Get(ctx, api.KindAgent, agent); gerr != nil {
		return err // the agent is missing, or the server cannot say: the 404 stands
	}
	return fmt.Errorf("this server does not serve questions to people (POST /api/v1/agents/NAME/hitl): %w", api.ErrUnsupported)
}
