package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/hvkube/hvkube/internal/datadir"
)

// serverToken is the API token the server requires, and where it came
// from.
type serverToken struct {
	token string
	// from describes the source for the log: "--token-file PATH",
	// "HVKUBE_TOKEN", "PATH (created)", or "" without a token.
	from string
}

// resolveToken finds the server's token: the --token-file, else the value
// HVKUBE_TOKEN had (env, already taken out of the environment), else
// none with --insecure-no-token, else the token file in the data
// directory, which is created with a random token when it does not exist
// yet. The data directory must exist.
func resolveToken(cfg serveConfig, env string) (serverToken, error) {
	env = strings.TrimSpace(env)
	if err := checkTokenFlags(cfg, env); err != nil {
		return serverToken{}, err
	}
	switch {
	case cfg.tokenFile != "":
		t, err := readSecretToken("--token-file", cfg.tokenFile)
		return serverToken{t, "--token-file " + cfg.tokenFile}, err
	case env != "":
		return serverToken{env, "HVKUBE_TOKEN"}, nil
	case cfg.insecureNoToken:
		return serverToken{}, nil
	}
	path := datadir.TokenPath(cfg.dataDir)
	t, created, err := loadOrCreateToken(path)
	if err != nil {
		return serverToken{}, err
	}
	if created {
		return serverToken{t, path + " (created)"}, nil
	}
	return serverToken{t, path}, nil
}

// checkTokenFlags refuses --insecure-no-token next to a token.
func checkTokenFlags(cfg serveConfig, env string) error {
	if cfg.insecureNoToken && (cfg.tokenFile != "" || strings.TrimSpace(env) != "") {
		return errors.New("--insecure-no-token contradicts the token given in --token-file or HVKUBE_TOKEN: drop one")
	}
	return nil
}

// readSecretToken reads the token in path, which group and others must not
// be able to read (flag names it in errors).
func readSecretToken(flag, path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	if err := checkSecretMode(flag, path, fi); err != nil {
		return "", err
	}
	t, err := datadir.ReadToken(path, f)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	return t, nil
}

// loadOrCreateToken reads the token file at path, or creates it (mode
// 0600) with a new random token. Of two servers creating it at once, one
// token wins and both use it.
func loadOrCreateToken(path string) (token string, created bool, err error) {
	t, err := readSecretToken("token file", path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return t, false, err
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", false, err
	}
	t = hex.EncodeToString(b)
	tmp, err := os.CreateTemp(filepath.Dir(path), ".token-*")
	if err != nil {
		return "", false, fmt.Errorf("create the token file: %w", err)
	}
	defer os.Remove(tmp.Name()) // mode 0600, as CreateTemp makes it
	_, err = tmp.WriteString(t + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", false, fmt.Errorf("create the token file: %w", err)
	}
	// A link, unlike a rename, never replaces a token file another server
	// wrote meanwhile.
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			t, err := readSecretToken("token file", path)
			return t, false, err
		}
		return "", false, fmt.Errorf("create the token file: %w", err)
	}
	return t, true, nil
}

// logToken says in the log how the server authenticates; without a token
// it warns, every start.
func logToken(log *slog.Logger, tok serverToken) {
	if tok.token == "" {
		log.Warn("running WITHOUT A TOKEN (--insecure-no-token): any program or web page that reaches this address controls the server, its desktops and host commands")
		return
	}
	log.Info("API token", "from", tok.from)
}
