package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/spf13/cobra"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/kube"
	"github.com/hvkube/hvkube/internal/metrics"
	"github.com/hvkube/hvkube/internal/node"
	"github.com/hvkube/hvkube/internal/nodeapi"
	"github.com/hvkube/hvkube/internal/nodeca"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/secrets"
	"github.com/hvkube/hvkube/internal/server"
)

// nodeConfig is what hvkube node takes beside the host flags.
type nodeConfig struct {
	listen    string
	advertise string
	serverURL string
	serverCA  string
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

The node holds no key that signs anything. It proves who it is to the API
servers at --server-url (their TLS listener, checked by --server-ca; plain
HTTP only on loopback) with its identity (--identity-file): on
Kubernetes, its pod's service-account token of audience hvkube (the API
servers ask the cluster who it is, and take the node's name from the
token); elsewhere, one minted for it alone with hvkube node identity NAME.
On start it joins them: it makes the key of its API, and is given a
certificate for its own name (signed by the API servers' authority,
renewed at half its 7-day life) and the public key that checks their
requests. For each attempt of a custom agent it runs, it asks them for
the attempt's scoped token, which they give only while the attempt runs
on this node.

The API servers send it sandbox operations (screen, input, exec,
clipboard, logs, the live view, port forwards, agents' files) on --listen,
over TLS only (they verify the node's name in its certificate). Each
request must carry a credential an API server signed for that very
request (this node, its method and path), good for 30 seconds and once;
browsers are refused, and /healthz answers without one.

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
	f.StringVar(&nc.serverURL, "server-url", "", "the API servers' address: where the node joins and custom agents' programs call (their TLS listener, e.g. https://hvkube.hvkube-system.svc:8443; http only on loopback)")
	f.StringVar(&nc.serverCA, "server-ca", "", "the PEM certificate of the authority the API servers' certificate is checked by (hvkube ca prints it; default the system's); custom agents' programs are given it as HVKUBE_CA_FILE and NODE_EXTRA_CA_CERTS")
	f.StringVar(&cfg.identityFile, "identity-file", "", "the node's identity, read at each use: its pod's projected service-account token (audience hvkube), or one made by hvkube node identity NAME (required; not readable by others)")
	hostFlags(cmd, &cfg)
	f.StringVar(&cfg.backend, "backend", "auto", "VM backend: qemu, hyperv, or auto (hyperv on Windows, qemu elsewhere)")
	cmd.AddCommand(newNodeIdentityCmd())
	return cmd
}

func newNodeIdentityCmd() *cobra.Command {
	var keyFile string
	var valid time.Duration
	cmd := &cobra.Command{
		Use:   "identity NAME",
		Short: "Print the identity of node NAME, for its --identity-file",
		Long: `Print the identity of node NAME: what hvkube node --node-name NAME
proves who it is with, outside Kubernetes (there, the node's pod's
service-account token is its identity). Run it where the API servers'
key is (--key-file), and give the output to that node alone: it speaks
for NAME and no other node, and signs nothing. Make a new one before
--valid ends; all of a node's identities end when the key changes.`,
		Example: `  hvkube node identity host-b --key-file /etc/hvkube/key > host-b.identity
  # on host-b:
  install -m 600 host-b.identity /etc/hvkube/identity
  hvkube node --node-name host-b --identity-file /etc/hvkube/identity ...`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if errs := validation.IsDNS1123Subdomain(args[0]); len(errs) > 0 {
				return fmt.Errorf("NAME %q: %s", args[0], strings.Join(errs, "; "))
			}
			if keyFile == "" {
				return errors.New("--key-file: required: the API servers' key")
			}
			if valid <= 0 || valid > 10*365*24*time.Hour {
				return fmt.Errorf("--valid %s: want more than 0 and at most 10 years", valid)
			}
			key, err := loadKey(serveConfig{keyFile: keyFile})
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), key.MintNodeIdentity(args[0], time.Now(), valid))
			return nil
		},
	}
	cmd.Flags().StringVar(&keyFile, "key-file", "", "the API servers' key (hvkube serve --key-file)")
	cmd.Flags().DurationVar(&valid, "valid", 365*24*time.Hour, "how long the identity is good for")
	return cmd
}

