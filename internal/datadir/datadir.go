// Package datadir knows where hvkube serve keeps its state by default and
// the token file it leaves there, so that the CLI on the same machine finds
// the server's token as kubectl finds its kubeconfig.
package datadir

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// TokenFile is the name of the API token file hvkube serve creates in its
// data directory when it is given no token.
const TokenFile = "token"

// Default is the data directory hvkube serve uses when --data-dir is not
// given: HVKUBE_DATA_DIR, else $XDG_DATA_HOME/hvkube, else
// ~/.local/share/hvkube (%LOCALAPPDATA%\hvkube on Windows).
func Default() string {
	if d := os.Getenv("HVKUBE_DATA_DIR"); d != "" {
		return d
	}
	if runtime.GOOS == "windows" {
		if d := os.Getenv("LOCALAPPDATA"); d != "" {
			return filepath.Join(d, "hvkube")
		}
	}
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "hvkube")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "share", "hvkube")
	}
	return "hvkube-data"
}

// TokenPath is the token file of data directory dir.
func TokenPath(dir string) string { return filepath.Join(dir, TokenFile) }

// maxToken bounds what is read of a token file.
const maxToken = 64 << 10

// ReadToken reads a token from r: the first 64 KiB, without surrounding
// white space. An empty token is an error naming name.
func ReadToken(name string, r io.Reader) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxToken))
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("%s is empty", name)
	}
	return t, nil
}

// ReadTokenFile reads the token in the file at path (see ReadToken). A file
// that does not exist gives an error that wraps os.ErrNotExist.
func ReadTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return ReadToken(path, f)
}
