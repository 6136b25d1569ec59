package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/hvkube/hvkube/internal/authtoken"
)

// TestNodeIdentityCommand: hvkube node identity NAME prints an identity
// that names NAME under the key and nothing else; a bad name, no key, a
// key others can read, or a validity out of bounds are refused, naming
// what is wrong.
func TestNodeIdentityCommand(t *testing.T) {
	dir, keyFile, key := keyDir(t)
	run := func(args ...string) (string, error) { return runCommand(newNodeIdentityCmd(), args...) }
	out, err := run("host-b", "--key-file", keyFile, "--valid", "1h")
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(out)
	if n, err := authtoken.Key(key).VerifyNodeIdentity(tok, time.Now()); err != nil || n != "host-b" {
		t.Fatalf("the identity names %q, %v; want host-b", n, err)
	}
	if _, err := authtoken.Key(key).VerifyNodeIdentity(tok, time.Now().Add(2*time.Hour)); err == nil {
		t.Error("the identity outlives --valid")
	}
	if strings.Contains(out, string(key)) {
		t.Error("the identity holds the key")
	}
	open := filepath.Join(dir, "open")
	os.WriteFile(open, key, 0o644)
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"Host_B", "--key-file", keyFile}, "NAME"},
		{[]string{"host-b"}, "--key-file"},
		{[]string{"host-b", "--key-file", open}, "--key-file"},
		{[]string{"host-b", "--key-file", keyFile, "--valid", "0s"}, "--valid"},
		{[]string{"host-b", "--key-file", keyFile, "--valid", "100000h"}, "--valid"},
	} {
		if _, err := run(c.args...); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%v: %v, want an error naming %s", c.args, err, c.says)
		}
	}
}

// TestNodeNeedsItsIdentity: hvkube node refuses to start without an
// identity, with one others can read, or without the API servers'
// address, before it opens anything.
func TestNodeNeedsItsIdentity(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "identity")
	os.WriteFile(open, []byte("hvki1.x.y"), 0o644)
	data := filepath.Join(dir, "data")
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--server-url", "http://api:8080"}, "--identity-file"},
		{[]string{"--server-url", "https://api:8443", "--identity-file", open}, "--identity-file"},
		{[]string{"--identity-file", open, "--server-url", "http://api:8080"}, "plain HTTP"},
		{[]string{"--identity-file", open, "--server-url", "https://api:8443", "--server-ca", filepath.Join(dir, "none")}, "--server-ca"},
		{[]string{"--identity-file", open, "--server-url", "https://api:8443", "--server-ca", open}, "--server-ca"},
		{[]string{"--identity-file", open}, "--server-url"},
		{[]string{"--identity-file", open, "--server-url", "ftp://api"}, "--server-url"},
	} {
		cmd := newNodeCmd()
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		cmd.SetArgs(append([]string{"--store", "kubernetes", "--data-dir", data, "--listen", "127.0.0.1:0"}, c.args...))
		if err := cmd.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%v: %v, want an error naming %s", c.args, err, c.says)
		}
		if _, err := os.Stat(data); err == nil {
			t.Fatal("a node refused at start made its data directory")
		}
	}
}

// keyDir is a directory holding a private key file: its path and bytes.
func keyDir(t *testing.T) (dir, keyFile string, key []byte) {
	t.Helper()
	dir = t.TempDir()
	keyFile = filepath.Join(dir, "key")
	key = []byte(strings.Repeat("k", 32))
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, keyFile, key
}

// runCommand runs cmd with args and returns what it printed.
func runCommand(cmd *cobra.Command, args ...string) (string, error) {
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}
