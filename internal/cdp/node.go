package cdp

import (
	"context"
	"fmt"
	"time"
)

// What the browser toolset (internal/browsertool) does to a page by
// DOM node and by viewport pixel, beside the locator-based methods.

// NodeCentre scrolls the element of backendNodeID into view and returns
// the centre of its first box in the viewport's CSS pixels; desc names it
// in errors.
func (p *Page) NodeCentre(ctx context.Context, backendNodeID int, desc string) (float64, float64, error) {
	return p.centre(ctx, element{backendID: backendNodeID, desc: desc})
}

// CallOnNode calls the function fn with this the element (or, for a text
// node, its parent element) of backendNodeID and args passed as values,
// and decodes its value into out.
func (p *Page) CallOnNode(ctx context.Context, backendNodeID int, fn string, out any, args ...any) error {
	var res struct {
		Object remoteObject `json:"object"`
	}
	if err := p.c.Call(ctx, "DOM.resolveNode", map[string]any{"backendNodeId": backendNodeID}, &res); err != nil {
		return fmt.Errorf("%w: the element is gone from the page", ErrNoElement)
	}
	var el struct {
		Result remoteObject `json:"result"`
	}
	if err := p.c.Call(ctx, "Runtime.callFunctionOn", map[string]any{"functionDeclaration": `function() { return this.nodeType === 1 ? this : this.parentElement }`,
		"objectId": res.Object.ObjectID}, &el); err != nil {
		return err
	}
	if el.Result.ObjectID == "" {
		return fmt.Errorf("%w: the node is not inside an element", ErrNotInteractable)
	}
	return p.callOn(ctx, el.Result.ObjectID, fn, out, args...)
}

// Eval evaluates the expression expr in the page and decodes its value
// into out.
func (p *Page) Eval(ctx context.Context, expr string, out any) error { return p.eval(ctx, expr, out) }

// Settling runs fn, an input that may start a navigation (a click, a
// key), then waits for a navigation it started: one that begins within
// grace of the page's having handled the input (a script run after it
// answers), until its document has loaded or ctx ends.
func (p *Page) Settling(ctx context.Context, grace time.Duration, fn func() error) error {
	started, stop := p.navigations(ctx)
	defer stop()
	if err := fn(); err != nil {
		return err
	}
	// The page's main thread is past the input's handlers when it runs
	// this; a navigation they started has begun by then or soon after.
	p.eval(ctx, "0", nil)
	return p.settleWithin(ctx, started, grace)
}
