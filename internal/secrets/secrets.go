// Package secrets seals the values of hvkube's Secrets for the store, and
// resolves what a desktop's session gets from a Sandbox's and an Agent's
// env and envFrom. Only the API servers hold the key: a node asks them for
// the variables of a claim it runs (server's node routes), and reads no
// Secret itself.
package secrets

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hvkube/hvkube/internal/api"
)

// sealPrefix marks the form of a sealed value, so a later form can be told
// apart.
const sealPrefix = "v1:"

// Sealer seals and opens Secrets' values with one AES-256-GCM key. Each
// sealing is bound to its Secret's name: a sealed value copied into
// another Secret does not open.
type Sealer struct {
	aead cipher.AEAD
}

// NewSealer returns a Sealer of the 32-byte key.
func NewSealer(key []byte) (*Sealer, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("a Secret key has 32 bytes, not %d", len(key))
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	g, err := cipher.NewGCM(b)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: g}, nil
}

// Seal returns values sealed for the Secret named name.
func (s *Sealer) Seal(name string, values map[string][]byte) (string, error) {
	plain, err := json.Marshal(values)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(plain)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	out := s.aead.Seal(nonce, nonce, plain, []byte(name))
	clear(plain)
	return sealPrefix + base64.StdEncoding.EncodeToString(out), nil
}

// ErrUnsealed is a sealed value that does not open with this key and name.
var ErrUnsealed = errors.New("the values do not open with this server's key (sealed by another key, or for another Secret)")

// Open returns the values sealed for the Secret named name.
func (s *Sealer) Open(name, sealed string) (map[string][]byte, error) {
	rest, ok := strings.CutPrefix(sealed, sealPrefix)
	if !ok {
		return nil, ErrUnsealed
	}
	b, err := base64.StdEncoding.DecodeString(rest)
	if err != nil || len(b) < s.aead.NonceSize() {
		return nil, ErrUnsealed
	}
	n := s.aead.NonceSize()
	plain, err := s.aead.Open(nil, b[:n], b[n:], []byte(name))
	if err != nil {
		return nil, ErrUnsealed
	}
	defer clear(plain)
	var out map[string][]byte
	if err := json.Unmarshal(plain, &out); err != nil {
		return nil, ErrUnsealed
	}
	return out, nil
}

// Prepare seals what sec carries in spec.data and spec.stringData (which
// wins for a key in both, as in Kubernetes) into spec.sealed and spec.keys,
// and clears them. A Secret that carries no values keeps prev's (an
// update that leaves them out); prev is nil on create.
func (s *Sealer) Prepare(sec, prev *api.Secret) error {
	if len(sec.Spec.Data) == 0 && len(sec.Spec.StringData) == 0 {
		if prev == nil || prev.Spec.Sealed == "" {
			return api.Invalid("spec.stringData", "required: the Secret's values (spec.stringData, or spec.data in base64)")
		}
		sec.Spec.Sealed, sec.Spec.Keys = prev.Spec.Sealed, slices.Clone(prev.Spec.Keys)
		return nil
	}
	values := make(map[string][]byte, len(sec.Spec.Data)+len(sec.Spec.StringData))
	for k, v := range sec.Spec.Data {
		values[k] = v
	}
	for k, v := range sec.Spec.StringData {
		values[k] = []byte(v)
	}
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	// The same values as stored keep their sealing, so that applying the
	// same manifest again changes nothing.
	if prev != nil && prev.Spec.Sealed != "" {
		if old, err := s.Open(prev.Metadata.Name, prev.Spec.Sealed); err == nil && sameValues(old, values) {
			sec.Spec = api.SecretSpec{Keys: keys, Sealed: prev.Spec.Sealed}
			return nil
		}
	}
	sealed, err := s.Seal(sec.Metadata.Name, values)
	if err != nil {
		return err
	}
	sec.Spec = api.SecretSpec{Keys: keys, Sealed: sealed}
	return nil
}

func sameValues(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || string(v) != string(w) {
			return false
		}
	}
	return true
}

// Redacted returns o as readers of the API get it: a Secret without its
// values, written or sealed (a copy: o may be a cache's), anything else
// as it is.
func Redacted(o api.Object) api.Object {
	sec, ok := o.(*api.Secret)
	if !ok {
		return o
	}
	c := *sec
	c.Spec = api.SecretSpec{Keys: sec.Spec.Keys}
	return &c
}

// Env is what a claim writes into a desktop's session: its variables
// (NAME=value, in the order given) and which of their values came from
// Secrets, for the node to mask wherever it would show them.
type Env struct {
	Vars   []string `json:"vars,omitempty"`
	Secret []string `json:"secret,omitempty"`
}

