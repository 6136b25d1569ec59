package crd

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
)

var update = flag.Bool("update", false, "write deploy/crds from the Go types")

// TestDeployCRDs: deploy/crds holds exactly what the Go types generate, so
// the CRDs a user installs match the API this hvkube serves.
func TestDeployCRDs(t *testing.T) {
	dir := filepath.Join("..", "..", "deploy", "crds")
	if *update {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range api.Kinds {
		c, err := For(k)
		if err != nil {
			t.Fatal(err)
		}
		want, err := YAML(c)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, FileName(k))
		if *update {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run: go test ./internal/crd -update)", err)
		}
		if string(got) != string(want) {
			t.Errorf("%s differs from what the Go types generate; run: go test ./internal/crd -update", path)
		}
	}
}
