package node

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/clock"
	"github.com/hvkube/hvkube/internal/secrets"
)

// A desktop's session variables (spec.env and spec.envFrom of its Sandbox
// and of the Agent that claims it) are resolved by the API servers, which
// alone open Secrets, and written by the node into the running guest:
//
//   - every program the node runs in the guest (exec, workflow steps,
//     agents' commands in the guest, the OSWorld routes) gets them in its
//     environment, and a custom agent's command on the host too;
//   - a Linux guest gets them in /run/hvkube/env (0600, the desktop's
//     user's; `. /run/hvkube/env` loads them in a shell), on the guest's
//     tmpfs: never on its disk. The images' interactive bash loads the
//     file before each command line when it changed, so the terminals
//     already open on the desktop get them too, and put back what they
//     had when it goes.
//
// They are written after the sandbox resumes, never before a snapshot:
// no template holds them. The release takes them out (a reset reverts the
// guest to its clean snapshot; keep, save and an unused claim delete the
// file first), and a capture of a sandbox that holds them is refused.
// What came from a Secret is masked (maskText) in the attempt's log, its
// steps' output and errors, its result's output and its events.

// sessionEnvFile is where a Linux guest keeps its session's variables.
const sessionEnvFile = "/run/hvkube/env"

// envWrites numbers the session files written, so that two writes within
// one tick of the clock still differ in their first line.
var envWrites atomic.Uint64

// minMasked is the shortest Secret value masked: shorter ones would mask
// every "1" and "on" of a log, and say little of the secret.
const minMasked = 4

// sessions records, per sandbox, the variables the node wrote into it.
type sessions struct {
	mu sync.Mutex
	m  map[string]session
}

type session struct {
	vars  []string
	agent string // the claim they were written for; "" for the sandbox's own
	mask  *strings.Replacer
	// file is the write of the guest's file, under way in the background
	// after the resume; the programs the node runs there, and the
	// release, wait for it.
	file *fileWrite
}

// fileWrite is one write of a guest's session file.
type fileWrite struct {
	done chan struct{} // closed when it is over
	err  error         // set before done closes
}

// sessionWriteTimeout bounds a write of the session file.
const sessionWriteTimeout = 2 * time.Minute

func (s *sessions) get(name string) (session, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[name]
	return v, ok
}

func (s *sessions) set(name string, v session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]session{}
	}
	s.m[name] = v
}

func (s *sessions) forget(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, name)
}

// sessionVars returns the variables written into sandbox name, for the
// programs run there.
func (n *Node) sessionVars(name string) []string {
	v, _ := n.sessions.get(name)
	return v.vars
}

// holdsSession reports whether sandbox name holds variables the node
// wrote into it.
func (n *Node) holdsSession(name string) bool {
	_, ok := n.sessions.get(name)
	return ok
}

// maskText replaces in s the Secret values written into sandbox name.
func (n *Node) maskText(name, s string) string {
	v, ok := n.sessions.get(name)
	if !ok || v.mask == nil {
		return s
	}
	return v.mask.Replace(s)
}

// resolveEnv asks for the variables of sb (and of a's claim of it, when a
// is not nil). Nothing is asked when neither names any.
func (n *Node) resolveEnv(ctx context.Context, sb *api.Sandbox, a *api.Agent) (secrets.Env, error) {
	if !secrets.Wants(sb, a) {
		return secrets.Env{}, nil
	}
	if n.opt.Env == nil {
		return secrets.Env{}, fmt.Errorf("spec.env: this node has no way to resolve session variables: %w", api.ErrUnsupported)
	}
	return n.opt.Env(ctx, sb, a)
}

// writeSession resolves and writes the session variables of sb, for agent
// (or for the sandbox itself when agent is nil), into the running guest.
// With none to write, it takes out what an earlier claim left.
func (n *Node) writeSession(ctx context.Context, sb *api.Sandbox, a *api.Agent) error {
	env, err := n.resolveEnv(ctx, sb, a)
	if err != nil {
		return err
	}
	name := sb.Metadata.Name
	if env.Empty() {
		return n.scrubSession(ctx, name)
	}
	agent := ""
	if a != nil {
		agent = a.Metadata.Name
	}
	var pairs []string
	for _, v := range env.Secret {
		if len(v) >= minMasked {
			pairs = append(pairs, v, "***")
		}
	}
	s := session{vars: env.Vars, agent: agent, file: &fileWrite{done: make(chan struct{})}}
	if len(pairs) > 0 {
		s.mask = strings.NewReplacer(pairs...)
	}
	prev, _ := n.sessions.get(name)
	n.sessions.set(name, s)
	g := n.guestInfo(ctx, sb)
	if g.OS != "linux" {
		close(s.file.done)
		return nil
	}
	// The file is written in the background: a program in the guest costs
	// a fork and an exec there (hundreds of milliseconds under emulation),
	// which the claim need not wait for. Whatever the node runs in the
	// guest waits for it (withSession), and so does the release.
	go func() {
		defer close(s.file.done)
		if prev.file != nil {
			<-prev.file.done
		}
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sessionWriteTimeout)
		defer cancel()
		// A guest agent that just resumed may drop a request or two.
		for try := 1; ; try++ {
			s.file.err = n.writeEnvFile(wctx, sb, g.User, env.Vars)
			if s.file.err == nil || try == 3 || clock.Sleep(wctx, time.Duration(try)*500*time.Millisecond) != nil {
				break
			}
		}
		if s.file.err != nil {
			n.log.Warn("session file", "sandbox", name, "err", s.file.err)
			n.event(wctx, sb, api.EventWarning, "SessionFileFailed", s.file.err.Error())
		}
	}()
	return nil
}

