package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/secrets"
	"github.com/hvkube/hvkube/internal/store"
)

// A watch answers with the current objects as ADDED events, then every later
// change, one JSON object per line:
//
//	{"type":"ADDED","object":{...}}
//	{"type":"MODIFIED","object":{...}}
//	{"type":"DELETED","object":{...}}
//
// With "Accept: text/event-stream" the same events come as server-sent
// events (event: ADDED / data: {...}). A reader that falls too far behind
// gets the events buffered for it, then the stream ends, as it does when
// the server stops: the reader watches again from the last resourceVersion
// it received, which replays what it missed, or answers 410 Gone when that
// is too much or too old; then it lists and watches again. Any other
// failure of the watch ends the stream with
// {"type":"ERROR","object":{"error":...}}: list and watch again.
type streamWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	sse bool
}

func newStream(w http.ResponseWriter, r *http.Request) *streamWriter {
	sw := &streamWriter{w: w, rc: http.NewResponseController(w), sse: strings.Contains(r.Header.Get("Accept"), "text/event-stream")}
	if sw.sse {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
	} else {
		w.Header().Set("Content-Type", "application/json; stream=watch")
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	sw.rc.Flush()
	return sw
}

func (sw *streamWriter) send(typ string, obj any, flush bool) error {
	if o, ok := obj.(api.Object); ok {
		obj = secrets.Redacted(o) // a Secret's values never leave
	}
	line, err := json.Marshal(struct {
		Type   string `json:"type"`
		Object any    `json:"object"`
	}{typ, obj})
	if err != nil {
		return err
	}
	if sw.sse {
		_, err = fmt.Fprintf(sw.w, "event: %s\ndata: %s\n\n", typ, line)
	} else {
		line = append(line, '\n')
		_, err = sw.w.Write(line)
	}
	if err == nil && flush {
		err = sw.rc.Flush()
	}
	return err
}

// heartbeat keeps idle watches from being cut by proxies.
const heartbeat = 30 * time.Second

// watch streams changes of kind: with no rv, the current objects as ADDED
// first, then every change; with a resourceVersion, the changes after it.
func (s *Server) watch(w http.ResponseWriter, r *http.Request, kind string, sel api.Selector, rv string) {
	var items []api.Object
	var wt store.Watcher
	var err error
	if rv == "" {
		items, wt, err = s.opts.Store.ListAndWatch(r.Context(), kind, sel)
	} else {
		wt, err = s.opts.Store.WatchFrom(r.Context(), kind, sel, rv)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	sw := newStream(w, r)
	bookmark := r.URL.Query().Get("allowWatchBookmarks") == "true"
	for i, it := range items {
		if err := sw.send(store.Added, it, i == len(items)-1 && !bookmark); err != nil {
			return
		}
	}
	if bookmark {
		// The revision the listed objects were read at: a client that
		// reconnects resumes from it, not from the newest listed object.
		if err := sw.send(Bookmark, bookmarkObject(wt.From()), true); err != nil {
			return
		}
	}
	s.pump(r, sw, wt)
}

// Bookmark is the watch event type that carries only a resourceVersion:
// the stream has caught up to it.
const Bookmark = "BOOKMARK"

func bookmarkObject(rv string) any {
	return map[string]any{"metadata": map[string]string{"resourceVersion": rv}}
}

// watchEvents streams the audit log: the newest events first (f.Limit of
// them), or with a resourceVersion (an event's), every event after it;
// then each new one.
func (s *Server) watchEvents(w http.ResponseWriter, r *http.Request, f store.EventFilter, rv string) {
	_, wt, err := s.opts.Store.ListAndWatch(r.Context(), api.KindEvent, api.Selector{})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if rv != "" {
		f.After = rv
		f.Limit = 0
	}
	prior, err := s.opts.Store.ListEvents(r.Context(), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// The watch began before the list: what it brings that the list
	// already held is not sent twice. resourceVersions are compared for
	// equality only.
	sw := newStream(w, r)
	sent := make(map[string]bool, len(prior))
	for i, e := range prior {
		sw.send(store.Added, e, i == len(prior)-1)
		sent[e.Metadata.Name+"/"+e.Metadata.ResourceVersion] = true
	}
	s.pumpFiltered(r, sw, wt, func(o api.Object) bool {
		e := o.(*api.Event)
		if k := e.Metadata.Name + "/" + e.Metadata.ResourceVersion; sent[k] {
			delete(sent, k)
			return false // already sent with the listed events
		}
		return (f.Kind == "" || e.InvolvedObject.Kind == f.Kind) && (f.Name == "" || e.InvolvedObject.Name == f.Name)
	})
}

func (s *Server) pump(r *http.Request, sw *streamWriter, wt store.Watcher) {
	s.pumpFiltered(r, sw, wt, func(api.Object) bool { return true })
}

func (s *Server) pumpFiltered(r *http.Request, sw *streamWriter, wt store.Watcher, keep func(api.Object) bool) {
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
			var err error
			if sw.sse {
				_, err = fmt.Fprint(sw.w, ": keep-alive\n\n")
			} else {
				_, err = fmt.Fprint(sw.w, "\n")
			}
			if err != nil || sw.rc.Flush() != nil {
				return
			}
		case ev, ok := <-wt.Events():
			if !ok {
				// A watcher the store dropped for falling behind has
				// delivered all it buffered: the client resumes after
				// the last event it got.
				if err := wt.Err(); err != nil && !errors.Is(err, store.ErrWatchOverflow) {
					sw.send("ERROR", errorBody{Error: err.Error()}, true)
				}
				return
			}
			if !keep(ev.Object) {
				continue
			}
			if err := sw.send(ev.Type, ev.Object, len(wt.Events()) == 0); err != nil {
				return
			}
		}
	}
}