// identityReader reads the node's identity from path at each use, and
// refuses a file that group or others can read.
func identityReader(path string) func() (string, error) {
	return func() (string, error) {
		return readSecretToken("--identity-file", path)
	}
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
	if cfg.identityFile == "" {
		return errors.New("--identity-file: required: the node's identity (its pod's service-account token, or hvkube node identity NAME)")
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
		return errors.New("--server-url: required: the API servers' address, where the node joins and its agents' programs call (e.g. http://hvkube.hvkube-system.svc:8080)")
	}
	u, err := url.Parse(nc.serverURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--server-url %q: want https://HOST[:PORT]", nc.serverURL)
	}
	if loop, _ := isLoopback(net.JoinHostPort(u.Hostname(), "0")); u.Scheme == "http" && !loop {
		return fmt.Errorf("--server-url %q: plain HTTP would carry the node's identity and its agents' tokens in the clear; give the API servers' TLS address (hvkube serve --tls-addr) and --server-ca", nc.serverURL)
	}
	var serverTLS *tls.Config
	if nc.serverCA != "" {
		b, err := os.ReadFile(nc.serverCA)
		if err != nil {
			return fmt.Errorf("--server-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return fmt.Errorf("--server-ca %s: no PEM certificate in it", nc.serverCA)
		}
		serverTLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	identity := identityReader(cfg.identityFile)
	if _, err := identity(); err != nil {
		return err
	}
	if err := privateDataDir(cfg.dataDir, log); err != nil {
		return err
	}
	cfg.store.host = cfg.nodeName
	st, closeStore, err := openStore(ctx, cfg.store, cfg.dataDir, "hvkube-node", log)
	if err != nil {
		return err
	}
	defer closeStore()
	unlock, err := lockDataDir(cfg)
	if err != nil {
		return err
	}
	defer unlock()
	if ks, ok := st.(*kube.Store); ok {
		// What holds a node to its host on Kubernetes is the admission
		// policies; say so loudly when they are not in force.
		if err := ks.CheckNodePolicy(ctx); errors.Is(err, kube.ErrPolicyNotEnforced) {
			log.Error("this node is not held to its host", "err", err)
		} else if err != nil {
			log.Warn("could not check the admission policies", "err", err)
		}
	}
	be, err := openBackend(ctx, cfg, roots, log)
	if err != nil {
		return err
	}
	if be == nil {
		return errors.New("no VM backend on this host: a node needs one (install QEMU, or run Hyper-V)")
	}
	defer be.Close()
	defer sayDesktopsLeft(ctx, os.Stderr, be, cfg.dataDir, log)
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
	up := &nodeapi.Upstream{Server: nc.serverURL, Identity: identity}
	if serverTLS != nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = serverTLS
		up.HTTP = &http.Client{Timeout: 30 * time.Second, Transport: tr}
	}
	tokens := func(ctx context.Context, a *api.Agent, _ time.Duration) (string, error) {
		return up.AgentToken(ctx, a.Metadata.Name, a.Status.Attempts)
	}
	nd := newNode(cfg, st, be, tokens, nc.serverURL, hostCommands, roots, mx, log, func(o *node.Options) {
		o.WaitForPlacement, o.Address, o.ServerCAFile = true, addr, nc.serverCA
		// The node holds no key: the API servers open the Secrets of
		// its own claims for it.
		o.Env = func(ctx context.Context, sb *api.Sandbox, a *api.Agent) (secrets.Env, error) {
			if a == nil {
				return up.Env(ctx, sb.Metadata.Name, "", 0)
			}
			return up.Env(ctx, sb.Metadata.Name, a.Metadata.Name, a.Status.Attempts)
		}
	})
	up.Node = nd.Name()
	// The node API's key is made here and never leaves: the API servers
	// sign its certificate, for this node's name, when the node joins.
	tlsKey, csr, err := nodeca.NewRequest(up.Node)
	if err != nil {
		return err
	}
	joined, err := up.JoinRetrying(ctx, tlsKey, csr, log)
	if err != nil {
		return fmt.Errorf("joining the API servers at %s: %w", nc.serverURL, err)
	}
	log.Info("joined the API servers", "server", nc.serverURL, "node", up.Node, "certificate expires", joined.Cert.Leaf.NotAfter)
	serving := nodeapi.NewServingCert(joined)
	go serving.Renew(ctx, up, tlsKey, csr, log)
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
		Handler:           nodeapi.Handler(nodeapi.HandlerOptions{Node: nd.Name(), Verifiers: serving.Verifier, Target: nd, Logger: log}),
		ReadHeaderTimeout: server.DefaultReadHeaderTimeout,
		IdleTimeout:       server.DefaultIdleTimeout,
	}
	errc := make(chan error, 1)
	// TLS only: a plain request gets the TLS server's 400.
	go func() {
		errc <- hs.Serve(tls.NewListener(ln, &tls.Config{GetCertificate: serving.GetCertificate, MinVersion: tls.VersionTLS13}))
	}()
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
