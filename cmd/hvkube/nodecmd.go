package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/hvkube/hvkube/internal/kube"
	"github.com/hvkube/hvkube/internal/metrics"
	"github.com/hvkube/hvkube/internal/node"
	"github.com/hvkube/hvkube/internal/nodeapi"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/server"
)

// nodeConfig is what hvkube node takes beside the host flags.
type nodeConfig struct {
	listen    string
	advertise string
	serverURL string
}

func newNodeCmd() *cobra.Command {
	var cfg serveConfig
	var nc nodeConfig
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Run the node agent of one host of a cluster",
		Long: `Run the node agent of one host of a cluster on Kubernetes: this host's
VMs and nothing else. It builds the templates' snapshots here, runs the
sandboxes placed on this node (status.node), runs the agents bound to
them, and writes its Node object (capacity, heartbeat, and the
--advertise-address the API servers reach it by) every few seconds. The
cluster controllers and the API run in hvkube serve, in replicas of their
own; docs/kubernetes.md shows how the two are deployed.

The API servers send it sandbox operations (screen, input, exec,
clipboard, logs, the live view, port forwards, agents' files) on --listen.
Each request must carry a short-lived token minted under the key in
--key-file, which the API servers hold too; browsers are refused, and
/healthz answers without a token. Custom agents' programs reach the API at
--server-url with tokens minted under the same key.

A node that cannot write its Node object for a while stops the agents it
runs (the cluster fails those attempts as NodeLost and may run them again
elsewhere); when it comes back it keeps the sandboxes still placed on it
and removes the VMs of the others.

It needs --store kubernetes: with SQLite, hvkube serve runs the one node.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runNode(cmd.Context(), cfg, nc)
		},
	}
	f := cmd.Flags()
	f.StringVar(&nc.listen, "listen", "127.0.0.1:8090", "address the node API listens on (in a cluster, 0.0.0.0:8090)")
	f.StringVar(&nc.advertise, "advertise-address", "", "host:port the API servers reach this node by, written in its Node object (default --listen, when it names a host)")
	f.StringVar(&nc.serverURL, "server-url", "", "the API's address custom agents' programs are given (the hvkube serve Service, e.g. http://hvkube.hvkube-system.svc:8080)")
	f.StringVar(&cfg.keyFile, "key-file", "", "the key shared with the API servers: it signs agents' tokens and checks the API servers' (required; at least 32 bytes, not readable by others)")
	hostFlags(cmd, &cfg)
	f.StringVar(&cfg.backend, "backend", "auto", "VM backend: qemu, hyperv, or auto (hyperv on Windows, qemu elsewhere)")
	return cmd
}

// advertiseAddress is where the API servers reach the node: --advertise-
// address, else the address it listens on, when that names a host.
func advertiseAddress(nc nodeConfig, listening net.Addr) (string, error) {
	a := nc.advertise
	if a == "" {
		a = listening.String()
		host, _, _ := net.SplitHostPort(a)
		if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
			return "", fmt.Errorf("--advertise-address: --listen %s names no host the API servers could reach; give the address they reach this node by (in a pod, $(POD_IP):PORT)", nc.listen)
		}
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil || host == "" || port == "" || port == "0" {
		return "", fmt.Errorf("--advertise-address %q: want host:port", a)
	}
	return a, nil
}

func runNode(ctx context.Context, cfg serveConfig, nc nodeConfig) error {
	log, hostCommands, roots, err := hostSetup(cfg)
	if err != nil {
		return err
	}
	if cfg.store.kind != storeKubernetes {
		return fmt.Errorf("--store %q: hvkube node needs --store kubernetes (with SQLite, hvkube serve runs the one node)", cfg.store.kind)
	}
	if cfg.keyFile == "" {
		return errors.New("--key-file: required: the key the API servers hold too (a Secret mounted in both)")
	}
	if cfg.backend == "none" {
		return errors.New("--backend none: a node runs VMs; give qemu, hyperv or auto")
	}
	if _, _, err := net.SplitHostPort(nc.listen); err != nil {
		return fmt.Errorf("--listen %q: %w", nc.listen, err)
	}
	if nc.advertise != "" {
		if _, err := advertiseAddress(nc, nil); err != nil {
			return err
		}
	}
	if nc.serverURL == "" {
		log.Warn("no --server-url: custom agents' programs are not told where the API is")
	}
	key, err := loadKey(cfg)
	if err != nil {
		return err
	}
	if err := privateDataDir(cfg.dataDir, log); err != nil {
		return err
	}
	st, closeStore, err := openStore(ctx, cfg.store, cfg.dataDir, "hvkube-node", log)
	if err != nil {
		return err
	}
	defer closeStore()
	be, err := openBackend(ctx, cfg, roots, log)
	if err != nil {
		return err
	}
	if be == nil {
		return errors.New("no VM backend on this host: a node needs one (install QEMU, or run Hyper-V)")
	}
	defer be.Close()
	ln, err := net.Listen("tcp", nc.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	defer ln.Close()
	addr, err := advertiseAddress(nc, ln.Addr())
	if err != nil {
		return err
	}

	mx := metrics.New(st)
	if ks, ok := st.(*kube.Store); ok {
		mx.CountEventDrops(ks.EventDrops)
	}
	nd := newNode(cfg, st, be, key, nc.serverURL, hostCommands, roots, mx, log, func(o *node.Options) {
		o.WaitForPlacement, o.Address = true, addr
	})
	if err := nd.Start(ctx); err != nil {
		return err
	}
	defer nd.Stop()
	mgr := reconcile.NewManager(st, log, 0)
	mgr.Observe(mx.ObserveReconcile)
	nd.Register(mgr)
	defer mgr.Stop()
	if err := mgr.Start(ctx); err != nil {
		return err
	}
	hs := &http.Server{
		Handler:           nodeapi.Handler(nodeapi.HandlerOptions{Node: nd.Name(), Key: key, Target: nd, Logger: log}),
		ReadHeaderTimeout: server.DefaultReadHeaderTimeout,
		IdleTimeout:       server.DefaultIdleTimeout,
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	log.Info("hvkube node listening", "node", nd.Name(), "listen", ln.Addr().String(), "advertise", addr, "backend", be.Name(), "dataDir", cfg.dataDir, "version", version)
	select {
	case err := <-errc:
		return fmt.Errorf("node API: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hs.Shutdown(sctx)
	log.Info("stopped")
	return nil
}
