package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/crd"
)

// TestDeployCRDs: deploy/crds holds exactly what the Go types and their
// markers generate, so the CRDs a user installs (and the binary carries)
// match the API this hvkube serves.
func TestDeployCRDs(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	files, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(api.Kinds) {
		t.Fatalf("%d CRDs generated, want one per kind (%d)", len(files), len(api.Kinds))
	}
	for _, k := range api.Kinds {
		name := crd.FileName(k)
		got, err := os.ReadFile(filepath.Join(root, "deploy", "crds", name))
		if err != nil {
			t.Fatalf("%v (run: make crds)", err)
		}
		if !bytes.Equal(got, files[name]) {
			t.Errorf("deploy/crds/%s differs from what the Go types generate; run: make crds", name)
		}
	}
}
