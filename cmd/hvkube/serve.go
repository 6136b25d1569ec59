package main

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/backend/qemu"
	"github.com/hvkube/hvkube/internal/controller"
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
}

func newServeCmd() *cobra.Command {
	var cfg serveConfig
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the hvkube server",
		Long: `Run the hvkube server: the REST API, the store and the controllers.

The server listens on 127.0.0.1:8080 by default. Listening on any other
address needs a token (--token-file or HVKUBE_TOKEN); with a token set, every
API call must carry "Authorization: Bearer TOKEN".

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
	f.StringVar(&cfg.backend, "backend", "auto", "VM backend: qemu, none, or auto (qemu when it is installed)")
	f.StringVar(&cfg.imageDir, "image-dir", qemu.DefaultImageDir(), "where `make image` leaves guest images (templates name them in spec.qemu.image)")
	f.StringVar(&cfg.defaultTemplate, "default-template", "linux-desktop", "template for sandboxes that name no templateRef")
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

func loadToken(tokenFile string) (string, error) {
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		t := strings.TrimSpace(string(b))
		if t == "" {
			return "", fmt.Errorf("--token-file: %s is empty", tokenFile)
		}
		return t, nil
	}
	return strings.TrimSpace(os.Getenv("HVKUBE_TOKEN")), nil
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
func openBackend(ctx context.Context, cfg serveConfig, log *slog.Logger) (backend.Backend, error) {
	switch cfg.backend {
	case "none":
		log.Warn("running without a VM backend: sandboxes stay Pending")
		return nil, nil
	case "qemu", "auto":
		be, err := qemu.New(ctx, qemu.Config{Dir: filepath.Join(cfg.dataDir, "qemu"), ImageDir: cfg.imageDir, Logger: log})
		if err != nil && cfg.backend == "auto" && errors.Is(err, api.ErrUnavailable) {
			log.Warn("running without a VM backend", "err", err)
			return nil, nil
		}
		return be, err
	default:
		return nil, fmt.Errorf("--backend %q: want qemu, none or auto", cfg.backend)
	}
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

	st, err := store.Open(ctx, cfg.dataDir, store.Options{Logger: log})
	if err != nil {
		return err
	}
	defer st.Close()

	opts := server.Options{Store: st, Logger: log, Token: token, Version: version}
	be, err := openBackend(ctx, cfg, log)
	if err != nil {
		return err
	}
	if be != nil {
		defer be.Close()
		mgr := controller.New(controller.Options{Store: st, Backend: be, DefaultTemplate: cfg.defaultTemplate, Logger: log})
		if err := mgr.Start(ctx); err != nil {
			return err
		}
		opts.Sandboxes = mgr
		opts.Ready = mgr.Ready
	}
	srv := server.New(opts)
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// Watches stream until their request context ends; cancelling the
	// base context on shutdown ends them.
	baseCtx, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	hs := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
	}
	hs.RegisterOnShutdown(cancelBase)
	log.Info("hvkube server listening", "addr", ln.Addr().String(), "dataDir", cfg.dataDir, "auth", token != "", "version", version)

	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	shutCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}
