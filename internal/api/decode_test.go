package api

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// decodeValid decodes, defaults and validates, as the server does.
func decodeValid(data string, opts DecodeOptions) ([]Object, error) {
	objs, err := Decode([]byte(data), opts)
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		Default(o)
		if err := Validate(o); err != nil {
			return nil, err
		}
	}
	return objs, nil
}

func TestSeedYAMLAppliesUnchanged(t *testing.T) {
	files, _ := filepath.Glob("testdata/seed/*.yaml")
	if len(files) != 4 {
		t.Fatalf("want the 4 seed files, got %v", files)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decodeValid(string(b), DecodeOptions{})
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if got := objs[0].GetTypeMeta().APIVersion; got != Version {
			t.Errorf("%s: apiVersion %q, want %q", f, got, Version)
		}
	}
}

func TestExamplesDecode(t *testing.T) {
	files, _ := filepath.Glob("../../examples/*.yaml")
	if len(files) < 5 {
		t.Fatalf("want at least 5 examples, got %v", files)
	}
	kinds := map[string]bool{}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		objs, err := decodeValid(string(b), DecodeOptions{})
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		for _, o := range objs {
			kinds[o.GetTypeMeta().Kind] = true
		}
	}
	for _, k := range Kinds {
		if !kinds[k.Kind] && k.Kind != KindNode { // nodes are not written by users
			t.Errorf("no example of %s", k.Kind)
		}
	}
}

func TestSeedSandboxFields(t *testing.T) {
	b, _ := os.ReadFile("testdata/seed/sandbox.yaml")
	objs, err := decodeValid(string(b), DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := objs[0].(*Sandbox)
	if got, want := s.Spec.Volumes[0].HostPath, `C:\workflows`; got != want {
		t.Errorf("hostPath %q, want %q", got, want)
	}
	if got, want := s.Spec.Startup[0].Args[1], `C:\Users\agent\workflows\init.ps1`; got != want {
		t.Errorf("startup arg %q, want %q", got, want)
	}
	if s.Spec.Display.Port != 5900 || s.Spec.Resources.MemoryMB != 4096 || !s.Spec.Resources.GPU {
		t.Errorf("spec: %+v", s.Spec)
	}
}

func TestDecodeForms(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		opts  DecodeOptions
		kinds string
	}{
		{"multi-document YAML", "apiVersion: hvkube/v1\nkind: Agent\nmetadata: {name: a}\nspec: {sandboxName: s}\n---\n---\napiVersion: hvkube/v1\nkind: SandboxPool\nmetadata: {name: p}\nspec: {replicas: 1, template: {spec: {}}}\n", DecodeOptions{}, "Agent,SandboxPool"},
		{"JSON object", `{"apiVersion":"hvkube/v1","kind":"Agent","metadata":{"name":"a"},"spec":{"sandboxName":"s"}}`, DecodeOptions{}, "Agent"},
		{"JSON array", `[{"apiVersion":"hvkube/v1","kind":"Agent","metadata":{"name":"a"},"spec":{"sandboxName":"s"}},{"apiVersion":"hcskube/v1","kind":"Agent","metadata":{"name":"b"},"spec":{"sandboxName":"s"}}]`, DecodeOptions{}, "Agent,Agent"},
		{"List", `{"apiVersion":"hvkube/v1","kind":"AgentList","items":[{"apiVersion":"hvkube/v1","kind":"Agent","metadata":{"name":"a"},"spec":{"sandboxName":"s"}}]}`, DecodeOptions{}, "Agent"},
		{"seed short agent form", `{"name":"book-flight-123","sandboxSelector":{"pool":"browser-workers"},"task":{"workflow":"book-flight","input":{"dest":"NYC"}}}`, DecodeOptions{AgentShortForm: true}, "Agent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := decodeValid(tt.in, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, o := range objs {
				kinds = append(kinds, o.GetTypeMeta().Kind)
			}
			if got := strings.Join(kinds, ","); got != tt.kinds {
				t.Fatalf("got %s, want %s", got, tt.kinds)
			}
		})
	}
}

