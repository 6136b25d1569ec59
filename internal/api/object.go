package api

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Object is any stored resource.
//
// +kubebuilder:object:generate=false
type Object interface {
	GetTypeMeta() *TypeMeta
	GetMeta() *ObjectMeta
	// GetSpec returns a pointer to the spec, for generation bookkeeping.
	GetSpec() any
	// GetStatus returns a pointer to the status.
	GetStatus() any
}

func (o *Template) GetTypeMeta() *TypeMeta { return &o.TypeMeta }
func (o *Template) GetMeta() *ObjectMeta   { return &o.Metadata }
func (o *Template) GetSpec() any           { return &o.Spec }
func (o *Template) GetStatus() any         { return &o.Status }

func (o *Sandbox) GetTypeMeta() *TypeMeta { return &o.TypeMeta }
func (o *Sandbox) GetMeta() *ObjectMeta   { return &o.Metadata }
func (o *Sandbox) GetSpec() any           { return &o.Spec }
func (o *Sandbox) GetStatus() any         { return &o.Status }

func (o *SandboxPool) GetTypeMeta() *TypeMeta { return &o.TypeMeta }
func (o *SandboxPool) GetMeta() *ObjectMeta   { return &o.Metadata }
func (o *SandboxPool) GetSpec() any           { return &o.Spec }
func (o *SandboxPool) GetStatus() any         { return &o.Status }

func (o *Agent) GetTypeMeta() *TypeMeta { return &o.TypeMeta }
func (o *Agent) GetMeta() *ObjectMeta   { return &o.Metadata }
func (o *Agent) GetSpec() any           { return &o.Spec }
func (o *Agent) GetStatus() any         { return &o.Status }

func (o *Node) GetTypeMeta() *TypeMeta           { return &o.TypeMeta }
func (o *Node) GetMeta() *ObjectMeta             { return &o.Metadata }
func (o *Node) GetSpec() any                     { return &o.Spec }
func (o *Node) GetStatus() any                   { return &o.Status }
func (o *DisplayService) GetTypeMeta() *TypeMeta { return &o.TypeMeta }
func (o *DisplayService) GetMeta() *ObjectMeta   { return &o.Metadata }
func (o *DisplayService) GetSpec() any           { return &o.Spec }
func (o *DisplayService) GetStatus() any         { return &o.Status }

func (o *Secret) GetTypeMeta() *TypeMeta { return &o.TypeMeta }
func (o *Secret) GetMeta() *ObjectMeta   { return &o.Metadata }
func (o *Secret) GetSpec() any           { return &o.Spec }
func (o *Secret) GetStatus() any         { return &o.Status }

func (o *Event) GetTypeMeta() *TypeMeta { return &o.TypeMeta }
func (o *Event) GetMeta() *ObjectMeta   { return &o.Metadata }
func (o *Event) GetSpec() any           { return nil }
func (o *Event) GetStatus() any         { return nil }

// OwnerOf returns the name of o's owner of the given kind, or "".
func OwnerOf(o Object, kind string) string {
	for _, r := range o.GetMeta().OwnerReferences {
		if r.Kind == kind {
			return r.Name
		}
	}
	return ""
}

// KindInfo names a kind the way users type it.
//
// +kubebuilder:object:generate=false
type KindInfo struct {
	Kind     string
	Plural   string
	Singular string
	Short    []string
	new      func() Object
}

// Kinds lists the stored kinds in the order the CLI shows them.
var Kinds = []KindInfo{
	{KindTemplate, "templates", "template", []string{"tpl"}, func() Object { return &Template{} }},
	{KindSandbox, "sandboxes", "sandbox", []string{"sb", "vm", "vms"}, func() Object { return &Sandbox{} }},
	{KindSandboxPool, "sandboxpools", "sandboxpool", []string{"pools", "pool", "sp"}, func() Object { return &SandboxPool{} }},
	{KindAgent, "agents", "agent", []string{"ag"}, func() Object { return &Agent{} }},
	{KindDisplayService, "displayservices", "displayservice", []string{"ds"}, func() Object { return &DisplayService{} }},
	{KindNode, "nodes", "node", []string{"no"}, func() Object { return &Node{} }},
	{KindSecret, "secrets", "secret", nil, func() Object { return &Secret{} }},
}

// EventKind names the audit log, which can be read and watched but not
// written through the API.
var EventKind = KindInfo{KindEvent, "events", "event", []string{"ev"}, func() Object { return &Event{} }}

// LookupKind resolves a kind by its Kind, plural, singular or short name
// (case-insensitive).
func LookupKind(name string) (KindInfo, bool) {
	n := strings.ToLower(name)
	for _, k := range append(Kinds[:len(Kinds):len(Kinds)], EventKind) {
		if n == strings.ToLower(k.Kind) || n == k.Plural || n == k.Singular {
			return k, true
		}
		for _, s := range k.Short {
			if n == s {
				return k, true
			}
		}
	}
	return KindInfo{}, false
}

