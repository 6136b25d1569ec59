package secrets

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
)

func sealer(t *testing.T, b byte) *Sealer {
	t.Helper()
	key := make([]byte, 32)
	key[0] = b
	s, err := NewSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSealOpens(t *testing.T) {
	s := sealer(t, 1)
	sealed, err := s.Seal("api-keys", map[string][]byte{"TOKEN": []byte("s3cr3t-value")})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sealed, "s3cr3t") {
		t.Fatalf("sealed value shows the secret: %s", sealed)
	}
	got, err := s.Open("api-keys", sealed)
	if err != nil || string(got["TOKEN"]) != "s3cr3t-value" {
		t.Fatalf("Open = %q, %v", got, err)
	}
	for _, c := range []struct{ name, sealed string }{
		{"another-secret", sealed},                    // bound to the name
		{"api-keys", sealed[:len(sealed)-4] + "AAA="}, // changed
		{"api-keys", "plain text"},
		{"api-keys", ""},
	} {
		if _, err := s.Open(c.name, c.sealed); !errors.Is(err, ErrUnsealed) {
			t.Errorf("Open(%q, %.20q) = %v, want ErrUnsealed", c.name, c.sealed, err)
		}
	}
	if _, err := sealer(t, 2).Open("api-keys", sealed); !errors.Is(err, ErrUnsealed) {
		t.Errorf("another key opened it: %v", err)
	}
}

func TestPrepareKeepsValuesAndSealing(t *testing.T) {
	s := sealer(t, 1)
	sec := &api.Secret{Metadata: api.ObjectMeta{Name: "k"}, Spec: api.SecretSpec{
		Data: map[string][]byte{"A": []byte("from-data"), "B": []byte("b")}, StringData: map[string]string{"A": "from-string"}}}
	if err := s.Prepare(sec, nil); err != nil {
		t.Fatal(err)
	}
	if sec.Spec.Data != nil || sec.Spec.StringData != nil || strings.Join(sec.Spec.Keys, ",") != "A,B" {
		t.Fatalf("prepared spec = %+v", sec.Spec)
	}
	v, _ := s.Open("k", sec.Spec.Sealed)
	if string(v["A"]) != "from-string" {
		t.Errorf("A = %q: stringData wins over data", v["A"])
	}
	// The same values again keep the sealing (an apply changes nothing).
	again := &api.Secret{Metadata: api.ObjectMeta{Name: "k"}, Spec: api.SecretSpec{StringData: map[string]string{"A": "from-string", "B": "b"}}}
	if err := s.Prepare(again, sec); err != nil || again.Spec.Sealed != sec.Spec.Sealed {
		t.Errorf("same values sealed again: %v", err)
	}
	// No values keeps the stored ones; none stored is refused.
	keep := &api.Secret{Metadata: api.ObjectMeta{Name: "k"}}
	if err := s.Prepare(keep, sec); err != nil || keep.Spec.Sealed != sec.Spec.Sealed {
		t.Errorf("an update with no values: %v", err)
	}
	if err := s.Prepare(&api.Secret{Metadata: api.ObjectMeta{Name: "k"}}, nil); api.FieldOf(err) != "spec.stringData" {
		t.Errorf("a Secret with no values: %v", err)
	}
	if r := Redacted(sec).(*api.Secret); r.Spec.Sealed != "" || len(r.Spec.Keys) != 2 || sec.Spec.Sealed == "" {
		t.Errorf("Redacted = %+v (and the original must keep its values)", r.Spec)
	}
}

func TestResolve(t *testing.T) {
	s := sealer(t, 1)
	store := map[string]*api.Secret{}
	for name, v := range map[string]map[string]string{"db": {"USER": "ann", "PASS": "pw-db-1"}, "api": {"KEY": "k-123456"}} {
		sec := &api.Secret{Metadata: api.ObjectMeta{Name: name}, Spec: api.SecretSpec{StringData: v}}
		if err := s.Prepare(sec, nil); err != nil {
			t.Fatal(err)
		}
		store[name] = sec
	}
	get := func(_ context.Context, kind, name string) (api.Object, error) {
		if sec, ok := store[name]; ok && kind == api.KindSecret {
			return sec, nil
		}
		return nil, api.ErrNotFound
	}
	sb := &api.Sandbox{Metadata: api.ObjectMeta{Name: "sb"}, Spec: api.SandboxSpec{
		Env:     []api.EnvVar{{Name: "MODE", Value: "sandbox"}, {Name: "LANGUAGE", Value: "en"}},
		EnvFrom: []api.EnvFromSource{{Prefix: "DB_", SecretRef: &api.SecretRefSel{Name: "db"}}}}}
	a := &api.Agent{Metadata: api.ObjectMeta{Name: "ag"}, Spec: api.AgentSpec{
		Env: []api.EnvVar{{Name: "MODE", Value: "agent"},
			{Name: "API_KEY", ValueFrom: &api.EnvVarSource{SecretKeyRef: &api.SecretKeySelector{Name: "api", Key: "KEY"}}}}}}
	env, err := s.Resolve(context.Background(), get, sb, a)
	if err != nil {
		t.Fatal(err)
	}
	want := "DB_PASS=pw-db-1 DB_USER=ann MODE=agent LANGUAGE=en API_KEY=k-123456"
	if got := strings.Join(env.Vars, " "); got != want {
		t.Errorf("Vars = %s, want %s", got, want)
	}
	if got := strings.Join(env.Secret, " "); got != "ann k-123456 pw-db-1" {
		t.Errorf("Secret = %s", got)
	}
	for _, c := range []struct {
		a     *api.Agent
		field string
	}{
		{&api.Agent{Metadata: api.ObjectMeta{Name: "x"}, Spec: api.AgentSpec{Env: []api.EnvVar{{Name: "K", ValueFrom: &api.EnvVarSource{SecretKeyRef: &api.SecretKeySelector{Name: "api", Key: "NOPE"}}}}}},
			"agent x: spec.env[0].valueFrom.secretKeyRef.key"},
		{&api.Agent{Metadata: api.ObjectMeta{Name: "x"}, Spec: api.AgentSpec{EnvFrom: []api.EnvFromSource{{SecretRef: &api.SecretRefSel{Name: "gone"}}}}},
			"agent x: spec.envFrom[0].secretRef.name"},
	} {
		if _, err := s.Resolve(context.Background(), get, nil, c.a); api.FieldOf(err) != c.field {
			t.Errorf("Resolve: %v, want an error naming %s", err, c.field)
		}
	}
}
