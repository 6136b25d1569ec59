package hyperv

import (
	"errors"
	"github.com/hvkube/hvkube/internal/powershell/pstest"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/guest"
)

// The fixtures in testdata/ps are the scripts' output as Windows
// PowerShell 5.1 writes it through the runner's wrapper (ConvertTo-Json
// -Compress): one result as an object, several as an array, with < > & '
// escaped as \u003c \u003e \u0026 \u0027.

func fixture(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "ps", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// recorded opens a backend whose runner answers from fixtures.
func recorded(t *testing.T, outputs map[string]string) (*Backend, *pstest.Recorder) {
	t.Helper()
	dir := t.TempDir()
	cred := filepath.Join(dir, "guest.json")
	os.WriteFile(cred, []byte(`{"user":"agent","password":"x"}`), 0o600)
	rec := &pstest.Recorder{Outputs: map[string]string{"probe-host": fixture(t, "probe-host.json")}, Errors: map[string]error{}}
	for k, v := range outputs {
		rec.Outputs[k] = fixture(t, v)
	}
	b, err := New(ctx, Config{Dir: filepath.Join(dir, "hvkube"), CredentialFile: cred, Runner: rec, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), PollInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b.osFor = func(string) (guest.OS, error) { return &fakeOS{}, nil }
	t.Cleanup(func() { b.Close() })
	rec.Reset()
	return b, rec
}

func TestParseGetVMsSingle(t *testing.T) {
	b, rec := recorded(t, map[string]string{"get-vms": "get-vms-single.json"})
	got, err := b.Inspect(ctx, "web-1")
	if err != nil {
		t.Fatal(err)
	}
	want := backend.Info{
		ID: "web-1", UID: "0c5e2f9a-3b1d-4e8f-9a7c-6d2e1f0b4a93", TemplateID: "win11", State: backend.StatePaused, PID: 4312,
		Display: "vmconnect:localhost/hvkube-web-1", Resolution: "1280x800", MemoryMB: 4096,
		CreatedAt: time.Date(2025, 3, 1, 10, 15, 30, 123456700, time.UTC),
	}
	if got != want {
		t.Fatalf("inspect\n got %+v\nwant %+v", got, want)
	}
	if a := rec.Calls[0].Args; a["Name"] != "hvkube-web-1" {
		t.Fatalf("get-vms args %v", a)
	}
	// The single object form is a list of one.
	list, err := b.List(ctx)
	if err != nil || len(list) != 1 || list[0] != want {
		t.Fatalf("list %+v %v", list, err)
	}
	// Another name in the answer is not this sandbox.
	if _, err := b.Inspect(ctx, "web-2"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("inspect web-2: %v", err)
	}
}

func TestParseGetVMsArray(t *testing.T) {
	b, _ := recorded(t, map[string]string{"get-vms": "get-vms-array.json"})
	list, err := b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].ID < list[j].ID })
	var got []string
	for _, i := range list {
		got = append(got, i.ID+" "+i.State)
	}
	// The template's VM and a VM whose notes are not hvkube's are left out;
	// a sandbox whose Create never finished is Stopped.
	if want := []string{"half Stopped", "web-1 Running", "web-2 Saved"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("list %v, want %v", got, want)
	}
	if list[0].PID != 0 || list[1].PID != 4312 || list[2].PID != 0 || list[2].MemoryMB != 8192 || list[2].Resolution != "1920x1080" {
		t.Fatalf("list %+v", list)
	}
}

func TestParseEmptyAnswerIsNotFound(t *testing.T) {
	b, _ := recorded(t, nil)
	if _, err := b.Inspect(ctx, "web-1"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("inspect: %v", err)
	}
	if err := b.Alive(ctx, "web-1"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("alive: %v", err)
	}
	if list, err := b.List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("list: %+v %v", list, err)
	}
}

func TestParseVMStatus(t *testing.T) {
	for _, c := range []struct {
		fixture string
		alive   bool
		ip      string
	}{
		{"vm-status-booting.json", false, ""},
		{"vm-status-ready.json", true, "172.20.48.17"},
		{"vm-status-localized.json", true, "10.0.0.23"},
		{"vm-status-paused.json", false, "172.20.48.17"},
	} {
		b, _ := recorded(t, map[string]string{"vm-status": c.fixture})
		st, err := b.status(ctx, "web-1")
		if err != nil {
			t.Fatalf("%s: %v", c.fixture, err)
		}
		if got := firstIPv4(st.IPAddresses); got != c.ip {
			t.Errorf("%s: address %q, want %q", c.fixture, got, c.ip)
		}
		if err := b.Alive(ctx, "web-1"); (err == nil) != c.alive {
			t.Errorf("%s: alive: %v", c.fixture, err)
		}
	}
}

func TestParseCapacity(t *testing.T) {
	b, _ := recorded(t, map[string]string{"capacity": "capacity.json"})
	got, err := b.Capacity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// web-1 runs and web-3 is paused (8192 MB); web-2 is saved and the
	// template's VM is not a sandbox.
	want := backend.Capacity{TotalMemoryMB: 65535, AvailableMemoryMB: 39299, UsedMemoryMB: 8192, LimitMemoryMB: 52428, FreeMemoryMB: 44236}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("capacity\n got %+v\nwant %+v", got, want)
	}
}

func TestParseGuestExec(t *testing.T) {
	b, rec := recorded(t, map[string]string{"guest-exec": "guest-exec.json"})
	res, err := b.Exec(ctx, "web-1", backend.ExecRequest{Path: "hostname.exe"})
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "DESKTOP-1234\r\n" || len(res.Stderr) != 0 {
		t.Fatalf("exec: %+v %v", res, err)
	}
	rec.Outputs["guest-exec"] = fixture(t, "guest-exec-missing.json")
	if _, err := b.Exec(ctx, "web-1", backend.ExecRequest{Path: "nosuch.exe"}); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("exec of a missing program: %v", err)
	}
	rec.Outputs["guest-exec"] = fixture(t, "guest-paused.json")
	if _, err := b.Exec(ctx, "web-1", backend.ExecRequest{Path: "hostname.exe"}); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("exec in a paused VM: %v", err)
	}
}

func TestParseGetVHDAndHostGPU(t *testing.T) {
	b, _ := recorded(t, map[string]string{"get-vhd": "get-vhd.json", "host-gpu": "host-gpu-none.json"})
	var vhd vhdInfo
	if err := b.run(ctx, scriptGetVHD, nil, &vhd); err != nil {
		t.Fatal(err)
	}
	if vhd.VhdFormat != "VHDX" || vhd.VhdType != "Dynamic" || vhd.Size != 128<<30 || vhd.FileSize != 20<<30 || vhd.Attached || vhd.Path != `D:\images\win11.vhdx` {
		t.Fatalf("get-vhd %+v", vhd)
	}
	if err := b.checkGPU(ctx); !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("a host without GPUs: %v", err)
	}
}
