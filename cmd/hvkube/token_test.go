package main

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// TestResolveToken: where the server's token comes from, in order.
func TestResolveToken(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "given")
	if err := os.WriteFile(tokenFile, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		cfg       serveConfig
		env       string
		want      string // "" for none; "random" for a created one
		wantFrom  string
		wantError string
	}{
		{"token file", serveConfig{tokenFile: tokenFile}, "", "from-file", "--token-file " + tokenFile, ""},
		{"token file over HVKUBE_TOKEN", serveConfig{tokenFile: tokenFile}, "from-env", "from-file", "--token-file", ""},
		{"HVKUBE_TOKEN", serveConfig{}, " from-env\n", "from-env", "HVKUBE_TOKEN", ""},
		{"insecure", serveConfig{insecureNoToken: true}, "", "", "", ""},
		{"insecure and a file", serveConfig{insecureNoToken: true, tokenFile: tokenFile}, "", "", "", "contradicts"},
		{"insecure and HVKUBE_TOKEN", serveConfig{insecureNoToken: true}, "x", "", "", "contradicts"},
		{"default: created", serveConfig{}, "", "random", "(created)", ""},
		{"missing token file", serveConfig{tokenFile: filepath.Join(dir, "missing")}, "", "", "", "--token-file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.dataDir = t.TempDir()
			got, err := resolveToken(tt.cfg, tt.env)
			if tt.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantError) {
					t.Fatalf("err %v, want one saying %q", err, tt.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			switch tt.want {
			case "random":
				if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(got.token) {
					t.Errorf("created token %q, want 64 hex digits", got.token)
				}
			default:
				if got.token != tt.want {
					t.Errorf("token %q, want %q", got.token, tt.want)
				}
			}
			if !strings.Contains(got.from, tt.wantFrom) {
				t.Errorf("from %q, want it to say %q", got.from, tt.wantFrom)
			}
		})
	}
}

// TestLoadOrCreateToken: the first call creates a private token file, the
// next ones read it; a file others may read is refused with the fix.
func TestLoadOrCreateToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	first, created, err := loadOrCreateToken(path)
	if err != nil || !created {
		t.Fatalf("first: created %v, err %v", created, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %04o, want 0600", fi.Mode().Perm())
	}
	again, created, err := loadOrCreateToken(path)
	if err != nil || created || again != first {
		t.Fatalf("second: %q created %v err %v, want %q read back", again, created, err, first)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".token-*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	if runtime.GOOS == "windows" {
		return
	}
	os.Chmod(path, 0o644)
	if _, _, err := loadOrCreateToken(path); err == nil || !strings.Contains(err.Error(), "chmod 600 "+path) {
		t.Errorf("a token file others may read: err %v, want a refusal with the fix", err)
	}
}

// TestHostCommandPolicy: --allow-host-commands needs a Linux server running
// as root, and an unprivileged account; --host-command-user needs it.
func TestHostCommandPolicy(t *testing.T) {
	tests := []struct {
		name      string
		allow     bool
		user      string
		euid      int
		wantUser  string // "" for no policy
		wantError string
	}{
		{"off", false, "", 0, "", ""},
		{"user without the flag", false, "nobody", 0, "", "needs --allow-host-commands"},
		{"not root", true, "", 1000, "", "not root"},
		{"root, default user", true, "", 0, "nobody", ""},
		{"root, named user", true, "nobody", 0, "nobody", ""},
		{"root as the user", true, "root", 0, "", "is root"},
		{"unknown user", true, "hvkube-no-such-user", 0, "", "hvkube-no-such-user"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if runtime.GOOS != "linux" && tt.allow {
				t.Skip("host commands are refused off Linux")
			}
			hc, err := hostCommandPolicy(tt.allow, tt.user, tt.euid, t.TempDir())
			if tt.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantError) {
					t.Fatalf("err %v, want one saying %q", err, tt.wantError)
				}
				return
			}
			if err != nil {
				if strings.Contains(err.Error(), "unknown user") {
					t.Skipf("no such account here: %v", err)
				}
				t.Fatal(err)
			}
			switch {
			case tt.wantUser == "" && hc != nil:
				t.Errorf("policy %+v, want none", hc)
			case tt.wantUser != "" && (hc == nil || hc.User == nil || hc.User.Name != tt.wantUser || hc.User.UID == 0):
				t.Errorf("policy %+v, want one running as %s", hc, tt.wantUser)
			}
		})
	}
	t.Run("temporary directory inside the data directory", func(t *testing.T) {
		if runtime.GOOS != "linux" {
			t.Skip("host commands are refused off Linux")
		}
		data := t.TempDir()
		t.Setenv("TMPDIR", filepath.Join(data, "tmp"))
		if _, err := hostCommandPolicy(true, "", 0, data); err == nil || !strings.Contains(err.Error(), "inside the data directory") {
			t.Fatalf("err %v, want a refusal", err)
		}
	})
}
