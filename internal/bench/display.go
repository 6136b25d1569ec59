package bench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/drivers/qemu"
	"github.com/hvkube/hvkube/internal/gateway"
)

// DisplayOptions size the display benchmark.
type DisplayOptions struct {
	ImageDir string
	Image    string
	// Updates is how many full updates each path is timed for.
	Updates int
	Log     io.Writer
}

// Display measures the live display: full, non-incremental framebuffer
// updates (raw encoding, 32 bits per pixel) of a running 1280x800 desktop,
// read by a minimal RFB viewer straight from the sandbox's VNC socket and
// through the gateway (a WebSocket to a real server's display endpoint);
// the same number of updates each, taking turns.
func Display(ctx context.Context, o DisplayOptions) (*Report, error) {
	if o.Updates < 1 {
		return nil, fmt.Errorf("updates: at least 1")
	}
	logf := func(format string, args ...any) { fmt.Fprintf(o.Log, format+"\n", args...) }
	be, dir, closeBackend, err := newBackend(ctx, "hvkube-bench-display-", qemu.Config{ImageDir: o.ImageDir, NoSpares: true})
	if err != nil {
		return nil, err
	}
	defer closeBackend() // VMs outlive a backend: end them, even on failure
	logf("building the template and starting a sandbox")
	c, closeDesk, err := openDesk(ctx, be, dir, o.Image, "bench-display")
	if err != nil {
		return nil, err
	}
	defer closeDesk()

	// Direct: the VNC socket, as a viewer on the host would use it.
	dconn, err := be.DialDisplay(ctx, "bench-display")
	if err != nil {
		return nil, err
	}
	defer dconn.Close()
	direct, err := gateway.NewViewer(dconn)
	if err != nil {
		return nil, fmt.Errorf("direct: %w", err)
	}
	// Through the gateway: a WebSocket to the server.
	wsURL := "ws" + strings.TrimPrefix(c.Server(), "http") + "/api/v1/sandboxes/bench-display/display"
	ws, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{Subprotocols: []string{gateway.Subprotocol}})
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", wsURL, err)
	}
	wconn := websocket.NetConn(ctx, ws, websocket.MessageBinary)
	defer wconn.Close()
	viaGateway, err := gateway.NewViewer(wconn)
	if err != nil {
		return nil, fmt.Errorf("through the gateway: %w", err)
	}
	if direct.Width != viaGateway.Width || direct.Height != viaGateway.Height {
		return nil, fmt.Errorf("the two viewers see %dx%d and %dx%d", direct.Width, direct.Height, viaGateway.Width, viaGateway.Height)
	}
	size := fmt.Sprintf("%dx%d", direct.Width, direct.Height)
	rep := &Report{Title: fmt.Sprintf("Live display: VNC over the WebSocket gateway (%s, %s raw updates)", be.Accel(), size)}
	dres := Result{Name: "full update " + size + " raw, direct VNC socket", Target: "reference"}
	gres := Result{Name: "full update " + size + " raw, through the gateway", Target: "≥ 90 % of direct throughput"}
	var dbytes, gbytes int64
	var dtime, gtime time.Duration
	measure := func(v *gateway.Viewer, r *Result, bytes *int64, total *time.Duration, n int) error {
		for i := 0; i < n; i++ {
			t := time.Now()
			if err := v.RequestUpdate(false); err != nil {
				return err
			}
			u, err := v.ReadUpdate()
			if err != nil {
				return err
			}
			d := time.Since(t)
			if u.Pixels != int64(v.Width)*int64(v.Height) {
				return fmt.Errorf("a full update covered %d pixels, not %d", u.Pixels, v.Width*v.Height)
			}
			r.Samples = append(r.Samples, d)
			*bytes += u.Bytes
			*total += d
		}
		return nil
	}
	// QEMU sends a requested update at its next refresh, and on a screen
	// that does not change it refreshes ever more slowly (up to every 3
	// s): keep the screen changing, as a desktop being watched does, by
	// moving the pointer (the guest draws it) through the API.
	wctx, stopWiggle := context.WithCancel(ctx)
	defer stopWiggle()
	go func() {
		for i := 0; wctx.Err() == nil; i++ {
			c.Input(wctx, "bench-display", api.Action{Action: "mouse_move", Coordinate: []int{400 + i%200, 300 + (i/200)%200}})
			select {
			case <-wctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	// One update each first, not timed: the first is slower on both.
	for _, v := range []*gateway.Viewer{direct, viaGateway} {
		var skip Result
		var b int64
		var d time.Duration
		if err := measure(v, &skip, &b, &d, 1); err != nil {
			return nil, err
		}
	}
	// The two take turns update by update (and swap who goes first), so
	// that a slow spell of the host (other VMs, other work) falls on
	// both, and neither connection sits unread long enough for the
	// gateway to think its viewer gone.
	for i := 0; i < o.Updates; i++ {
		if i%50 == 0 {
			logf("updates %d-%d of %d on each path", i+1, min(i+50, o.Updates), o.Updates)
		}
		first, second := func() error { return measure(direct, &dres, &dbytes, &dtime, 1) }, func() error { return measure(viaGateway, &gres, &gbytes, &gtime, 1) }
		if i%2 == 1 {
			first, second = second, first
		}
		if err := first(); err != nil {
			return nil, err
		}
		if err := second(); err != nil {
			return nil, err
		}
	}
	rep.Results = append(rep.Results, dres, gres)
	mbps := func(b int64, d time.Duration) float64 { return float64(b) / (1 << 20) / d.Seconds() }
	dt, gt := mbps(dbytes, dtime), mbps(gbytes, gtime)
	rep.Facts = append(rep.Facts,
		fmt.Sprintf("throughput over %d full updates each: direct %.0f MiB/s (%.1f updates/s), through the gateway %.0f MiB/s (%.1f updates/s)",
			len(dres.Samples), dt, float64(len(dres.Samples))/dtime.Seconds(), gt, float64(len(gres.Samples))/gtime.Seconds()),
		fmt.Sprintf("gateway / direct: %.0f %% of the direct throughput (target ≥ 90 %%); the gateway runs in the same process as the viewer here, over loopback TCP", 100*gt/dt))
	rep.Command = fmt.Sprintf("hvkube bench display --updates %d", o.Updates)
	return rep, nil
}
