package server

import (
	"net/http"
	"time"
)

// timed runs h and hands observe the time it took, when it answered 200.
func (s *Server) timed(h http.HandlerFunc, observe func(r *http.Request, d time.Duration)) http.HandlerFunc {
	if s.opts.Metrics == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		h(sw, r)
		if sw.code == 0 || sw.code == http.StatusOK {
			observe(r, time.Since(start))
		}
	}
}

// statusWriter remembers the status code written.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
