package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hvkube/hvkube/internal/agentstate"
	"github.com/hvkube/hvkube/internal/api"
)

// Following a log (GET …/logs?follow=true) streams what the log holds,
// then what is added to it, as server-sent events (one "data:" per line,
// and a final "event: end" saying why it ended) when the client accepts
// text/event-stream, else as chunked text/plain. The server polls the log
// for growth. A follow ends when the client leaves, when the sandbox or
// agent is gone, when the agent has finished and its log is read to the
// end, or after MaxLogFollow.

// Bounds and pace of a follow.
const (
	MaxLogFollow    = time.Hour
	logPoll         = 250 * time.Millisecond
	logCheckEvery   = 4                       // polls between looks at the object
	logEndGrace     = 1500 * time.Millisecond // lines an attempt writes after it is recorded finished
	logReadChunk    = 32 << 10
	maxSSELineBytes = 64 << 10
)

// logSource is a log that may be followed.
type logSource struct {
	// open opens the log's current file; api.ErrNotFound while there is
	// none yet.
	open func(ctx context.Context) (io.ReadCloser, error)
	// state says which file is current (a new generation is read from its
	// start: an agent's next attempt, a sandbox's new VM), and whether
	// nothing more will be written. api.ErrNotFound once the object is
	// gone.
	state func(ctx context.Context) (gen string, ended bool, err error)
}

func wantsFollow(r *http.Request) (bool, error) {
	switch v := r.URL.Query().Get("follow"); v {
	case "", "false", "0":
		return false, nil
	case "true", "1":
		return true, nil
	default:
		return false, api.Invalid("follow", "%q: want true or false", v)
	}
}

