package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/authtoken"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/capacity"
	"github.com/hvkube/hvkube/internal/controller"
	"github.com/hvkube/hvkube/internal/datadir"
	"github.com/hvkube/hvkube/internal/display"
	"github.com/hvkube/hvkube/internal/drivers/hyperv"
	"github.com/hvkube/hvkube/internal/drivers/qemu"
	"github.com/hvkube/hvkube/internal/gateway"
	"github.com/hvkube/hvkube/internal/hostpath"
	"github.com/hvkube/hvkube/internal/kube"
	"github.com/hvkube/hvkube/internal/metrics"
	"github.com/hvkube/hvkube/internal/node"
	"github.com/hvkube/hvkube/internal/nodeapi"
	"github.com/hvkube/hvkube/internal/nodeca"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/secretenv"
	"github.com/hvkube/hvkube/internal/secrets"
	"github.com/hvkube/hvkube/internal/server"
	"github.com/hvkube/hvkube/internal/store"
)

type serveConfig struct {
	store           storeConfig
	addr            string
	dataDir         string
	tokenFile       string
	insecureNoToken bool
	stopDesktops    bool
	logLevel        string
	backend         string
	imageDir        string
	defaultTemplate string
	allowedHosts    []string
	allowHostPaths  []string
	shutdownGrace   time.Duration
	nodeName        string
	hypervDir       string
	hypervSwitch    string
	credentialFile  string
	// Memory admission and pressure (internal/capacity, node.Pressure).
	memoryLimitPercent int
	runningReserveMB   int
	pressurePercent    int
	noWarmClones       bool
	readyAhead         int
	// allowHostCommands lets custom agents run commands on this host, as
	// hostCommandUser ("" is nobody).
	allowHostCommands bool
	hostCommandUser   string
	// keyFile holds the key that signs agents' and nodes' tokens; the
	// API servers and the nodes of a cluster share it.
	keyFile string
	// Leader election of the cluster controllers (Kubernetes store).
	leaderElect   bool
	leaderLease   time.Duration
	leaderElectID string
	// nodeGrace: a node silent this long is lost (controller.Options).
	nodeGrace time.Duration
	// nodeServiceAccount ("namespace:name") is the node agents' service
	// account (their identity on Kubernetes).
	nodeServiceAccount string
	// identityFile holds a node's identity (hvkube node).
	identityFile string
	// The TLS listener (the API, and the admission webhook with the
	// Kubernetes store) and the names of its certificate.
	tlsAddr  string
	tlsNames []string
}

