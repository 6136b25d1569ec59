// Command deepcopygen writes internal/api/zz_generated.deepcopy.go: the
// DeepCopy and DeepCopyInto methods of the types of package api, with
// controller-tools' deepcopy generator.
//
// The kinds carry their own TypeMeta and ObjectMeta rather than
// apimachinery's, so they are not runtime.Objects: deepcopygen reads only
// the generator's enable markers (+kubebuilder:object:generate), never
// +kubebuilder:object:root, which asks for DeepCopyObject. The types hold
// time.Time, which the generator takes for a struct with a DeepCopyInto
// of its own; a time.Time is a value that is safe to copy as it is, so
// those calls are rewritten as plain assignments.
//
// Usage, from the module root: go run ./internal/api/deepcopygen
package main

import (
	"bytes"
	"errors"
	"fmt"
	"go/format"
	"go/types"
	"io"
	"os"
	"path/filepath"
	"regexp"

	"sigs.k8s.io/controller-tools/pkg/deepcopy"
	"sigs.k8s.io/controller-tools/pkg/genall"
	"sigs.k8s.io/controller-tools/pkg/loader"
	"sigs.k8s.io/controller-tools/pkg/markers"

	"github.com/hvkube/hvkube/internal/crd/apiload"
)

// File is where the methods go, in the api package's directory.
const File = "zz_generated.deepcopy.go"

func main() {
	b, err := Generate(".")
	if err == nil {
		err = os.WriteFile(filepath.Join("internal", "api", File), b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "deepcopygen:", err)
		os.Exit(1)
	}
}

// enable are the generator's markers that deepcopygen reads: generation
// on for the package, or off for one type.
var enable = []*markers.Definition{
	markers.Must(markers.MakeDefinition("kubebuilder:object:generate", markers.DescribesPackage, false)),
	markers.Must(markers.MakeDefinition("kubebuilder:object:generate", markers.DescribesType, false)),
}

// Generate returns the source of File; root is the module's root.
func Generate(root string) ([]byte, error) {
	reg := &markers.Registry{}
	if err := markers.RegisterAll(reg, enable...); err != nil {
		return nil, err
	}
	pkgs, err := apiload.Load(root)
	if err != nil {
		return nil, err
	}
	out := &captured{}
	ctx := &genall.GenerationContext{
		Collector:  &markers.Collector{Registry: reg},
		Roots:      pkgs,
		Checker:    &loader.TypeChecker{NodeFilters: []loader.NodeFilter{deepcopy.Generator{}.CheckFilter()}},
		OutputRule: out,
	}
	if err := (deepcopy.Generator{}).Generate(ctx); err != nil {
		return nil, err
	}
	if err := apiload.Errors(pkgs); err != nil {
		return nil, fmt.Errorf("generate deep copies: %w", err)
	}
	if out.buf.Len() == 0 {
		return nil, errors.New("no deep copies generated: is the package marked +kubebuilder:object:generate=true?")
	}
	return timeAsValue(out.buf.Bytes(), timeFields(pkgs[0].Types))
}

// captured is an output rule that keeps what is written in memory.
type captured struct{ buf bytes.Buffer }

// Open returns a writer into c.
func (c *captured) Open(*loader.Package, string) (io.WriteCloser, error) { return c, nil }

// Write appends to c's buffer.
func (c *captured) Write(p []byte) (int, error) { return c.buf.Write(p) }

// Close does nothing.
func (c *captured) Close() error { return nil }

// timeFields returns the names of the struct fields in pkg of type
// time.Time or *time.Time.
func timeFields(pkg *types.Package) map[string]bool {
	names := map[string]bool{}
	isTime := func(t types.Type) bool {
		n, ok := t.(*types.Named)
		return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == "time" && n.Obj().Name() == "Time"
	}
	for _, name := range pkg.Scope().Names() {
		st, ok := pkg.Scope().Lookup(name).Type().Underlying().(*types.Struct)
		if !ok {
			continue
		}
		for f := range st.Fields() {
			t := f.Type()
			if p, ok := t.(*types.Pointer); ok {
				t = p.Elem()
			}
			if isTime(t) {
				names[f.Name()] = true
			}
		}
	}
	return names
}

var (
	// valueCopy is the generator's copy of a struct-valued field.
	valueCopy = regexp.MustCompile(`(?m)^\s*in\.(\w+)\.DeepCopyInto\(&out\.(\w+)\)\n`)
	// pointerCopy is its copy of a pointer field's target, inside the
	// block that allocates it.
	pointerCopy = regexp.MustCompile(`(?m)^(\s*)in, out := &in\.(\w+), &out\.(\w+)\n\s*\*out = new\((\w+)\.Time\)\n\s*\(\*in\)\.DeepCopyInto\(\*out\)\n`)
)

// timeAsValue rewrites the generator's deep copies of the time.Time
// fields named in fields: the struct assignment that starts each
// DeepCopyInto has already copied a time.Time value, and a *time.Time is
// copied by allocating a new one with the same value.
func timeAsValue(src []byte, fields map[string]bool) ([]byte, error) {
	var bad []string
	src = valueCopy.ReplaceAllFunc(src, func(m []byte) []byte {
		sub := valueCopy.FindSubmatch(m)
		if !fields[string(sub[1])] {
			return m
		}
		return nil
	})
	src = pointerCopy.ReplaceAllFunc(src, func(m []byte) []byte {
		sub := pointerCopy.FindSubmatch(m)
		if !fields[string(sub[2])] {
			bad = append(bad, string(sub[2]))
			return m
		}
		return []byte(fmt.Sprintf("%[1]sin, out := &in.%[2]s, &out.%[2]s\n%[1]s*out = new(%[3]s.Time)\n%[1]s**out = **in\n", sub[1], sub[2], sub[4]))
	})
	if len(bad) > 0 {
		return nil, fmt.Errorf("*time.Time fields not found in the package: %v", bad)
	}
	return format.Source(src)
}