// sandboxLogs answers GET /sandboxes/{name}/logs: the serial console.
func (s *Server) sandboxLogs(w http.ResponseWriter, r *http.Request) {
	follow, err := wantsFollow(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !follow {
		s.logs(w, r)
		return
	}
	name := r.PathValue("name")
	s.followLog(w, r, logSource{
		open: func(ctx context.Context) (io.ReadCloser, error) { return s.opts.Sandboxes.Logs(ctx, name) },
		state: func(ctx context.Context) (string, bool, error) {
			o, err := s.opts.Store.Get(ctx, api.KindSandbox, name)
			if err != nil {
				return "", false, err
			}
			sb := o.(*api.Sandbox)
			gen := sb.Status.BackendID
			if sb.Status.StartedAt != nil {
				gen += "@" + sb.Status.StartedAt.Format(time.RFC3339Nano)
			}
			return gen, false, nil
		},
	})
}

// agentLogs answers GET /agents/{name}/logs: the log of the agent's latest
// attempt.
func (s *Server) agentLogs(w http.ResponseWriter, r *http.Request) {
	follow, err := wantsFollow(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !follow {
		s.agentFile("agent.log")(w, r)
		return
	}
	name := r.PathValue("name")
	if _, err := s.opts.Store.Get(r.Context(), api.KindAgent, name); err != nil {
		s.fail(w, r, err)
		return
	}
	if s.opts.Agents == nil {
		writeError(w, http.StatusNotImplemented, errors.New("this server runs no agents (it has no VM backend)"))
		return
	}
	s.followLog(w, r, logSource{
		open: func(ctx context.Context) (io.ReadCloser, error) {
			return s.opts.Agents.AgentFile(ctx, name, "agent.log")
		},
		state: func(ctx context.Context) (string, bool, error) {
			o, err := s.opts.Store.Get(ctx, api.KindAgent, name)
			if err != nil {
				return "", false, err
			}
			a := o.(*api.Agent)
			return strconv.Itoa(a.Status.Attempts), agentstate.Finished(a), nil
		},
	})
}

// followLog streams src until it ends (see above).
func (s *Server) followLog(w http.ResponseWriter, r *http.Request, src logSource) {
	ctx, cancel := context.WithTimeout(r.Context(), MaxLogFollow)
	defer cancel()
	gen, ended, err := src.state(ctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rc, err := src.open(ctx)
	if err != nil && (ended || !errors.Is(err, api.ErrNotFound)) {
		s.fail(w, r, err)
		return
	}
	defer func() {
		if rc != nil {
			rc.Close()
		}
	}()
	out := newLogStream(w, r)
	var off int64
	buf := make([]byte, logReadChunk)
	drain := func() error {
		for rc != nil {
			n, err := rc.Read(buf)
			if n > 0 {
				if werr := out.write(buf[:n]); werr != nil {
					return werr
				}
				off += int64(n)
			}
			if err != nil || n == 0 {
				break
			}
		}
		return out.flush()
	}
	reopen := func() {
		if rc != nil {
			rc.Close()
		}
		rc, off = nil, 0
		if f, err := src.open(ctx); err == nil {
			rc = f
		}
	}
	var endAt time.Time // set once the source has ended: drain until then
	why := ""
	tick := time.NewTicker(logPoll)
	defer tick.Stop()
	if ended {
		endAt, why = time.Now(), "the agent has finished"
	}
	for polls := 1; ; polls++ {
		if drain() != nil {
			return
		}
		if !endAt.IsZero() && !time.Now().Before(endAt) {
			out.end(why)
			return
		}
		select {
		case <-ctx.Done():
			if r.Context().Err() == nil {
				out.end(fmt.Sprintf("followed for %s, the longest a follow lasts", MaxLogFollow))
			}
			return
		case <-tick.C:
		}
		if shrunk(rc, off) {
			reopen() // the file started over
		}
		if polls%logCheckEvery != 0 || !endAt.IsZero() {
			continue
		}
		g, e, err := src.state(ctx)
		switch {
		case errors.Is(err, api.ErrNotFound):
			endAt, why = time.Now(), "it was deleted"
			continue
		case err != nil:
			continue // the store will answer again
		}
		if g != gen {
			drain()
			gen = g
			reopen()
		} else if rc == nil {
			reopen()
		}
		if e {
			endAt, why = time.Now().Add(logEndGrace), "the agent has finished"
		}
	}
}

// shrunk reports whether the file behind rc is now shorter than what was
// read of it.
func shrunk(rc io.ReadCloser, off int64) bool {
	st, ok := rc.(interface{ Stat() (fs.FileInfo, error) })
	if !ok {
		return false
	}
	fi, err := st.Stat()
	return err == nil && fi.Size() < off
}

// logStream writes a followed log as text or as server-sent events.
type logStream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	sse     bool
	partial []byte // an SSE line not yet ended
	last    time.Time
}

func newLogStream(w http.ResponseWriter, r *http.Request) *logStream {
	ls := &logStream{w: w, rc: http.NewResponseController(w), sse: strings.Contains(r.Header.Get("Accept"), "text/event-stream"), last: time.Now()}
	if ls.sse {
		w.Header().Set("Content-Type", "text/event-stream")
	} else {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	}
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	ls.rc.Flush()
	return ls
}

func (ls *logStream) write(p []byte) error {
	ls.last = time.Now()
	if !ls.sse {
		_, err := ls.w.Write(p)
		return err
	}
	ls.partial = append(ls.partial, p...)
	for {
		i := strings.IndexByte(string(ls.partial), '\n')
		if i < 0 {
			break
		}
		if err := ls.event(ls.partial[:i]); err != nil {
			return err
		}
		ls.partial = ls.partial[i+1:]
	}
	if len(ls.partial) > maxSSELineBytes {
		err := ls.event(ls.partial)
		ls.partial = nil
		return err
	}
	return nil
}

func (ls *logStream) event(line []byte) error {
	l := strings.ReplaceAll(strings.TrimSuffix(string(line), "\r"), "\r", "")
	_, err := fmt.Fprintf(ls.w, "data: %s\n\n", l)
	return err
}

// flush sends what was written; an idle SSE stream gets a comment now and
// then, so that proxies keep it open.
func (ls *logStream) flush() error {
	if ls.sse && time.Since(ls.last) >= heartbeat {
		if _, err := fmt.Fprint(ls.w, ": keep-alive\n\n"); err != nil {
			return err
		}
		ls.last = time.Now()
	}
	return ls.rc.Flush()
}

// end says why the follow ended: an "end" event, or nothing for text.
func (ls *logStream) end(why string) {
	if !ls.sse {
		return
	}
	if len(ls.partial) > 0 {
		ls.event(ls.partial)
		ls.partial = nil
	}
	fmt.Fprintf(ls.w, "event: end\ndata: %s\n\n", why)
	ls.rc.Flush()
}
