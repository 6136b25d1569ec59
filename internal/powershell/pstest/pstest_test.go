package pstest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/powershell"
)

var getVM = powershell.Script{Name: "get-vm", Text: "param([string]$Name)\nGet-VM -Name $Name | ForEach-Object { [pscustomobject]@{ name = $_.Name; state = [string]$_.State } }\n"}

type vm struct {
	Name  string `json:"name"`
	State string `json:"state"`
}

func TestRecorder(t *testing.T) {
	notFound := &powershell.Error{Script: "remove-vm", Category: "ObjectNotFound", Message: "gone"}
	r := &Recorder{
		Outputs: map[string]string{"get-vm": `{"name":"a","state":"Running"}`},
		Errors:  map[string]error{"remove-vm": notFound},
	}
	var vms []vm
	if err := r.Run(context.Background(), getVM, powershell.Args{"Name": "a"}, &vms); err != nil {
		t.Fatal(err)
	}
	if len(vms) != 1 || vms[0] != (vm{"a", "Running"}) {
		t.Errorf("output = %+v", vms)
	}
	err := r.Run(context.Background(), powershell.Script{Name: "remove-vm", Text: "param($Name)"}, powershell.Args{"Name": "a"}, nil)
	if !errors.Is(err, api.ErrNotFound) {
		t.Errorf("remove-vm = %v, want not found", err)
	}
	if err := r.Run(context.Background(), powershell.Script{Name: "quiet", Text: "param()"}, nil, &vms); err != nil || len(vms) != 1 {
		t.Errorf("a script without output: %v, %+v", err, vms)
	}
	if len(r.Calls) != 3 || r.Calls[0].Script.Name != "get-vm" || r.Calls[0].Args["Name"] != "a" || r.Calls[1].Script.Name != "remove-vm" {
		t.Errorf("Calls = %+v", r.Calls)
	}

	// Like Local, it refuses what Command refuses and a done context, and
	// does not record those.
	if err := r.Run(context.Background(), powershell.Script{Name: "bad", Text: "Get-VM"}, nil, nil); err == nil {
		t.Error("a script without param() ran")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Run(ctx, getVM, nil, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("with a done context: %v", err)
	}
	if got := len(r.Recorded()); got != 3 {
		t.Errorf("%d calls recorded, want 3", got)
	}

	// The caller changing its Args afterwards does not change the record.
	args := powershell.Args{"Name": "b"}
	_ = r.Run(context.Background(), getVM, args, nil)
	args["Name"] = "changed"
	if got := r.Recorded()[3].Args["Name"]; got != "b" {
		t.Errorf("recorded Name = %v, want b", got)
	}

	r.Reset()
	if len(r.Calls) != 0 || len(r.Outputs) == 0 {
		t.Errorf("Reset left %+v", r)
	}
}

func TestRecorderConcurrent(t *testing.T) {
	r := &Recorder{}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("s%d", i%5)
			r.Set(name, fmt.Sprintf(`{"name":%q}`, name))
			if i%10 == 0 {
				r.Fail(name, nil)
			}
			var v vm
			if err := r.Run(context.Background(), powershell.Script{Name: name, Text: "param()"}, nil, &v); err != nil {
				t.Error(err)
			}
			_ = r.Recorded()
		}()
	}
	wg.Wait()
	if len(r.Calls) != 50 {
		t.Errorf("%d calls recorded, want 50", len(r.Calls))
	}
}

// fakeTB records a test's failures instead of failing.
type fakeTB struct {
	testing.TB
	failures []string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Errorf(format string, args ...any) {
	f.failures = append(f.failures, fmt.Sprintf(format, args...))
}
func (f *fakeTB) Fatalf(format string, args ...any) { f.Errorf(format, args...) }

func setUpdate(t *testing.T, v bool) {
	old := *update
	*update = v
	t.Cleanup(func() { *update = old })
}

func TestGolden(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "testdata")
	args := powershell.Args{"Name": "a", "Data": []byte("hi"), "Count": 2}

	// Missing files fail, and say how to write them.
	ft := &fakeTB{TB: t}
	Golden(ft, dir, "get-vm", getVM, args)
	if len(ft.failures) != 2 || !strings.Contains(ft.failures[0], "-update") {
		t.Errorf("without files: %q", ft.failures)
	}

	setUpdate(t, true)
	Golden(t, dir, "get-vm", getVM, args)
	setUpdate(t, false)
	js, err := os.ReadFile(filepath.Join(dir, "get-vm.args.json"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\n  \"Count\": 2,\n  \"Data\": \"aGk=\",\n  \"Name\": \"a\"\n}\n"; string(js) != want {
		t.Errorf("args file = %q, want %q (sorted keys, indented)", js, want)
	}
	Golden(t, dir, "get-vm", getVM, args)

	// A Windows checkout's CRLF compares equal.
	ps1 := filepath.Join(dir, "get-vm.ps1")
	if err := os.WriteFile(ps1, []byte(strings.ReplaceAll(getVM.Text, "\n", "\r\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	Golden(t, dir, "get-vm", getVM, args)

	// A changed script or changed arguments fail, naming the line.
	ft = &fakeTB{TB: t}
	changed := getVM
	changed.Text = strings.Replace(getVM.Text, "Get-VM -Name", "Get-VM -Id", 1)
	Golden(ft, dir, "get-vm", changed, powershell.Args{"Name": "b", "Data": []byte("hi"), "Count": 2})
	if len(ft.failures) != 2 || !strings.Contains(ft.failures[0], "line 2") || !strings.Contains(ft.failures[1], "line 4") {
		t.Errorf("changed: %q", ft.failures)
	}

	// What Command refuses fails.
	ft = &fakeTB{TB: t}
	Golden(ft, dir, "bad", powershell.Script{Name: "bad", Text: "Get-VM"}, nil)
	if len(ft.failures) != 1 {
		t.Errorf("bad script: %q", ft.failures)
	}
}

func TestCheckArgsInert(t *testing.T) {
	CheckArgsInert(t, getVM, powershell.Args{
		"Name":  "x'); Remove-Item C:\\ #",
		"Names": []string{"$(a)", "`b"},
		"Data":  []byte{0, 0xff},
		"Count": 3,
		"Force": true,
		"Nil":   nil,
		"Obj":   map[string]any{"a": 1, "b": []any{"c", 2.5}},
	})

	ft := &fakeTB{TB: t}
	CheckArgsInert(ft, getVM, powershell.Args{"Name": "\xff"})
	if len(ft.failures) == 0 {
		t.Error("invalid UTF-8 passed")
	}
}