// Empty reports whether e sets nothing.
func (e Env) Empty() bool { return len(e.Vars) == 0 }

// Wants reports whether the sandbox or the agent name any variable.
func Wants(sb *api.Sandbox, a *api.Agent) bool {
	if sb != nil && (len(sb.Spec.Env) > 0 || len(sb.Spec.EnvFrom) > 0) {
		return true
	}
	return a != nil && (len(a.Spec.Env) > 0 || len(a.Spec.EnvFrom) > 0)
}

// Getter reads one object.
type Getter func(ctx context.Context, kind, name string) (api.Object, error)

// Resolve returns the session variables of a claim of sb by a (either may
// be nil): the sandbox's, then the agent's over them; in each, envFrom's
// keys first and env's entries over them, as Kubernetes orders a
// container's. A Secret or key that is not there is an error that names
// the field.
func (s *Sealer) Resolve(ctx context.Context, get Getter, sb *api.Sandbox, a *api.Agent) (Env, error) {
	r := resolver{s: s, get: get, opened: map[string]map[string][]byte{}, at: map[string]int{}}
	if sb != nil {
		if err := r.add(ctx, "sandbox "+sb.Metadata.Name+": spec", sb.Spec.Env, sb.Spec.EnvFrom); err != nil {
			return Env{}, err
		}
	}
	if a != nil {
		if err := r.add(ctx, "agent "+a.Metadata.Name+": spec", a.Spec.Env, a.Spec.EnvFrom); err != nil {
			return Env{}, err
		}
	}
	for k := range r.secret {
		r.env.Secret = append(r.env.Secret, k)
	}
	slices.Sort(r.env.Secret)
	return r.env, nil
}

type resolver struct {
	s      *Sealer
	get    Getter
	opened map[string]map[string][]byte
	env    Env
	at     map[string]int // a variable's index in env.Vars
	secret map[string]bool
}

func (r *resolver) set(name, value string, fromSecret bool) {
	kv := name + "=" + value
	if i, ok := r.at[name]; ok {
		r.env.Vars[i] = kv
	} else {
		r.at[name] = len(r.env.Vars)
		r.env.Vars = append(r.env.Vars, kv)
	}
	if fromSecret && value != "" {
		if r.secret == nil {
			r.secret = map[string]bool{}
		}
		r.secret[value] = true
	}
}

func (r *resolver) open(ctx context.Context, field, name string) (map[string][]byte, error) {
	if v, ok := r.opened[name]; ok {
		return v, nil
	}
	o, err := r.get(ctx, api.KindSecret, name)
	if errors.Is(err, api.ErrNotFound) {
		return nil, api.Invalid(field, "Secret %s does not exist", name)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: read Secret %s: %w", field, name, err)
	}
	sec, ok := o.(*api.Secret)
	if !ok {
		return nil, fmt.Errorf("%s: Secret %s is a %T", field, name, o)
	}
	v, err := r.s.Open(name, sec.Spec.Sealed)
	if err != nil {
		return nil, fmt.Errorf("%s: Secret %s: %w", field, name, err)
	}
	r.opened[name] = v
	return v, nil
}

func (r *resolver) add(ctx context.Context, p string, env []api.EnvVar, from []api.EnvFromSource) error {
	for i, f := range from {
		if f.SecretRef == nil {
			continue
		}
		field := fmt.Sprintf("%s.envFrom[%d].secretRef.name", p, i)
		v, err := r.open(ctx, field, f.SecretRef.Name)
		if err != nil {
			return err
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			r.set(f.Prefix+k, string(v[k]), true)
		}
	}
	for i, e := range env {
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			r.set(e.Name, e.Value, false)
			continue
		}
		ref := e.ValueFrom.SecretKeyRef
		field := fmt.Sprintf("%s.env[%d].valueFrom.secretKeyRef", p, i)
		v, err := r.open(ctx, field+".name", ref.Name)
		if err != nil {
			return err
		}
		val, ok := v[ref.Key]
		if !ok {
			return api.Invalid(field+".key", "Secret %s has no key %s", ref.Name, ref.Key)
		}
		r.set(e.Name, string(val), true)
	}
	return nil
}

// EnvFor returns Resolve over get: what a node in the same process as the
// key resolves its sandboxes' variables with.
func (s *Sealer) EnvFor(get Getter) func(ctx context.Context, sb *api.Sandbox, a *api.Agent) (Env, error) {
	return func(ctx context.Context, sb *api.Sandbox, a *api.Agent) (Env, error) {
		return s.Resolve(ctx, get, sb, a)
	}
}
