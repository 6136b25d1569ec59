package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/browsertool"
)

// browserToolsetWait bounds a request of the browser toolset: its calls
// run one after the other, each within browsertool's own bound.
const browserToolsetWait = 10 * time.Minute

// browserToolset answers POST /sandboxes/{name}/browser: the tool_use
// blocks of Anthropic's browser toolset (one, or an array of a turn's),
// run in order on the sandbox's browser over its DevTools, answered with
// the tool_result blocks to send back (one, or an array). What the model
// got wrong in a call (a field out of range, a stale reference) is its
// result's error, with the field named, as the toolset expects; an
// envelope that is not a browser member's tool_use is a 400.
func (s *Server) browserToolset(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		s.failBody(w, r, err)
		return
	}
	body = bytes.TrimSpace(body)
	var calls []browsertool.Call
	single := len(body) > 0 && body[0] == '{'
	if single {
		var c browsertool.Call
		err = json.Unmarshal(body, &c)
		calls = []browsertool.Call{c}
	} else {
		err = json.Unmarshal(body, &calls)
	}
	if err != nil {
		s.fail(w, r, api.Invalid("", "not a tool_use block or an array of them: %v", err))
		return
	}
	if err := browsertool.CheckCalls(calls); err != nil {
		var fe *browsertool.FieldError
		if errors.As(err, &fe) {
			field := strings.TrimPrefix(fe.Field, "[0].")
			if !single {
				field = fe.Field
			}
			msg, _, _ := strings.Cut(err.Error(), ": field")
			err = api.Invalid(field, "%s", msg)
		}
		s.fail(w, r, err)
		return
	}
	name := r.PathValue("name")
	ep, err := (&serverDesktops{s: s}).Browser(r.Context(), name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), browserToolsetWait)
	defer cancel()
	res := s.browsers.Run(ctx, name, ep, calls)
	if single {
		writeJSON(w, http.StatusOK, res[0])
		return
	}
	writeJSON(w, http.StatusOK, res)
}
