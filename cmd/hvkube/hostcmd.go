package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/hvkube/hvkube/internal/node"
)

// hostCommandPolicy turns --allow-host-commands and --host-command-user
// into the node's HostCommands (nil: refused). Host commands run as an
// unprivileged user, so the server must be able to switch to one: it must
// run as root, on Linux. A server of an ordinary user would run them as
// itself, with the data directory and the token in reach, so it refuses
// the flag instead. euid is the server's effective uid. The commands'
// working directories go under the temporary directory, which must not
// be inside the data directory.
func hostCommandPolicy(allow bool, userName string, euid int, dataDir string) (*node.HostCommands, error) {
	if !allow {
		if userName != "" {
			return nil, errors.New("--host-command-user needs --allow-host-commands")
		}
		return nil, nil
	}
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("--allow-host-commands: host commands run only on Linux hosts; run them in the sandbox (spec.task.in: guest)")
	}
	if euid != 0 {
		return nil, fmt.Errorf("--allow-host-commands: the server runs as uid %d, not root, so host commands would run as its own user, which can read its data directory and token; start it as root (host commands then run as --host-command-user, default nobody), or run commands in the sandbox (spec.task.in: guest)", euid)
	}
	if userName == "" {
		userName = defaultHostCommandUser
	}
	u, err := node.LookupHostUser(userName)
	if err != nil {
		return nil, fmt.Errorf("--host-command-user: %w", err)
	}
	work, err := filepath.Abs(os.TempDir())
	if err != nil {
		return nil, err
	}
	if data, err := filepath.Abs(dataDir); err == nil {
		if rel, err := filepath.Rel(data, work); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return nil, fmt.Errorf("--allow-host-commands: host commands work under the temporary directory %s, which is inside the data directory %s: set TMPDIR to another directory", work, data)
		}
	}
	return &node.HostCommands{User: u, WorkRoot: work}, nil
}

// defaultHostCommandUser is the account host commands run as when
// --host-command-user is not given.
const defaultHostCommandUser = "nobody"