// sessionFileDone is closed once the write of sandbox name's session file
// is over; nil when none was started.
func (n *Node) sessionFileDone(name string) <-chan struct{} {
	s, ok := n.sessions.get(name)
	if !ok || s.file == nil {
		return nil
	}
	return s.file.done
}

// sessionPending reports whether the session's file is still being
// written into sandbox name (settleSession would wait for it).
func (n *Node) sessionPending(name string) bool {
	done := n.sessionFileDone(name)
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// settleSession waits until the write of sandbox name's session file (if
// one is under way) is over, or ctx ends.
func (n *Node) settleSession(ctx context.Context, name string) error {
	done := n.sessionFileDone(name)
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the session's variables to be written: %w", context.Cause(ctx))
	}
}

// writeEnvFile writes vars into the guest's session file, owned by the
// desktop's user, mode 0600. The values reach the guest on the program's
// standard input; its arguments are fixed but for the user's name (the
// template's, checked as a name by the API).
func (n *Node) writeEnvFile(ctx context.Context, sb *api.Sandbox, user string, vars []string) error {
	g, ok := n.be.(backend.Guest)
	if !ok {
		return fmt.Errorf("spec.env: the %s backend cannot write into the guest: %w", n.be.Name(), api.ErrUnsupported)
	}
	var b strings.Builder
	// The first line differs at each write: the images' interactive
	// shells load the file again when it changes (session-env.bash).
	b.WriteString("# hvkube: this session's variables (spec.env, spec.envFrom), written " + n.now().UTC().Format(time.RFC3339Nano) + " (" + strconv.FormatUint(envWrites.Add(1), 10) + "); load with . " + sessionEnvFile + "\n")
	for _, kv := range vars {
		k, v, _ := strings.Cut(kv, "=")
		b.WriteString("export " + k + "=" + shellQuote(v) + "\n")
	}
	// One program (each costs a fork and an exec in the guest, much under
	// emulation): install makes the directory and the file, mode 0600,
	// owned by the user, from its standard input.
	res, err := g.Exec(ctx, sb.Metadata.Name, backend.ExecRequest{Path: "install", Args: []string{"-D", "-m", "600", "-o", user, "/proc/self/fd/0", sessionEnvFile}, Stdin: []byte(b.String())})
	if err != nil {
		return fmt.Errorf("write the session's variables into the guest: %w", err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("write the session's variables into the guest: exit %d: %s", res.ExitCode, oneLine(truncate(string(res.Stderr), 300)))
	}
	return nil
}

// scrubSession takes the variables the node wrote out of sandbox name: the
// file goes from a running guest, and programs run there no longer get
// them. Programs that already run keep what they were started with.
func (n *Node) scrubSession(ctx context.Context, name string) error {
	return n.scrubSessionOf(ctx, name, false)
}

// scrubSessionOf is scrubSession; with force it deletes the guest's file
// even when this node wrote none (a node that restarted forgot what it
// wrote before).
func (n *Node) scrubSessionOf(ctx context.Context, name string, force bool) error {
	if !n.holdsSession(name) && !force {
		return nil
	}
	if err := n.settleSession(ctx, name); err != nil {
		return err
	}
	// The file is a Linux guest's only (writeSession).
	linux := false
	if o, err := n.read(ctx, api.KindSandbox, name); err == nil {
		linux = n.guestInfo(ctx, o.(*api.Sandbox)).OS == "linux"
	}
	if g, ok := n.be.(backend.Guest); ok && linux {
		if info, err := n.be.Inspect(ctx, name); err == nil && info.State == backend.StateRunning {
			res, err := g.Exec(ctx, name, backend.ExecRequest{Path: "/bin/rm", Args: []string{"-f", sessionEnvFile}})
			if err != nil {
				return fmt.Errorf("take the session's variables out of the guest: %w", err)
			}
			if res.ExitCode != 0 {
				return fmt.Errorf("take the session's variables out of the guest: rm exited with %d", res.ExitCode)
			}
		}
	}
	n.sessions.forget(name)
	return nil
}

// guestInfo is what sb's template says of its guest.
func (n *Node) guestInfo(ctx context.Context, sb *api.Sandbox) api.GuestInfo {
	info := api.GuestInfo{OS: api.DefaultGuestOS, User: api.DefaultGuestUser}
	tpl := sb.Status.Template
	if tpl == "" {
		tpl = sb.Spec.TemplateRef
	}
	if tpl == "" {
		tpl = n.opt.DefaultTemplate
	}
	if o, err := n.read(ctx, api.KindTemplate, tpl); err == nil {
		g := o.(*api.Template).Spec.Guest
		if g.OS != "" {
			info.OS = g.OS
		}
		if g.User != "" {
			info.User = g.User
		}
	}
	return info
}

// shellQuote quotes s for a POSIX shell's single quotes.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// withSession adds the session's variables of sandbox name to req's, once
// their file is written.
func (n *Node) withSession(ctx context.Context, name string, req backend.ExecRequest) (backend.ExecRequest, error) {
	if err := n.settleSession(ctx, name); err != nil {
		return req, err
	}
	if vars := n.sessionVars(name); len(vars) > 0 {
		req.Env = append(slices.Clip(req.Env), vars...)
	}
	return req, nil
}
