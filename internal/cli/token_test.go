package cli

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hvkube/hvkube/internal/server"
	"github.com/hvkube/hvkube/internal/store"
)

func TestLoopbackURL(t *testing.T) {
	tests := []struct {
		server string
		want   bool
	}{
		{"http://127.0.0.1:8080", true},
		{"127.0.0.1:8080", true},
		{"http://127.1.2.3", true},
		{"http://localhost:8080", true},
		{"https://[::1]:8443", true},
		{"http://10.0.0.5:8080", false},
		{"http://example.com", false},
		{"http://localhost.example.com", false},
		{"http://[::ffff:10.0.0.5]:80", false},
		{"::not a url", false},
	}
	for _, tt := range tests {
		if got := loopbackURL(tt.server); got != tt.want {
			t.Errorf("loopbackURL(%q) = %v, want %v", tt.server, got, tt.want)
		}
	}
}

// TestCLIReadsLocalToken: with HVKUBE_TOKEN unset, the CLI sends the token
// in the default data directory's token file to a server on this machine,
// and nowhere else; HVKUBE_TOKEN, even empty, takes precedence.
func TestCLIReadsLocalToken(t *testing.T) {
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(server.New(server.Options{Store: st, Token: "local-secret"}).Handler())
	t.Cleanup(func() {
		srv.Close()
		st.Close()
	})
	dataDir := t.TempDir()
	t.Setenv("HVKUBE_DATA_DIR", dataDir)
	tokenFile := filepath.Join(dataDir, "token")

	tests := []struct {
		name   string
		file   string // the token file's content; "" for none
		env    *string
		wantOK bool
	}{
		{"the token file", "local-secret\n", nil, true},
		{"no token file", "", nil, false},
		{"a wrong token file", "other\n", nil, false},
		{"HVKUBE_TOKEN wins over the file", "local-secret\n", ptr("wrong"), false},
		{"HVKUBE_TOKEN set to nothing sends none", "local-secret\n", ptr(""), false},
		{"HVKUBE_TOKEN without a file", "", ptr("local-secret"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			os.Remove(tokenFile)
			if tt.file != "" {
				if err := os.WriteFile(tokenFile, []byte(tt.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv("HVKUBE_TOKEN", "")
			if tt.env == nil {
				os.Unsetenv("HVKUBE_TOKEN")
			} else {
				os.Setenv("HVKUBE_TOKEN", *tt.env)
			}
			_, stderr, code := run(t, srv.URL, "get", "pools")
			if ok := code == 0; ok != tt.wantOK {
				t.Fatalf("exit %d (%s), want success %v", code, strings.TrimSpace(stderr), tt.wantOK)
			}
			if !tt.wantOK && !strings.Contains(stderr, "bearer token") {
				t.Errorf("stderr %q, want the server's refusal", stderr)
			}
		})
	}

	t.Run("not for a server elsewhere", func(t *testing.T) {
		if err := os.WriteFile(tokenFile, []byte("local-secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := localToken("http://192.0.2.1:8080"); got != "" {
			t.Errorf("localToken for a remote server = %q, want none", got)
		}
		if got := localToken(srv.URL); got != "local-secret" {
			t.Errorf("localToken(%s) = %q, want the file's", srv.URL, got)
		}
	})
}

func ptr[T any](v T) *T { return &v }
