package node

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hvkube/hvkube/internal/api"
)

// HostCommands lets custom agents run their commands on this host
// (spec.task.in: host, the default). A Node without it refuses them, and
// the agent fails for good with ReasonHostCommandsDisabled.
//
// Each command runs as User, with no supplementary groups, in a working
// directory of its own under WorkRoot, which is removed when the command
// ends together with any process it left in its process group. The data
// directory (mode 0700, owned by the server's user) is out of its reach,
// and so are the server's token file and signing key.
type HostCommands struct {
	// User is the account the commands run as. Nil runs them as the
	// server's own user, which hvkube serve never does (it refuses
	// --allow-host-commands unless it runs as root and can switch users).
	User *HostUser
	// WorkRoot holds the commands' working directories (default:
	// os.TempDir()). It must be outside the data directory, and User must
	// be able to reach it.
	WorkRoot string
}

// HostUser is an unprivileged account host commands run as.
type HostUser struct {
	Name     string
	UID, GID uint32
}

func (u *HostUser) String() string {
	if u == nil {
		return "the server's user"
	}
	return fmt.Sprintf("%s (uid %d, gid %d)", u.Name, u.UID, u.GID)
}

// LookupHostUser finds the account name (a user name or a numeric uid) in
// the host's user database. Root (uid 0) is refused: the point of the
// account is to have no more rights than a stranger.
func LookupHostUser(name string) (*HostUser, error) {
	u, err := user.Lookup(name)
	if err != nil {
		if _, nerr := strconv.ParseUint(name, 10, 32); nerr == nil {
			u, err = user.LookupId(name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("host command user %q: %w", name, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("host command user %q: uid %q is not a number", name, u.Uid)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("host command user %q: gid %q is not a number", name, u.Gid)
	}
	if uid == 0 || gid == 0 {
		return nil, fmt.Errorf("host command user %q: is root (uid %d, gid %d); name an unprivileged account", name, uid, gid)
	}
	return &HostUser{Name: u.Username, UID: uint32(uid), GID: uint32(gid)}, nil
}

// ReasonHostCommandsDisabled is the reason of an agent whose host command
// this node refused.
const ReasonHostCommandsDisabled = "HostCommandsDisabled"

// refuseHostCommand fails the attempt of a custom agent whose command would
// run on this host, which does not allow it. A retry would be refused the
// same way, so the agent fails for good, whatever its maxRetries. The
// returned error tells attempt that the outcome is written.
func (n *Node) refuseHostCommand(ctx context.Context, a *api.Agent, lg *runLog) error {
	return n.failFinally(ctx, a, lg, ReasonHostCommandsDisabled, fmt.Sprintf("host commands are disabled on node %s: run the command in the sandbox (spec.task.in: guest), or start hvkube serve with --allow-host-commands", n.name))
}

// workDir makes a fresh working directory for one host command of agent
// attempt, owned by the command's user and private to it.
func (h *HostCommands) workDir(dataDir, agent string, attempt int) (string, error) {
	root := h.WorkRoot
	if root == "" {
		root = os.TempDir()
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return "", err
	}
	if dataDir != "" {
		if d, err := filepath.Abs(dataDir); err == nil && within(d, root) {
			return "", fmt.Errorf("host command working directories (%s) must be outside the data directory %s", root, d)
		}
	}
	dir, err := os.MkdirTemp(root, fmt.Sprintf("hvkube-agent-%s-%d-", agent, attempt))
	if err != nil {
		return "", fmt.Errorf("host command working directory: %w", err)
	}
	if h.User != nil {
		if err := os.Chown(dir, int(h.User.UID), int(h.User.GID)); err != nil {
			os.Remove(dir)
			return "", fmt.Errorf("host command working directory: %w", err)
		}
	}
	return dir, nil
}

// within reports whether path is dir or below it.
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
