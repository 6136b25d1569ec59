package guest

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
)

// Guest files and programs run as the desktop's user, on a Linux guest,
// with nothing but a Runner: the guest agent runs programs as root, and
// what a desktop's own programs do (open a file, launch an application)
// must be the user's.

// MaxFile bounds a guest file read or written through a Runner: the guest
// agent carries a program's output and input in one message each.
const MaxFile = 16 << 20

// ErrTooLarge is a guest file over MaxFile.
var ErrTooLarge = errors.New("file too large")

// Home is the home directory of user on a Linux guest.
func Home(user string) string {
	if user == "" || user == "root" {
		return "/root"
	}
	return "/home/" + user
}

// AsUser makes req run as user as the user's login would: with the
// user's HOME, USER, LOGNAME and SHELL, in the home directory (a relative
// path is the user's, as for a program started from the user's session),
// with the session's bus and runtime directory when the session has them
// (/run/user/UID/bus, see loginScript), and the rest of the environment
// kept (the desktop's DISPLAY and XAUTHORITY). user "" or root leaves req
// as it is. Nothing is parsed by a shell but the fixed loginScript: the
// user and the program are arguments.
func AsUser(user string, req backend.ExecRequest) backend.ExecRequest {
	if user == "" || user == "root" {
		return req
	}
	home := Home(user)
	args := []string{"--reuid=" + user, "--regid=" + user, "--init-groups", "--",
		"/usr/bin/env", "HOME=" + home, "USER=" + user, "LOGNAME=" + user, "SHELL=/bin/bash",
		"/bin/sh", "-c", loginScript, "sh", req.Path}
	out := req
	out.Path = "/usr/bin/setpriv"
	out.Args = append(args, req.Args...)
	return out
}

// loginScript runs its arguments (a program and its arguments) in the
// home directory, with the environment of the image's desktop session
// (/etc/hvkube/session.env, plain exports, when the image has one) and the
// session bus of the user's session when there is one: a runtime
// directory /run/user/UID of the user's that holds the bus socket.
// env(1) runs the program, so that a missing one is said as env says it
// (see osworld's notFound).
const loginScript = `cd "$HOME" 2>/dev/null || cd /
[ -r /etc/hvkube/session.env ] && . /etc/hvkube/session.env
for d in /run/user/*; do
	if [ -O "$d" ] && [ -S "$d/bus" ]; then
		export XDG_RUNTIME_DIR="$d" DBUS_SESSION_BUS_ADDRESS="unix:path=$d/bus"
	fi
done
exec /usr/bin/env -- "$@"`

// readScript prints file $1 to stdout when it is a regular file of at most
// $2 bytes, its size first on stderr; exit 3: not a regular file (or
// missing), 4: too large.
const readScript = `f=$1
[ -f "$f" ] || { [ -e "$f" ] && echo "not a regular file" >&2 || echo "no such file" >&2; exit 3; }
s=$(stat -L -c %s -- "$f") || exit 1
[ "$s" -le "$2" ] || { echo "$s bytes" >&2; exit 4; }
printf '%s\n' "$s" >&2
exec cat -- "$f"`

// ReadFile reads a guest file as user ("" for root). A missing file is
// api.ErrNotFound, one over max bytes ErrTooLarge (max at most MaxFile).
func ReadFile(ctx context.Context, r Runner, user, p string, max int) ([]byte, error) {
	if max <= 0 || max > MaxFile {
		max = MaxFile
	}
	res, err := r.Exec(ctx, AsUser(user, backend.ExecRequest{Path: "/bin/sh", Args: []string{"-c", readScript, "sh", p, strconv.Itoa(max)}}))
	if err != nil {
		return nil, err
	}
	msg := strings.TrimSpace(string(res.Stderr))
	switch res.ExitCode {
	case 0:
	case 3:
		return nil, fmt.Errorf("%s: %s: %w", p, msg, api.ErrNotFound)
	case 4:
		return nil, fmt.Errorf("%s: %s, over %d: %w", p, msg, max, ErrTooLarge)
	default:
		return nil, fmt.Errorf("reading %s: %s", p, orExit(msg, res.ExitCode))
	}
	size, err := strconv.Atoi(msg)
	if err != nil || size != len(res.Stdout) {
		return nil, fmt.Errorf("reading %s: got %d bytes of %q", p, len(res.Stdout), msg)
	}
	return res.Stdout, nil
}

// writeScript writes its standard input to file $1, making its directory.
const writeScript = `mkdir -p -- "$(dirname -- "$1")" && cat > "$1"`

// WriteFile writes data to a guest file as user ("" for root), making its
// directory.
func WriteFile(ctx context.Context, r Runner, user, p string, data []byte) error {
	if len(data) > MaxFile {
		return fmt.Errorf("%s: %d bytes, over %d: %w", p, len(data), MaxFile, ErrTooLarge)
	}
	res, err := r.Exec(ctx, AsUser(user, backend.ExecRequest{Path: "/bin/sh", Args: []string{"-c", writeScript, "sh", p}, Stdin: data}))
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("writing %s: %s", p, orExit(strings.TrimSpace(string(res.Stderr)), res.ExitCode))
	}
	return nil
}

// OwnerOf is who writes guest file p for an API caller: the desktop's
// user under its home, root elsewhere.
func OwnerOf(user, p string) string {
	if home := Home(user); user != "" && (p == home || strings.HasPrefix(path.Clean(p), home+"/")) {
		return user
	}
	return ""
}

// CheckPath checks a guest path given to the API: absolute, clean enough
// to mean what it says, and bounded.
func CheckPath(field, p string) error {
	switch {
	case p == "":
		return api.Invalid(field, "required")
	case len(p) > 4096:
		return api.Invalid(field, "%d bytes: at most 4096", len(p))
	case !strings.HasPrefix(p, "/"):
		return api.Invalid(field, "%q is not an absolute path", p)
	case strings.ContainsAny(p, "\x00\n\r"):
		return api.Invalid(field, "contains a NUL or a line break")
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return api.Invalid(field, "%q has a .. segment", p)
		}
	}
	return nil
}

func orExit(msg string, code int) string {
	if msg == "" {
		return fmt.Sprintf("exit %d", code)
	}
	return msg
}
