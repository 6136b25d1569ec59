//go:build linux

package server

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/hvkube/hvkube/internal/store"
	"github.com/hvkube/hvkube/internal/testmount"
)

// TestDiskFull: with the store's disk full, a write answers 507 saying
// what happened and changes nothing; once there is space, writes work.
func TestDiskFull(t *testing.T) {
	dir := testmount.Tmpfs(t, "4m")
	st, err := store.Open(context.Background(), dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv := httptest.NewServer(New(Options{Store: st}).Handler())
	defer srv.Close()
	ts := &testServer{Server: srv, st: st}
	create := func(i int) (int, string) {
		body := fmt.Sprintf("apiVersion: hvkube/v1\nkind: Sandbox\nmetadata:\n  name: s%d\n  annotations: {pad: %q}\n", i, strings.Repeat("x", 2000))
		code, _, b := ts.do(t, "POST", "/api/v1/sandboxes", "application/yaml", body)
		return code, string(b)
	}
	if code, b := create(0); code != 201 {
		t.Fatalf("before the disk is full: %d %s", code, b)
	}
	filler := testmount.Fill(t, dir)
	full := -1
	for i := 1; i < 2000; i++ {
		code, b := create(i)
		if code == 201 {
			continue
		}
		if code != 507 || !strings.Contains(b, "full") || !strings.Contains(b, store.DBFile) {
			t.Fatalf("write %d on a full disk: %d %s", i, code, b)
		}
		full = i
		break
	}
	if full < 0 {
		t.Fatal("2000 writes succeeded on a full disk")
	}
	if code, _, _ := ts.do(t, "GET", fmt.Sprintf("/api/v1/sandboxes/s%d", full), "", ""); code != 404 {
		t.Fatalf("the refused write left object s%d: %d", full, code)
	}
	os.Remove(filler)
	if code, b := create(full); code != 201 {
		t.Fatalf("after space was freed: %d %s", code, b)
	}
	for i := 0; i <= full; i++ {
		if code, _, _ := ts.do(t, "GET", fmt.Sprintf("/api/v1/sandboxes/s%d", i), "", ""); code != 200 {
			t.Fatalf("object s%d lost: %d", i, code)
		}
	}
	t.Logf("disk full after %d writes; writes work again once space was freed", full)
}