// New returns an empty object of the kind with its TypeMeta set.
func New(kind string) (Object, error) {
	k, ok := LookupKind(kind)
	if !ok {
		return nil, fmt.Errorf("%w: unknown kind %q", ErrInvalid, kind)
	}
	o := k.new()
	*o.GetTypeMeta() = TypeMeta{APIVersion: Version, Kind: k.Kind}
	return o, nil
}

// CopySpec copies src's spec into dst (same kind).
func CopySpec(dst, src Object) {
	src = DeepCopy(src)
	reflect.ValueOf(dst.GetSpec()).Elem().Set(reflect.ValueOf(src.GetSpec()).Elem())
}

// CopyStatus copies src's status into dst (same kind).
func CopyStatus(dst, src Object) {
	src = DeepCopy(src)
	reflect.ValueOf(dst.GetStatus()).Elem().Set(reflect.ValueOf(src.GetStatus()).Elem())
}

// DeepCopy returns an independent copy of o, with the kind's generated
// DeepCopy (zz_generated.deepcopy.go).
func DeepCopy[T Object](o T) T {
	var c Object
	switch x := any(o).(type) {
	case *Template:
		c = x.DeepCopy()
	case *Sandbox:
		c = x.DeepCopy()
	case *SandboxPool:
		c = x.DeepCopy()
	case *Agent:
		c = x.DeepCopy()
	case *DisplayService:
		c = x.DeepCopy()
	case *Node:
		c = x.DeepCopy()
	case *Secret:
		c = x.DeepCopy()
	case *Event:
		c = x.DeepCopy()
	default:
		return jsonCopy(o)
	}
	return c.(T)
}

// jsonCopy copies o through its JSON, for an Object of no kind of this
// package.
func jsonCopy[T Object](o T) T {
	b, err := json.Marshal(o)
	if err != nil {
		panic(fmt.Sprintf("deep copy %T: %v", o, err))
	}
	c, err := New(o.GetTypeMeta().Kind)
	if err != nil {
		panic(fmt.Sprintf("deep copy %T: %v", o, err))
	}
	if err := json.Unmarshal(b, c); err != nil {
		panic(fmt.Sprintf("deep copy %T: %v", o, err))
	}
	return c.(T)
}

// IntOrString holds a number or a string, as in targetPort: 5900 or auto.
type IntOrString struct {
	IsString bool
	IntVal   int
	StrVal   string
}

// IsZero reports whether the value is unset.
func (v IntOrString) IsZero() bool { return !v.IsString && v.IntVal == 0 }

// String returns the value as text.
func (v IntOrString) String() string {
	if v.IsString {
		return v.StrVal
	}
	return strconv.Itoa(v.IntVal)
}

// MarshalJSON writes a number or a string.
func (v IntOrString) MarshalJSON() ([]byte, error) {
	if v.IsString {
		return json.Marshal(v.StrVal)
	}
	return json.Marshal(v.IntVal)
}

// UnmarshalJSON reads a number or a string.
func (v *IntOrString) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		v.IsString = true
		return json.Unmarshal(b, &v.StrVal)
	}
	v.IsString = false
	if err := json.Unmarshal(b, &v.IntVal); err != nil {
		return fmt.Errorf("expected an integer or a string")
	}
	return nil
}

// Condition statuses.
const (
	ConditionTrue    = "True"
	ConditionFalse   = "False"
	ConditionUnknown = "Unknown"
)

// SetCondition puts c into conds, replacing the condition of its type. The
// lastTransitionTime moves to now only when the status changes. It reports
// whether anything changed, so that a controller writes status only then.
func SetCondition(conds *[]Condition, c Condition, now time.Time) bool {
	for i := range *conds {
		old := &(*conds)[i]
		if old.Type != c.Type {
			continue
		}
		c.LastTransitionTime = old.LastTransitionTime
		if old.Status != c.Status {
			c.LastTransitionTime = now.UTC()
		}
		if *old == c {
			return false
		}
		*old = c
		return true
	}
	c.LastTransitionTime = now.UTC()
	*conds = append(*conds, c)
	return true
}

// FindCondition returns the condition of type typ, or nil.
func FindCondition(conds []Condition, typ string) *Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

// Finalizers hvkube puts on objects that own outside state.
const (
	FinalizerVM       = "hvkube.io/vm"
	FinalizerSnapshot = "hvkube.io/template-snapshot"
	// FinalizerSandboxes holds a pool until its sandboxes are gone.
	FinalizerSandboxes = "hvkube.io/sandboxes"
	// FinalizerRun holds an agent until its run has stopped and its
	// sandbox is released. The server sets it when the agent is created.
	FinalizerRun = "hvkube.io/agent-run"
)
