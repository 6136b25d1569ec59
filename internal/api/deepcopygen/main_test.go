package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestDeepCopyUpToDate: the generated file is what the types give now.
func TestDeepCopyUpToDate(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	want, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, "internal", "api", File))
	if err != nil {
		t.Fatalf("%v (run: make deepcopy)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("internal/api/%s is out of date with the types: run make deepcopy", File)
	}
}

// TestTimeAsValue: the generator's calls of a time.Time's DeepCopyInto
// become copies of the value; other fields' calls stay.
func TestTimeAsValue(t *testing.T) {
	src := []byte(`package api

func (in *X) DeepCopyInto(out *X) {
	*out = *in
	in.Created.DeepCopyInto(&out.Created)
	in.Spec.DeepCopyInto(&out.Spec)
	if in.At != nil {
		in, out := &in.At, &out.At
		*out = new(timex.Time)
		(*in).DeepCopyInto(*out)
	}
}
`)
	got, err := timeAsValue(src, map[string]bool{"Created": true, "At": true})
	if err != nil {
		t.Fatal(err)
	}
	want := `package api

func (in *X) DeepCopyInto(out *X) {
	*out = *in
	in.Spec.DeepCopyInto(&out.Spec)
	if in.At != nil {
		in, out := &in.At, &out.At
		*out = new(timex.Time)
		**out = **in
	}
}
`
	if string(got) != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if _, err := timeAsValue(src, map[string]bool{"Created": true}); err == nil {
		t.Errorf("a *time.Time copy of a field that is not a time: no error")
	}
}