func newServeCmd() *cobra.Command {
	var cfg serveConfig
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the hvkube server",
		Long: `Run the hvkube server: the REST API, the dashboard (open the server's
address in a browser), the live view (VNC over WebSocket), MCP at /mcp,
Prometheus metrics at /metrics, the store and the controllers.

The server listens on 127.0.0.1:8080 by default. Every API call must carry
"Authorization: Bearer TOKEN". The token comes from --token-file (not
readable by group or others: chmod 600), else from HVKUBE_TOKEN (which the
server then clears from its environment, on Linux from /proc/PID/environ
too), else from the file "token" in --data-dir, created with a random token
on the first start; the CLI on this machine reads that file by itself.
Open the dashboard with http://ADDR/#token=TOKEN. --insecure-no-token runs
without a token, on a loopback address only, and says so in the log and
/healthz.

Custom agents' commands run on this host (spec.task.in: host) only with
--allow-host-commands, which needs a Linux server running as root: they
run as --host-command-user (default nobody), with no supplementary groups,
in a fresh working directory that is removed afterwards. The data
directory is kept at mode 0700, so they cannot read the store, the token or
the signing key. Without the flag such agents fail with the reason
HostCommandsDisabled; commands in the sandbox (spec.task.in: guest) run
either way.

Pages of other sites cannot use the server: requests must name it in their
Host header (127.0.0.1, localhost, the --addr host, or an --allowed-hosts
name), and requests that change state from a page of another origin are
refused. The dashboard's page asks for the token unless its address
carries it.

Objects may name host files (template image files, volume host folders) only
under --image-dir and the --allow-host-path directories.

Memory is counted as the desktops use it, not as their guest memory: a
paused clone shares its template's memory and counts the few pages of its
own. A new desktop starts when what the desktops use, plus what is held
for running ones to grow, plus its own expected size stays under
--memory-limit-percent of host memory. When the host runs short anyway
(--memory-pressure-percent), idle paused desktops of pools move to disk.
"hvkube get nodes" shows the count; see docs/capacity.md.

On Windows, --backend hyperv (the default there when Hyper-V answers) runs
Windows desktops on Hyper-V: VM files under --hyperv-dir, sandboxes on
--hyperv-switch, guest programs and files through PowerShell Direct with
the account in --guest-credential-file. See docs/windows.md.

State lives in a SQLite database in --data-dir (default: ` + datadir.Default() + `),
or with --store kubernetes in a Kubernetes API server, as custom resources
of group hvkube.io in one namespace (docs/kubernetes.md). There, any number
of replicas may serve the API; the cluster controllers run in the one that
holds the Lease hvkube-controllers (--leader-elect), and a replica that
loses it exits. Sandboxes on other hosts run in hvkube node, which the
replicas reach with a credential per request, signed with a key derived
from --key-file: the nodes hold only its public half, and the key stays
with the replicas. A node proves who it is with its own identity: a
service-account token of its pod (checked with a TokenReview, the node
named by the token), or one minted with hvkube node identity NAME. A node
silent for --node-grace is marked lost.
SIGINT or SIGTERM shuts the server down gracefully. The desktops keep
running without it, for the next start to take back (it says how many);
hvkube serve --stop-desktops saves them all to disk and exits. One server
at a time may use a data directory.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return serve(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.addr, "addr", "127.0.0.1:8080", "address to listen on")
	f.StringVar(&cfg.tokenFile, "token-file", "", "file holding the API bearer token (or set HVKUBE_TOKEN; default: DATA-DIR/token, created when missing)")
	f.BoolVar(&cfg.insecureNoToken, "insecure-no-token", false, "run without a token: any program or page that reaches the address controls the server (loopback addresses only)")
	f.StringSliceVar(&cfg.allowedHosts, "allowed-hosts", nil, "more names clients may reach the server by (Host header), comma-separated or repeated")
	f.DurationVar(&cfg.shutdownGrace, "shutdown-grace", server.DefaultShutdownGrace, "how long a shutdown waits for requests in flight before closing their connections")
	f.StringVar(&cfg.keyFile, "key-file", "", "the key that signs agents' tokens and the requests to nodes (default DATA-DIR/token.key, created when missing); on Kubernetes, a Secret of the API servers' alone, never mounted in a node")
	f.StringVar(&cfg.tlsAddr, "tls-addr", "", "also serve the API over TLS on this address, e.g. 0.0.0.0:8443, with a certificate from the key's authority (hvkube ca prints it; nodes join here); with --store kubernetes the admission webhook answers here too (hvkube webhook-config registers it)")
	f.StringSliceVar(&cfg.tlsNames, "tls-names", nil, "the names (or IP addresses) the TLS certificate is for (default the Service hvkube: hvkube, hvkube.NAMESPACE, hvkube.NAMESPACE.svc, hvkube.NAMESPACE.svc.cluster.local)")
	f.StringVar(&cfg.nodeServiceAccount, "node-service-account", "", "with --store kubernetes: NAMESPACE:NAME of the node agents' service account, whose pod-bound tokens of audience hvkube identify nodes (default: the store's namespace and hvkube-node)")
	f.BoolVar(&cfg.stopDesktops, "stop-desktops", false, "do not serve: save the desktops an earlier server left running in --data-dir to disk, which frees their memory, and exit (the next start finds them Saved: a pool restores them as agents claim them, hvkube resume any)")
	f.BoolVar(&cfg.leaderElect, "leader-elect", true, "with --store kubernetes: run the cluster controllers only while this replica holds the Lease hvkube-controllers")
	f.DurationVar(&cfg.leaderLease, "leader-lease-duration", 15*time.Second, "with --leader-elect: how long the other replicas wait after the leader's last renewal before one takes over")
	f.DurationVar(&cfg.nodeGrace, "node-grace", controller.DefaultNodeGrace, "with --store kubernetes: how long a node may go without writing its Node object before the cluster marks it lost, fails its agents' attempts and refills its pools elsewhere; more than the nodes' fence time plus their status interval")
	hostFlags(cmd, &cfg)
	cmd.Flags().StringVar(&cfg.backend, "backend", "auto", "VM backend: qemu, hyperv, none, or auto (hyperv on Windows, qemu elsewhere, when installed)")
	return cmd
}

// hostFlags adds the flags hvkube serve and hvkube node share: the
// store, the data directory, and how this host runs desktops.
func hostFlags(cmd *cobra.Command, cfg *serveConfig) {
	f := cmd.Flags()
	f.StringVar(&cfg.store.kind, "store", storeSQLite, "where objects live: sqlite (in --data-dir) or kubernetes (custom resources; install them with hvkube crds | kubectl apply -f -)")
	f.StringVar(&cfg.store.kubeconfig, "kubeconfig", "", "with --store kubernetes: the kubeconfig file (default KUBECONFIG, ~/.kube/config, or the pod's service account)")
	f.StringVar(&cfg.store.namespace, "namespace", "", "with --store kubernetes: the namespace of this install's objects (default the kubeconfig context's, else default)")
	f.StringVar(&cfg.dataDir, "data-dir", datadir.Default(), "directory for the database, the token and sandbox files; kept at mode 0700 (env HVKUBE_DATA_DIR)")
	f.BoolVar(&cfg.allowHostCommands, "allow-host-commands", false, "let custom agents run commands on this host (spec.task.in: host); Linux, run as root")
	f.StringVar(&cfg.hostCommandUser, "host-command-user", "", "the unprivileged account host commands run as (default nobody)")
	f.StringVar(&cfg.logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&cfg.imageDir, "image-dir", qemu.DefaultImageDir(), "where `make image` leaves guest images (templates name them in spec.qemu.image)")
	f.StringVar(&cfg.defaultTemplate, "default-template", "linux-desktop", "template for sandboxes that name no templateRef")
	f.StringArrayVar(&cfg.allowHostPaths, "allow-host-path", nil, "a host directory objects may name files under, besides --image-dir (repeatable)")
	f.StringVar(&cfg.nodeName, "node-name", node.DefaultName(), "this host's name in the status of the sandboxes and agents it runs")
	f.StringVar(&cfg.hypervDir, "hyperv-dir", "", "hyperv: where templates and sandbox VMs live (default DATA-DIR\\hyperv; a fast local disk)")
	f.StringVar(&cfg.hypervSwitch, "hyperv-switch", "Default Switch", "hyperv: the virtual switch sandboxes connect to")
	f.IntVar(&cfg.memoryLimitPercent, "memory-limit-percent", capacity.DefaultLimitPercent, "share of host memory the desktops may use, measured as they use it (reserves included); the rest stays free")
	f.IntVar(&cfg.runningReserveMB, "memory-running-reserve-mb", 0, "room kept for each running desktop to grow in, MiB; 0 learns it per template (the working set its desktops reach)")
	f.BoolVar(&cfg.noWarmClones, "no-warm-clones", false, "qemu: leave clones started on demand as cloned instead of readying them in the background: about half the memory each under TCG, but their first resume is slow there (docs/capacity.md)")
	f.IntVar(&cfg.readyAhead, "ready-ahead", node.DefaultReadyAhead, "qemu: the fewest idle desktops of each pool readied ahead of their claim (more when the pool was busier in the last 15 minutes); the others stay as cloned, about half the memory each under TCG, and their first resume is slower there; 0 readies none, -1 every clone (docs/capacity.md)")
	f.IntVar(&cfg.pressurePercent, "memory-pressure-percent", node.DefaultPressurePercent, "when less than this share of host memory is available, idle paused desktops of pools move to disk, least recently used first; -1 turns it off")
	f.StringVar(&cfg.credentialFile, "guest-credential-file", "", "hyperv: JSON file {\"user\", \"password\"} of the guest account PowerShell Direct logs on with (readable only by the server's account)")
}

// hostSetup checks the flags hostFlags added and returns the log, the
// policy of host commands and the roots host paths must lie under.
func hostSetup(cfg serveConfig) (*slog.Logger, *node.HostCommands, hostpath.Roots, error) {
	if cfg.pressurePercent < -1 || cfg.pressurePercent > 100 {
		return nil, nil, hostpath.Roots{}, fmt.Errorf("--memory-pressure-percent: %d is not between 0 and 100 (or -1, off)", cfg.pressurePercent)
	}
	if cfg.memoryLimitPercent < 1 || cfg.memoryLimitPercent > 100 {
		return nil, nil, hostpath.Roots{}, fmt.Errorf("--memory-limit-percent: %d is not between 1 and 100", cfg.memoryLimitPercent)
	}
	if cfg.runningReserveMB < 0 {
		return nil, nil, hostpath.Roots{}, fmt.Errorf("--memory-running-reserve-mb: %d is negative", cfg.runningReserveMB)
	}
	if cfg.readyAhead < -1 {
		return nil, nil, hostpath.Roots{}, fmt.Errorf("--ready-ahead: %d is not 0 or more (or -1, every clone)", cfg.readyAhead)
	}
	level, err := parseLevel(cfg.logLevel)
	if err != nil {
		return nil, nil, hostpath.Roots{}, err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	hostCommands, err := hostCommandPolicy(cfg.allowHostCommands, cfg.hostCommandUser, os.Geteuid(), cfg.dataDir)
	if err != nil {
		return nil, nil, hostpath.Roots{}, err
	}
	for _, p := range cfg.allowHostPaths {
		if !filepath.IsAbs(p) {
			return nil, nil, hostpath.Roots{}, fmt.Errorf("--allow-host-path %q: not an absolute path", p)
		}
	}
	roots, err := hostpath.NewRoots(append([]string{cfg.imageDir}, cfg.allowHostPaths...)...)
	if err != nil {
		return nil, nil, hostpath.Roots{}, err
	}
	return log, hostCommands, roots, nil
}

// mintTokens mints agents' tokens under key, in this process.
func mintTokens(key authtoken.Key) func(context.Context, *api.Agent, time.Duration) (string, error) {
	return func(_ context.Context, a *api.Agent, ttl time.Duration) (string, error) {
		return key.Mint(authtoken.ForAttempt(a, a.Status.Attempts), time.Now(), ttl), nil
	}
}

// newNode makes this host's node over be: agents' tokens come from
// tokens, and serverURL is the API's address they are given.
func newNode(cfg serveConfig, st store.Interface, be backend.Backend, tokens func(context.Context, *api.Agent, time.Duration) (string, error), serverURL string, hostCommands *node.HostCommands, roots hostpath.Roots, mx *metrics.Metrics, log *slog.Logger, more ...func(*node.Options)) *node.Node {
	opts := node.Options{Store: st, Backend: be, Name: cfg.nodeName, DefaultTemplate: cfg.defaultTemplate, Logger: log,
		DataDir: cfg.dataDir, ServerURL: serverURL,
		Tokens: tokens, HostCommands: hostCommands, AllowedRoots: roots,
		Pressure: node.Pressure{Percent: cfg.pressurePercent}, ReadyAhead: node.ReadyAheadFlag(cfg.readyAhead)}
	if mx != nil {
		opts.ObserveAcquire = mx.ObserveAcquire
	}
	for _, f := range more {
		f(&opts)
	}
	return node.New(opts)
}

// nodeIdentities checks a node agent's identity and names the node: one
// minted under key (hvkube node identity), or on Kubernetes its pod's
// service-account token (a TokenReview) of serviceAccount ("": the
// store's namespace's hvkube-node).
func nodeIdentities(key authtoken.Key, st store.Interface, serviceAccount string) func(context.Context, string) (string, error) {
	ks, _ := st.(*kube.Store)
	if serviceAccount == "" && ks != nil {
		serviceAccount = ks.Namespace() + ":hvkube-node"
	}
	return func(ctx context.Context, tok string) (string, error) {
		if authtoken.IsNodeIdentity(tok) {
			return key.VerifyNodeIdentity(tok, time.Now())
		}
		if ks == nil {
			return "", errors.New("not a node identity (hvkube node identity NAME)")
		}
		return ks.ReviewNodeToken(ctx, tok, serviceAccount)
	}
}

// loadKey reads the signing key: --key-file when given (it must exist and
// be private), else DATA-DIR/token.key, made on the first start.
func loadKey(cfg serveConfig) (authtoken.Key, error) {
	if cfg.keyFile == "" {
		// The key signs tokens and seals Secrets' values: a file others
		// can read is refused, not used.
		path := filepath.Join(cfg.dataDir, "token.key")
		if fi, err := os.Stat(path); err == nil {
			if err := checkSecretMode("the key file", path, fi); err != nil {
				return nil, err
			}
		}
		return authtoken.LoadOrCreate(path)
	}
	fi, err := os.Stat(cfg.keyFile)
	if err != nil {
		return nil, fmt.Errorf("--key-file: %w", err)
	}
	if err := checkSecretMode("--key-file", cfg.keyFile, fi); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(cfg.keyFile)
	if err != nil {
		return nil, fmt.Errorf("--key-file: %w", err)
	}
	if len(b) < 32 {
		return nil, fmt.Errorf("--key-file %s: %d bytes; a key has at least 32 (head -c 32 /dev/urandom > FILE)", cfg.keyFile, len(b))
	}
	return authtoken.Key(b), nil
}

// isLoopback reports whether addr only listens on the loopback interface.
func isLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("--addr %q: %w", addr, err)
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// openBackend picks the VM backend; nil means none.
func openBackend(ctx context.Context, cfg serveConfig, roots hostpath.Roots, log *slog.Logger) (backend.Backend, error) {
	switch cfg.backend {
	case "none":
		log.Warn("running without a VM backend: sandboxes stay Pending")
		return nil, nil
	case "hyperv":
		return openHyperV(ctx, cfg, roots, log)
	case "auto", "qemu":
		if cfg.backend == "auto" && runtime.GOOS == "windows" {
			be, err := openHyperV(ctx, cfg, roots, log)
			if err != nil && errors.Is(err, api.ErrUnavailable) {
				log.Warn("running without a VM backend", "err", err)
				return nil, nil
			}
			return be, err
		}
		be, err := qemu.New(ctx, qemu.Config{Dir: filepath.Join(cfg.dataDir, "qemu"), ImageDir: cfg.imageDir, AllowedRoots: roots, Logger: log,
			MemoryLimitPercent: cfg.memoryLimitPercent, RunningReserveMB: cfg.runningReserveMB, NoWarm: cfg.noWarmClones,
			WarmOnRequest: cfg.readyAhead >= 0})
		if err != nil && cfg.backend == "auto" && errors.Is(err, api.ErrUnavailable) {
			log.Warn("running without a VM backend", "err", err)
			return nil, nil
		}
		return be, err
	default:
		return nil, fmt.Errorf("--backend %q: want qemu, hyperv, none or auto", cfg.backend)
	}
}

// openHyperV opens the Hyper-V backend. It needs the guest account's
// credential file, which must not be readable by others.
func openHyperV(ctx context.Context, cfg serveConfig, roots hostpath.Roots, log *slog.Logger) (backend.Backend, error) {
	if cfg.credentialFile == "" {
		return nil, fmt.Errorf("--backend hyperv needs --guest-credential-file (JSON {\"user\": ..., \"password\": ...} of the guest account PowerShell Direct logs on with): %w", api.ErrUnavailable)
	}
	fi, err := os.Stat(cfg.credentialFile)
	if err != nil {
		return nil, fmt.Errorf("--guest-credential-file: %w", err)
	}
	if err := checkSecretMode("--guest-credential-file", cfg.credentialFile, fi); err != nil {
		return nil, err
	}
	dir := cfg.hypervDir
	if dir == "" {
		dir = filepath.Join(cfg.dataDir, "hyperv")
	}
	return hyperv.New(ctx, hyperv.Config{Dir: dir, Switch: cfg.hypervSwitch, CredentialFile: cfg.credentialFile, AllowedRoots: roots, Logger: log})
}

func serve(ctx context.Context, cfg serveConfig) error {
	log, hostCommands, roots, err := hostSetup(cfg)
	if err != nil {
		return err
	}
	// Before anything else: no process the server starts may see it.
	envToken, err := secretenv.Take("HVKUBE_TOKEN")
	if err != nil {
		return fmt.Errorf("%w: give the token in --token-file instead", err)
	}
	if err := checkTokenFlags(cfg, envToken); err != nil {
		return err
	}
	loop, err := isLoopback(cfg.addr)
	if err != nil {
		return err
	}
	if !loop && cfg.insecureNoToken {
		return fmt.Errorf("refusing to listen on %s without a token: drop --insecure-no-token, or listen on 127.0.0.1", cfg.addr)
	}
	allowed := cfg.allowedHosts
	if cfg.tlsAddr != "" {
		// The names the certificate is for are names the server goes by.
		allowed = append(slices.Clone(allowed), tlsNames(cfg)...)
	}
	hosts, err := server.NewHostPolicy(cfg.addr, allowed)
	if err != nil {
		return err
	}
	if cfg.shutdownGrace <= 0 {
		return fmt.Errorf("--shutdown-grace %s: must be positive", cfg.shutdownGrace)
	}
	if cfg.store.kind == storeKubernetes && cfg.nodeGrace < node.DefaultFenceAfter+node.DefaultStatusInterval {
		return fmt.Errorf("--node-grace %s: must be more than the nodes' fence time plus their status interval (%s)", cfg.nodeGrace, node.DefaultFenceAfter+node.DefaultStatusInterval)
	}
	if cfg.leaderLease < 3*time.Second {
		return fmt.Errorf("--leader-lease-duration %s: must be at least 3s", cfg.leaderLease)
	}

	if err := privateDataDir(cfg.dataDir, log); err != nil {
		return err
	}
	if cfg.stopDesktops {
		unlock, err := lockDataDir(cfg)
		if err != nil {
			return err
		}
		defer unlock()
		be, err := openBackend(ctx, cfg, roots, log)
		if err != nil {
			return err
		}
		if be == nil {
			return errors.New("--stop-desktops: no VM backend on this host")
		}
		defer be.Close()
		return stopDesktops(ctx, os.Stderr, be)
	}
	st, closeStore, err := openStore(ctx, cfg.store, cfg.dataDir, "hvkube-server", log)
	if err != nil {
		return err
	}
	defer closeStore()
	// After the store, whose errors say more of a data directory that
	// cannot be written.
	unlock, err := lockDataDir(cfg)
	if err != nil {
		return err
	}
	defer unlock()
	tok, err := resolveToken(cfg, envToken)
	if err != nil {
		return err
	}
	token := tok.token
	logToken(log, tok)
	if hostCommands != nil {
		if err := checkNotOwnedBy(hostCommands.User, cfg.dataDir, cfg.tokenFile); err != nil {
			return err
		}
	}

	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	key, err := loadKey(cfg)
	if err != nil {
		return err
	}
	sealer, err := secrets.NewSealer(key.SecretSeed())
	if err != nil {
		return err
	}
	mx := metrics.New(st)
	if ks, ok := st.(*kube.Store); ok {
		mx.CountEventDrops(ks.EventDrops)
	}
	opts := server.Options{Store: st, Logger: log, Token: token, Version: version, Hosts: hosts, AllowedRoots: roots, ShutdownGrace: cfg.shutdownGrace, ScopedKey: key, Metrics: mx,
		Webhook: cfg.tlsAddr != "" && cfg.store.kind == storeKubernetes, Sealer: sealer}
	be, err := openBackend(ctx, cfg, roots, log)
	if err != nil {
		return err
	}
	if be != nil {
		defer be.Close()
		// Said last before the backend closes, once the node has stopped.
		defer sayDesktopsLeft(ctx, os.Stderr, be, cfg.dataDir, log)
	}
	// On the way out the controllers stop and their workers return, then
	// the node's agent attempts end, before the backend and the store
	// close (deferred calls run in reverse).
	mgr := reconcile.NewManager(st, log, 0)
	mgr.Observe(mx.ObserveReconcile)
	ca, err := nodeca.New(key.NodeCASeed())
	if err != nil {
		return err
	}
	// Routing and the scope checks of agents' tokens read the watch
	// caches of every replica: an input, a screenshot or an exec costs
	// the store nothing.
	cached := watchCaches(mgr, api.KindAgent, api.KindSandbox, api.KindNode)
	opts.Cached = cached
	ro := nodeapi.RouterOptions{Store: st, Signer: key.NodeSigner(), CA: ca, Cached: cached}
	// With SQLite this process holds the one node and the controllers: the
	// node lives and dies with them, so it never fences itself and no
	// controller marks it lost.
	lone := cfg.store.kind != storeKubernetes
	if be != nil {
		nd := newNode(cfg, st, be, mintTokens(key), "http://"+ln.Addr().String(), hostCommands, roots, mx, log, func(o *node.Options) {
			if lone {
				o.FenceAfter = -1
			}
			o.Env = sealer.EnvFor(st.Get)
		})
		if err := nd.Start(ctx); err != nil {
			return err
		}
		defer nd.Stop()
		nd.Register(mgr)
		ro.Local, ro.LocalName = nd, nd.Name()
		opts.Sandboxes, opts.Actions, opts.Agents = nd, nd.Actions(), nd
		opts.Backend = server.BackendInfo{Name: be.Name(), Node: nd.Name()}
		if q, ok := be.(*qemu.Backend); ok {
			opts.Backend.Accelerator = func() (string, string) { return q.Accel(), q.AccelReason() }
		}
	}
	// Sandboxes on nodes of their own (hvkube node) are reached through
	// their agents. With SQLite there are none: the server's own node
	// serves every sandbox, as it always has.
	if !lone {
		r := nodeapi.NewRouter(ro)
		opts.Sandboxes, opts.Actions, opts.Agents = r, display.NewActions(r), r
		opts.NodeIdentity = nodeIdentities(key, st, cfg.nodeServiceAccount)
	}
	defer mgr.Stop()
	co := controller.Options{NodeGrace: cfg.nodeGrace,
		Display: controller.DisplayConfig{ServerURL: gateway.LoopbackURL(ln.Addr()), HostAddress: gateway.HostAddress(cfg.addr), TokenSet: token != ""}}
	if lone {
		co.NodeGrace = -1
	}
	ks, elect := st.(*kube.Store)
	elect = elect && cfg.leaderElect
	if !elect {
		controller.Register(mgr, st, log, co)
	}
	opts.Ready = mgr.Ready
	srv := server.New(opts)
	// DisplayServices with ports get listeners of their own, reached by
	// any name of this host.
	displayHosts, err := server.NewHostPolicy("0.0.0.0:0", cfg.allowedHosts)
	if err != nil {
		return err
	}
	lst := gateway.NewListeners(gateway.ListenerOptions{Store: st, TokenSet: token != "", Logger: log,
		Handler: func(ds string) http.Handler { return srv.DisplayHandler(ds, displayHosts) }})
	lst.Register(mgr)
	defer lst.Close()
	if err := mgr.Start(ctx); err != nil {
		return err
	}
	serveCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	if elect {
		// The cluster controllers run in the replica that holds the
		// Lease; the API, the dashboard and MCP in every replica.
		led := make(chan struct{})
		go func() {
			defer close(led)
			err := ks.Lead(serveCtx, kube.LeaderOptions{Lease: controllersLease, Identity: leaderIdentity(cfg), LeaseDuration: cfg.leaderLease,
				RenewDeadline: cfg.leaderLease * 2 / 3, RetryPeriod: cfg.leaderLease / 7},
				func(lctx context.Context) { runControllers(lctx, st, log, mx, co) })
			if serveCtx.Err() == nil {
				stop(fmt.Errorf("%w: the cluster controllers stopped; exiting so that a fresh start campaigns again", err))
			}
		}()
		defer func() { stop(nil); <-led }()
	}
	if hostCommands != nil {
		log.Warn("custom agents may run commands on this host (--allow-host-commands)", "user", hostCommands.User.String(), "workRoot", hostCommands.WorkRoot)
	}
	var more []net.Listener
	if cfg.tlsAddr != "" {
		tln, err := tlsListener(cfg, key, log)
		if err != nil {
			return err
		}
		defer tln.Close()
		more = append(more, tln)
	}
	log.Info("hvkube server listening", "addr", ln.Addr().String(), "dataDir", cfg.dataDir, "auth", token != "", "hostPaths", roots.String(), "version", version)
	if err := srv.Serve(serveCtx, ln, more...); err != nil {
		return err
	}
	if cause := context.Cause(serveCtx); ctx.Err() == nil && cause != nil {
		return cause
	}
	log.Info("stopped")
	return nil
}

// watchCaches keeps m's watch caches of kinds and reads an object from
// them.
func watchCaches(m *reconcile.Manager, kinds ...string) func(kind, name string) (api.Object, bool) {
	caches := map[string]*reconcile.Cache{}
	for _, k := range kinds {
		caches[k] = m.Cache(k)
	}
	return func(kind, name string) (api.Object, bool) {
		if c := caches[kind]; c != nil {
			return c.Get(name)
		}
		return nil, false
	}
}

// controllersLease is the Lease the replicas of hvkube serve campaign for.
const controllersLease = "hvkube-controllers"

// leaderIdentity names this replica in the Lease: its host (a pod's name)
// and a random part, so that a restarted replica is a new holder.
func leaderIdentity(cfg serveConfig) string {
	if cfg.leaderElectID != "" {
		return cfg.leaderElectID
	}
	h, _ := os.Hostname()
	b := make([]byte, 4)
	rand.Read(b)
	return fmt.Sprintf("%s-%x", h, b)
}

// runControllers runs the cluster controllers until ctx ends.
func runControllers(ctx context.Context, st store.API, log *slog.Logger, mx *metrics.Metrics, co controller.Options) {
	m := reconcile.NewManager(st, log, 0)
	m.Observe(mx.ObserveReconcile)
	controller.Register(m, st, log, co)
	if err := m.Start(ctx); err != nil {
		log.Error("cluster controllers", "err", err)
		return
	}
	<-ctx.Done()
	m.Stop()
}

// tlsListener listens on --tls-addr over TLS, with a certificate for
// --tls-names signed by the API servers' authority (derived from key: the
// same on every replica; hvkube ca prints it), made again at half its
// life.
func tlsListener(cfg serveConfig, key authtoken.Key, log *slog.Logger) (net.Listener, error) {
	names := tlsNames(cfg)
	ca, err := nodeca.New(key.APICASeed())
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var cert *tls.Certificate
	get := func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		if cert == nil || now.After(cert.Leaf.NotBefore.Add(cert.Leaf.NotAfter.Sub(cert.Leaf.NotBefore)/2)) {
			c, err := ca.Issue(names, now)
			if err != nil {
				return nil, err
			}
			cert = c
		}
		return cert, nil
	}
	if _, err := get(nil); err != nil {
		return nil, fmt.Errorf("--tls-names: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.tlsAddr)
	if err != nil {
		return nil, fmt.Errorf("--tls-addr: %w", err)
	}
	log.Info("hvkube server listening over TLS", "addr", ln.Addr().String(), "names", names, "webhook", cfg.store.kind == storeKubernetes)
	return tls.NewListener(ln, &tls.Config{GetCertificate: get, MinVersion: tls.VersionTLS12}), nil
}

// tlsNames are the names of the TLS certificate: --tls-names, else the
// Service's.
func tlsNames(cfg serveConfig) []string {
	if len(cfg.tlsNames) > 0 {
		return cfg.tlsNames
	}
	return serviceNames(orDefaultNS(cfg.store.namespace))
}

// serviceNames are the names of the Service hvkube (deploy/controller.yaml)
// in namespace ns.
func serviceNames(ns string) []string {
	return []string{"hvkube", "hvkube." + ns, "hvkube." + ns + ".svc", "hvkube." + ns + ".svc.cluster.local"}
}

func orDefaultNS(ns string) string {
	if ns == "" {
		return "default"
	}
	return ns
}
