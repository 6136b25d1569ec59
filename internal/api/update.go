package api

import (
	"encoding/json"
	"reflect"
)

// ValidateUpdate checks a change of an object's spec from old (as stored)
// to next against what old's state allows, whoever asks: an agent that
// has started (scheduled, running, or with an attempt behind it) keeps
// what it runs — its type, task, completion and sandbox selection. A new
// spec is a new agent. The error is an ErrConflict naming the field.
func ValidateUpdate(old, next Object) error {
	oa, ok := old.(*Agent)
	na, ok2 := next.(*Agent)
	if !ok || !ok2 || !AgentStarted(oa) {
		return nil
	}
	for _, f := range []struct {
		field    string
		old, new any
	}{
		{"spec.type", oa.Spec.Type, na.Spec.Type},
		{"spec.task", oa.Spec.Task, na.Spec.Task},
		{"spec.completion", oa.Spec.Completion, na.Spec.Completion},
		{"spec.sandboxSelector", oa.Spec.SandboxSelector, na.Spec.SandboxSelector},
		{"spec.sandboxName", oa.Spec.SandboxName, na.Spec.SandboxName},
	} {
		if !sameJSON(f.old, f.new) {
			return Conflict(f.field, "agent %s has started (%s, attempt %d): what it runs cannot change; delete it and create a new agent", oa.Metadata.Name, phaseOrPending(oa.Status.Phase), oa.Status.Attempts)
		}
	}
	return nil
}

// AgentStarted reports whether an agent has been bound to a sandbox or run
// an attempt.
func AgentStarted(a *Agent) bool {
	return (a.Status.Phase != "" && a.Status.Phase != AgentPending) || a.Status.Attempts > 0
}

func phaseOrPending(p string) string {
	if p == "" {
		return AgentPending
	}
	return p
}

// sameJSON reports whether a and b encode alike (as the store compares
// specs).
func sameJSON(a, b any) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	if err1 != nil || err2 != nil {
		return reflect.DeepEqual(a, b)
	}
	return string(ja) == string(jb)
}
