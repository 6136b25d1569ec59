package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/client"
	"github.com/hvkube/hvkube/internal/server"
	"github.com/hvkube/hvkube/internal/store"
)

// APIOptions size the control-plane benchmark.
type APIOptions struct {
	Objects int // objects stored before measuring
	Runs    int // runs per operation
	// Apply runs `hvkube apply -f` of a 100-document file; nil skips it.
	Apply func(ctx context.Context, server, file string) error
	Log   io.Writer
}

// API measures create, get and list over HTTP on loopback against a real
// server and SQLite store holding opts.Objects agents, and apply of a
// 100-document file.
func API(ctx context.Context, opts APIOptions) (*Report, error) {
	dir, err := os.MkdirTemp("", "hvkube-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	st, err := store.Open(ctx, filepath.Join(dir, "data"), store.Options{})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	c, stop, err := serve(server.Options{Store: st})
	if err != nil {
		return nil, err
	}
	defer stop()
	url := c.Server()

	fmt.Fprintf(opts.Log, "storing %d agents…\n", opts.Objects)
	seed := time.Now()
	const batch = 500
	for i := 0; i < opts.Objects; i += batch {
		err := st.Tx(ctx, func(tx *store.Tx) error {
			for j := i; j < i+batch && j < opts.Objects; j++ {
				if _, err := tx.Create(benchAgent(fmt.Sprintf("seed-%05d", j), fmt.Sprintf("b%d", j%(opts.Objects/100)))); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(opts.Log, "stored in %s\n", time.Since(seed).Round(time.Millisecond))

	rep := &Report{Title: fmt.Sprintf("Control plane API (%d objects stored)", opts.Objects)}
	if err := rep.Add("create agent (POST)", opts.Runs, "", func(i int) error {
		_, err := c.Create(ctx, benchAgent(fmt.Sprintf("new-%05d", i), "new"))
		return err
	}); err != nil {
		return nil, err
	}
	if err := rep.Add("get agent (GET by name)", opts.Runs, "", func(i int) error {
		_, err := c.Get(ctx, api.KindAgent, fmt.Sprintf("seed-%05d", (i*7919)%opts.Objects))
		return err
	}); err != nil {
		return nil, err
	}
	listRuns := max(opts.Runs/10, 20)
	total := opts.Objects + opts.Runs
	if err := rep.Add(fmt.Sprintf("list all %d agents", total), listRuns, "", func(int) error {
		items, err := c.List(ctx, api.KindAgent, "")
		if err == nil && len(items) != total {
			err = fmt.Errorf("listed %d, want %d", len(items), total)
		}
		return err
	}); err != nil {
		return nil, err
	}
	if err := rep.Add(fmt.Sprintf("list all %d agents, raw HTTP (no client decode)", total), listRuns, "", func(int) error {
		resp, err := c.Raw(ctx, http.MethodGet, "/api/v1/agents", nil, "")
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return err
	}); err != nil {
		return nil, err
	}
	if err := rep.Add("list with labelSelector (100 match)", opts.Runs, "", func(int) error {
		items, err := c.List(ctx, api.KindAgent, "bucket=b7")
		if err == nil && len(items) != 100 {
			err = fmt.Errorf("listed %d, want 100", len(items))
		}
		return err
	}); err != nil {
		return nil, err
	}
	if opts.Apply != nil {
		file := filepath.Join(dir, "hundred.yaml")
		applyRuns := 20
		if err := rep.Add("apply -f of a 100-document file", applyRuns, "", func(i int) error {
			if err := os.WriteFile(file, []byte(hundredDocs(i)), 0o644); err != nil {
				return err
			}
			return opts.Apply(ctx, url, file)
		}); err != nil {
			return nil, err
		}
	}
	rep.Command = fmt.Sprintf("hvkube bench api --objects %d --runs %d", opts.Objects, opts.Runs)
	return rep, nil
}

// serve runs a real API server on a loopback port and returns a client of
// it and its stop function.
func serve(opts server.Options) (*client.Client, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	hs := &http.Server{Handler: server.New(opts).Handler(), ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	c, err := client.New("http://"+ln.Addr().String(), "")
	if err != nil {
		hs.Close()
		return nil, nil, err
	}
	return c, func() { hs.Close() }, nil
}

func benchAgent(name, bucket string) *api.Agent {
	a := &api.Agent{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindAgent}}
	a.Metadata.Name = name
	a.Metadata.Labels = map[string]string{"bucket": bucket, "task": "bench"}
	a.Spec.SandboxSelector = &api.SandboxSelector{MatchLabels: map[string]string{"pool": "browser-workers"}}
	a.Spec.Task.Workflow = "book-flight"
	a.Spec.Task.Input = []byte(`{"destination":"New York","date":"2024-12-25"}`)
	api.Default(a)
	return a
}

// hundredDocs is a 100-document YAML file: 50 pools and 50 agents; run
// changes a field so that every apply after the first configures them.
func hundredDocs(run int) string {
	var b strings.Builder
	for i := 0; i < 50; i++ {
		fmt.Fprintf(&b, "---\napiVersion: hvkube/v1\nkind: SandboxPool\nmetadata:\n  name: pool-%02d\nspec:\n  replicas: %d\n  template:\n    metadata:\n      labels: {pool: pool-%02d}\n    spec:\n      display: {resolution: 1280x800}\n", i, run%5+1, i)
		fmt.Fprintf(&b, "---\napiVersion: hvkube/v1\nkind: Agent\nmetadata:\n  name: apply-%02d\nspec:\n  sandboxSelector:\n    pool: pool-%02d\n  task:\n    workflow: run-%d\n", i, i, run)
	}
	return b.String()
}