func TestShortFormSelectsPool(t *testing.T) {
	objs, err := decodeValid(`{"name":"t1","sandboxSelector":{"pool":"web"},"task":{"workflow":"w"}}`, DecodeOptions{AgentShortForm: true})
	if err != nil {
		t.Fatal(err)
	}
	a := objs[0].(*Agent)
	if a.Metadata.Name != "t1" || a.Spec.SandboxSelector.MatchLabels["pool"] != "web" {
		t.Fatalf("got %+v", a)
	}
}

// TestBadInput checks that each bad document is rejected with an error that
// names the field.
func TestBadInput(t *testing.T) {
	const sb = "apiVersion: hvkube/v1\nkind: Sandbox\nmetadata:\n  name: ok\n"
	const pool = "apiVersion: hvkube/v1\nkind: SandboxPool\nmetadata:\n  name: ok\n"
	tests := []struct {
		name, in, field string
	}{
		{"not YAML", "\x00\x01{[", ""},
		{"scalar", "hello", ""},
		{"missing apiVersion", "kind: Sandbox\nmetadata: {name: a}\n", "apiVersion"},
		{"unknown apiVersion", "apiVersion: v2\nkind: Sandbox\nmetadata: {name: a}\n", "apiVersion"},
		{"unknown kind", "apiVersion: hvkube/v1\nkind: Pod\nmetadata: {name: a}\n", "kind"},
		{"unknown field", sb + "spec:\n  display:\n    resolutoin: 1x1\n", "spec.display.resolutoin"},
		{"wrong type", pool + "spec:\n  replicas: three\n  template: {spec: {}}\n", "spec.replicas"},
		{"float for int", pool + "spec:\n  replicas: 1.5\n  template: {spec: {}}\n", "spec.replicas"},
		{"name too long", "apiVersion: hvkube/v1\nkind: Sandbox\nmetadata:\n  name: " + strings.Repeat("a", 64) + "\n", "metadata.name"},
		{"name upper case", "apiVersion: hvkube/v1\nkind: Sandbox\nmetadata:\n  name: Desk\n", "metadata.name"},
		{"bad resolution", sb + "spec:\n  display:\n    resolution: big\n", "spec.display.resolution"},
		{"negative replicas", pool + "spec:\n  replicas: -1\n  template: {spec: {}}\n", "spec.replicas"},
		{"minReady > replicas", pool + "spec:\n  replicas: 1\n  minReady: 2\n  template: {spec: {}}\n", "spec.minReady"},
		{"relative host path", sb + "spec:\n  volumes:\n  - {name: v, hostPath: data, sandboxPath: /d}\n", "spec.volumes[0].hostPath"},
		{"dotdot host path", sb + "spec:\n  volumes:\n  - {name: v, hostPath: /srv/../etc, sandboxPath: /d}\n", "spec.volumes[0].hostPath"},
		{"bad label", sb + "  labels:\n    a: 'no spaces'\n", "metadata.labels.a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeValid(tt.in, DecodeOptions{})
			wantInvalid(t, err, tt.field)
		})
	}
}

func FuzzDecode(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/seed/*.yaml")
	for _, s := range seeds {
		b, _ := os.ReadFile(s)
		f.Add(b)
	}
	f.Add([]byte(`{"apiVersion":"hvkube/v1","kind":"Agent","metadata":{"name":"a"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := Decode(data, DecodeOptions{AgentShortForm: true})
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("decode error is not ErrInvalid: %v", err)
			}
			return
		}
		for _, o := range objs {
			Default(o)
			Validate(o) // must not panic
		}
	})
}

// wantInvalid fails t unless err is a validation error naming field.
func wantInvalid(t *testing.T, err error, field string) {
	t.Helper()
	if err == nil {
		t.Fatal("accepted")
	}
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("error %v is not ErrInvalid", err)
	}
	if got := FieldOf(err); got != field {
		t.Fatalf("field %q, want %q (error: %v)", got, field, err)
	}
}
