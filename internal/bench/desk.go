package bench

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/client"
	"github.com/hvkube/hvkube/internal/drivers/qemu"
	"github.com/hvkube/hvkube/internal/node"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/server"
	"github.com/hvkube/hvkube/internal/store"
)

// openDesk starts a real server over be (a store in dir, the controllers,
// this node), applies a Template "bench" of image and a Sandbox named
// sandbox from it, and waits until the sandbox runs: the desktop that the
// API, MCP and display benchmarks drive. close deletes the sandbox and
// stops everything but the backend.
func openDesk(ctx context.Context, be *qemu.Backend, dir, image, sandbox string) (c *client.Client, close func(), err error) {
	var undo []func()
	close = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	defer func() {
		if err != nil {
			close()
		}
	}()
	st, err := store.Open(ctx, filepath.Join(dir, "store"), store.Options{})
	if err != nil {
		return nil, nil, err
	}
	undo = append(undo, func() { st.Close() })
	mctx, cancel := context.WithCancel(ctx)
	undo = append(undo, cancel)
	mgr := reconcile.NewManager(st, nil, 0)
	undo = append(undo, mgr.Stop)
	nd := node.New(node.Options{Store: st, Backend: be})
	nd.Register(mgr)
	tpl := &api.Template{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindTemplate}}
	tpl.Metadata.Name = "bench"
	tpl.Spec.QEMU = &api.QEMUImage{Image: image}
	sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
	sb.Metadata.Name = sandbox
	sb.Spec.TemplateRef = "bench"
	for _, o := range []api.Object{tpl, sb} {
		api.Default(o)
		if _, err := st.Create(ctx, o); err != nil {
			return nil, nil, err
		}
	}
	if err := mgr.Start(mctx); err != nil {
		return nil, nil, err
	}
	c, stop, err := serve(server.Options{Store: st, Sandboxes: nd, Actions: nd.Actions()})
	if err != nil {
		return nil, nil, err
	}
	undo = append(undo, stop, func() { deleteSandbox(context.WithoutCancel(ctx), c, sandbox) })
	if err := waitPhase(ctx, c, api.KindTemplate, "bench", api.TemplateReady, 10*time.Minute); err != nil {
		return nil, nil, err
	}
	if err := waitPhase(ctx, c, api.KindSandbox, sandbox, api.SandboxRunning, 5*time.Minute); err != nil {
		return nil, nil, err
	}
	return c, close, nil
}

// deleteSandbox deletes a sandbox and waits (a minute at most) until it is
// gone.
func deleteSandbox(ctx context.Context, c *client.Client, name string) {
	c.Delete(ctx, api.KindSandbox, name)
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if _, err := c.Get(ctx, api.KindSandbox, name); err != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// newBackend starts a QEMU backend in a new temporary directory (named
// after prefix) with cfg's other settings. close ends its VMs (they
// outlive a backend), closes it and removes the directory.
func newBackend(ctx context.Context, prefix string, cfg qemu.Config) (be *qemu.Backend, dir string, close func(), err error) {
	dir, err = os.MkdirTemp("", prefix)
	if err != nil {
		return nil, "", nil, err
	}
	cfg.Dir = filepath.Join(dir, "qemu")
	be, err = qemu.New(ctx, cfg)
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", nil, err
	}
	return be, dir, func() {
		deleteSandboxes(ctx, be)
		be.Close()
		os.RemoveAll(dir)
	}, nil
}
