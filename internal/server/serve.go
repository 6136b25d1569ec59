package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// Serve answers requests on ln, and on each of more (a TLS listener: see
// Handler for what answers only there), until ctx ends, then shuts down: it stops
// accepting, ends open watches, and waits up to Options.ShutdownGrace for
// requests in flight; connections still open after that (a client sending
// its body slowly, a long exec) are closed. A shutdown that had to close
// connections is still a clean stop: Serve returns nil.
func (s *Server) Serve(ctx context.Context, ln net.Listener, more ...net.Listener) error {
	// Watches stream until their request context ends; cancelling the
	// base context on shutdown ends them.
	baseCtx, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	defer s.recordings.Close()
	hs := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: s.opts.ReadHeaderTimeout,
		IdleTimeout:       s.opts.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
	}
	hs.RegisterOnShutdown(cancelBase)
	lns := append([]net.Listener{ln}, more...)
	errc := make(chan error, len(lns))
	for _, l := range lns {
		go func() { errc <- hs.Serve(l) }()
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.log.Info("shutting down", "grace", s.opts.ShutdownGrace.String())
	shutCtx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownGrace)
	defer cancel()
	if err := hs.Shutdown(shutCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.log.Warn("closing connections still open after the grace period", "grace", s.opts.ShutdownGrace.String())
		hs.Close()
	}
	// Serve has returned ErrServerClosed by now.
	select {
	case <-errc:
	case <-time.After(time.Second):
	}
	return nil
}
