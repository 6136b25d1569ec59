package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/authtoken"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/backend/hyperv"
	"github.com/hvkube/hvkube/internal/backend/qemu"
	"github.com/hvkube/hvkube/internal/controller"
	"github.com/hvkube/hvkube/internal/gateway"
	"github.com/hvkube/hvkube/internal/hostpath"
	"github.com/hvkube/hvkube/internal/metrics"
	"github.com/hvkube/hvkube/internal/node"
	"github.com/hvkube/hvkube/internal/server"
	"github.com/hvkube/hvkube/internal/store"
)

type serveConfig struct {
	addr            string
	dataDir         string
	tokenFile       string
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
}

func newServeCmd() *cobra.Command {
	var cfg serveConfig
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the hvkube server",
		Long: `Run the hvkube server: the REST API, the dashboard (open the server's
address in a browser), the live view (VNC over WebSocket), MCP at /mcp,
Prometheus metrics at /metrics, the store and the controllers.

The server listens on 127.0.0.1:8080 by default. Listening on any other
address needs a token (--token-file or HVKUBE_TOKEN); with a token set, every
API call must carry "Authorization: Bearer TOKEN". A token file must not be
readable by group or others (chmod 600).

Pages of other sites cannot use the server: requests must name it in their
Host header (127.0.0.1, localhost, the --addr host, or an --allowed-hosts
name), and requests that change state from a page of another origin are
refused. The dashboard's page asks for the token when one is set.

Objects may name host files (template image files, volume host folders) only
under --image-dir and the --allow-host-path directories.

On Windows, --backend hyperv (the default there when Hyper-V answers) runs
Windows desktops on Hyper-V: VM files under --hyperv-dir, sandboxes on
--hyperv-switch, guest programs and files through PowerShell Direct with
the account in --guest-credential-file. See docs/windows.md.

State lives in a SQLite database in --data-dir (default: ` + defaultDataDir() + `).
SIGINT or SIGTERM shuts the server down gracefully.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return serve(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.addr, "addr", "127.0.0.1:8080", "address to listen on")
	f.StringVar(&cfg.dataDir, "data-dir", defaultDataDir(), "directory for the database and sandbox files (env HVKUBE_DATA_DIR)")
	f.StringVar(&cfg.tokenFile, "token-file", "", "file holding the API bearer token (or set HVKUBE_TOKEN)")
	f.StringVar(&cfg.logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&cfg.backend, "backend", "auto", "VM backend: qemu, hyperv, none, or auto (hyperv on Windows, qemu elsewhere, when installed)")
	f.StringVar(&cfg.imageDir, "image-dir", qemu.DefaultImageDir(), "where `make image` leaves guest images (templates name them in spec.qemu.image)")
	f.StringVar(&cfg.defaultTemplate, "default-template", "linux-desktop", "template for sandboxes that name no templateRef")
	f.StringSliceVar(&cfg.allowedHosts, "allowed-hosts", nil, "more names clients may reach the server by (Host header), comma-separated or repeated")
	f.StringArrayVar(&cfg.allowHostPaths, "allow-host-path", nil, "a host directory objects may name files under, besides --image-dir (repeatable)")
	f.StringVar(&cfg.nodeName, "node-name", node.DefaultName(), "this host's name in the status of the sandboxes and agents it runs")
	f.StringVar(&cfg.hypervDir, "hyperv-dir", "", "hyperv: where templates and sandbox VMs live (default DATA-DIR\\hyperv; a fast local disk)")
	f.StringVar(&cfg.hypervSwitch, "hyperv-switch", "Default Switch", "hyperv: the virtual switch sandboxes connect to")
	f.StringVar(&cfg.credentialFile, "guest-credential-file", "", "hyperv: JSON file {\"user\", \"password\"} of the guest account PowerShell Direct logs on with (readable only by the server's account)")
	f.DurationVar(&cfg.shutdownGrace, "shutdown-grace", server.DefaultShutdownGrace, "how long a shutdown waits for requests in flight before closing their connections")
	return cmd
}

// defaultDataDir is HVKUBE_DATA_DIR, else the user's data directory.
func defaultDataDir() string {
	if d := os.Getenv("HVKUBE_DATA_DIR"); d != "" {
		return d
	}
	if runtime.GOOS == "windows" {
		if d := os.Getenv("LOCALAPPDATA"); d != "" {
			return filepath.Join(d, "hvkube")
		}
	}
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "hvkube")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "share", "hvkube")
	}
	return "hvkube-data"
}

// loadToken reads the API token from tokenFile, or else HVKUBE_TOKEN. The
// variable is then removed from the environment, so that no child process
// (QEMU, qemu-img) inherits it.
func loadToken(tokenFile string) (string, error) {
	env := strings.TrimSpace(os.Getenv("HVKUBE_TOKEN"))
	os.Unsetenv("HVKUBE_TOKEN")
	if tokenFile == "" {
		return env, nil
	}
	f, err := os.Open(tokenFile)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	if err := checkSecretMode("--token-file", tokenFile, fi); err != nil {
		return "", err
	}
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("--token-file: %s is empty", tokenFile)
	}
	return t, nil
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
		be, err := qemu.New(ctx, qemu.Config{Dir: filepath.Join(cfg.dataDir, "qemu"), ImageDir: cfg.imageDir, AllowedRoots: roots, Logger: log})
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
	level, err := parseLevel(cfg.logLevel)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	token, err := loadToken(cfg.tokenFile)
	if err != nil {
		return err
	}
	loop, err := isLoopback(cfg.addr)
	if err != nil {
		return err
	}
	if !loop && token == "" {
		return fmt.Errorf("refusing to listen on %s without a token: set --token-file or HVKUBE_TOKEN, or listen on 127.0.0.1", cfg.addr)
	}
	hosts, err := server.NewHostPolicy(cfg.addr, cfg.allowedHosts)
	if err != nil {
		return err
	}
	for _, p := range cfg.allowHostPaths {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("--allow-host-path %q: not an absolute path", p)
		}
	}
	roots, err := hostpath.NewRoots(append([]string{cfg.imageDir}, cfg.allowHostPaths...)...)
	if err != nil {
		return err
	}
	if cfg.shutdownGrace <= 0 {
		return fmt.Errorf("--shutdown-grace %s: must be positive", cfg.shutdownGrace)
	}

	st, err := store.Open(ctx, cfg.dataDir, store.Options{Logger: log})
	if err != nil {
		return err
	}
	defer st.Close()

	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	key, err := authtoken.LoadOrCreate(filepath.Join(cfg.dataDir, "token.key"))
	if err != nil {
		return err
	}
	mx := metrics.New(st)
	opts := server.Options{Store: st, Logger: log, Token: token, Version: version, Hosts: hosts, AllowedRoots: roots, ShutdownGrace: cfg.shutdownGrace, ScopedKey: key, Metrics: mx}
	be, err := openBackend(ctx, cfg, roots, log)
	if err != nil {
		return err
	}
	if be != nil {
		defer be.Close()
	}
	// On the way out the controllers stop and their workers return, then
	// the node's agent attempts end, before the backend and the store
	// close (deferred calls run in reverse).
	mgr := controller.NewManager(st, log, 0)
	mgr.Observe(mx.ObserveReconcile)
	if be != nil {
		nd := node.New(node.Options{Store: st, Backend: be, Name: cfg.nodeName, DefaultTemplate: cfg.defaultTemplate, Logger: log,
			DataDir: cfg.dataDir, ServerURL: "http://" + ln.Addr().String(),
			Tokens: func(a *api.Agent, ttl time.Duration) string {
				return key.Mint(authtoken.ForAttempt(a, a.Status.Attempts), time.Now(), ttl)
			}, ObserveAcquire: mx.ObserveAcquire})
		if err := nd.Start(ctx); err != nil {
			return err
		}
		defer nd.Stop()
		nd.Register(mgr)
		opts.Sandboxes, opts.Actions, opts.Agents = nd, nd.Actions(), nd
		opts.Backend = server.BackendInfo{Name: be.Name(), Node: nd.Name()}
		if q, ok := be.(*qemu.Backend); ok {
			opts.Backend.Accel, opts.Backend.AccelReason = q.Accel(), q.AccelReason()
		}
	}
	defer mgr.Stop()
	controller.RegisterAll(mgr, st, log, nil, controller.DisplayConfig{ServerURL: gateway.LoopbackURL(ln.Addr()), HostAddress: gateway.HostAddress(cfg.addr), TokenSet: token != ""})
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
	log.Info("hvkube server listening", "addr", ln.Addr().String(), "dataDir", cfg.dataDir, "auth", token != "", "hostPaths", roots.String(), "version", version)
	if err := srv.Serve(ctx, ln); err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}
