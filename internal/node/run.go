package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/agentstate"
	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/clock"
	"github.com/hvkube/hvkube/internal/display"
	"github.com/hvkube/hvkube/internal/guest"
)

// errEndedElsewhere: an mcp-agent's attempt was completed (or ended)
// through the API while the node waited.
var errEndedElsewhere = errors.New("the attempt was ended through the API")

// Bounds on what an attempt keeps.
const (
	maxOutput        = 1 << 20  // a custom agent's stdout, an exec step's output
	maxStepOutput    = 4 << 10  // what a step result shows of its output
	maxArtifacts     = 100      // files collected per attempt
	maxArtifactBytes = 64 << 20 // per file
)

// execute runs the attempt's task on its (acquired) sandbox, recording
// its screen meanwhile with output.screenRecording (record.go).
func (n *Node) execute(ctx context.Context, a *api.Agent, dir string, lg *runLog, pg *progress) (res *api.AgentResult, err error) {
	if a.Spec.Output.ScreenRecording {
		defer n.record(ctx, a.Status.Sandbox, dir, lg).stop(&res)
	}
	switch a.Spec.Type {
	case "workflow":
		return n.runWorkflow(ctx, a, dir, lg, pg)
	case "custom":
		return n.runCommand(ctx, a, nil, lg)
	case "playwright", "selenium":
		return n.runAutomation(ctx, a, lg)
	case "mcp-agent":
		return nil, n.waitMCP(ctx, a, lg)
	}
	return nil, fmt.Errorf("agents of type %q do not run here: %w", a.Spec.Type, api.ErrUnsupported)
}

// runWorkflow runs the steps in order, from the first not done in pg (an
// attempt that goes on from a checkpoint has some done); the first that
// fails fails the attempt. Each step's result (and screenshot, with
// output.screenshots) goes into the result and into pg.
func (n *Node) runWorkflow(ctx context.Context, a *api.Agent, dir string, lg *runLog, pg *progress) (*api.AgentResult, error) {
	res := &api.AgentResult{}
	sandbox := a.Status.Sandbox
	for _, sr := range pg.results {
		res.Steps = append(res.Steps, sr)
		if sr.Screenshot != "" {
			res.Screenshots = append(res.Screenshots, sr.Screenshot)
		}
	}
	for i := len(res.Steps); i < len(a.Spec.Task.Steps); i++ {
		pg.between()
		st := a.Spec.Task.Steps[i]
		start := n.now()
		// A step of another vocabulary is named by its vocabulary and
		// action ("Gemini click", "OpenAI keypress", "a batch of 3
		// actions").
		name := st.Describe()
		sr := api.StepResult{Action: name}
		out, shot, err := n.step(ctx, a, st, dir, i+1)
		if err != nil {
			err = maskedError{err, n.maskText(sandbox, err.Error())}
		}
		sr.Output = truncate(n.maskText(sandbox, out), maxStepOutput)
		if shot != "" {
			sr.Screenshot = shot
			res.Screenshots = append(res.Screenshots, shot)
		} else if err == nil && a.Spec.Output.Screenshots {
			if shot, serr := n.saveScreenshot(ctx, sandbox, dir, fmt.Sprintf("step-%02d.png", i+1)); serr == nil {
				sr.Screenshot = shot
				res.Screenshots = append(res.Screenshots, shot)
			}
		}
		sr.DurationSeconds = n.now().Sub(start).Seconds()
		if err != nil {
			sr.Error = err.Error()
			res.Steps = append(res.Steps, sr)
			lg.printf("step %d (%s) failed: %v %s", i+1, name, err, oneLine(sr.Output))
			return res, fmt.Errorf("step %d (%s): %w", i+1, name, err)
		}
		sr.OK = true
		res.Steps = append(res.Steps, sr)
		pg.results = append(pg.results, sr)
		lg.printf("step %d (%s) ok in %.2fs %s", i+1, name, sr.DurationSeconds, oneLine(sr.Output))
	}
	res.Success = true
	return res, nil
}

// step runs one workflow step, in any vocabulary the action layer takes
// (api.Action), and returns what it produced: its output, and the path of
// the screenshot it saved (any vocabulary's screenshot or zoom, or a
// batch's last image). The step's intents lead its output ("intent: …"),
// so that the step's result and the agent's log keep them.
func (n *Node) step(ctx context.Context, a *api.Agent, st api.Action, dir string, i int) (out, shot string, err error) {
	sandbox := a.Status.Sandbox
	defer func() {
		if intents := st.Intents(); len(intents) > 0 {
			note := "intent: " + strings.Join(intents, "; ")
			if out != "" {
				note += "\n" + out
			}
			out = note
		}
	}()
	switch st.Action {
	case "exec":
		res, err := n.Exec(ctx, sandbox, backend.ExecRequest{Path: st.Command[0], Args: st.Command[1:], Env: taskEnv(a)})
		if err != nil {
			return "", "", err
		}
		if res.ExitCode != 0 {
			return string(res.Stdout), "", fmt.Errorf("%s exited with %d: %s", st.Command[0], res.ExitCode, oneLine(truncate(string(res.Stderr), 400)))
		}
		return string(res.Stdout), "", nil
	case "assert":
		out, err := n.assert(ctx, a, st)
		return out, "", err
	}
	r, err := n.actions.Do(ctx, sandbox, st, display.Space{})
	if err != nil {
		return "", "", err
	}
	if r.Image != nil {
		file := fmt.Sprintf("step-%02d.png", i)
		if st.Action == "zoom" {
			file = fmt.Sprintf("step-%02d-zoom.png", i)
		}
		shot, err := saveImage(dir, file, r.Image)
		return "", shot, err
	}
	if r.Coordinate != nil {
		return fmt.Sprintf("%d,%d", r.Coordinate[0], r.Coordinate[1]), "", nil
	}
	return "", "", nil
}

// assert checks one of: a guest file contains text, a command exits with
// the expected code, the screen is not blank.
//
// With a duration it checks again every assertPoll until the check passes
// or the duration is over, so that a workflow need not guess how long the
// guest takes (a command typed into a terminal, a page loading).
func (n *Node) assert(ctx context.Context, a *api.Agent, st api.Action) (string, error) {
	deadline := time.Now().Add(time.Duration(st.Duration * float64(time.Second)))
	for {
		out, err := n.check(ctx, a, st)
		if err == nil || !time.Now().Before(deadline) {
			return out, err
		}
		if serr := clock.Sleep(ctx, assertPoll); serr != nil {
			return out, err
		}
	}
}

// assertPoll is how often an assert with a duration checks again.
const assertPoll = 200 * time.Millisecond

// check runs an assert's check once.
func (n *Node) check(ctx context.Context, a *api.Agent, st api.Action) (string, error) {
	sandbox := a.Status.Sandbox
	switch {
	case st.FileContains != nil:
		g, err := n.guest(ctx, sandbox, "read a file in")
		if err != nil {
			return "", err
		}
		var buf limitedBuffer
		buf.max = maxOutput
		if err := g.CopyOut(ctx, sandbox, st.FileContains.Path, &buf); err != nil {
			return "", fmt.Errorf("read %s: %w", st.FileContains.Path, err)
		}
		if !bytes.Contains(buf.Bytes(), []byte(st.FileContains.Text)) {
			return "", fmt.Errorf("%s does not contain %q", st.FileContains.Path, st.FileContains.Text)
		}
		return fmt.Sprintf("%s contains %q", st.FileContains.Path, st.FileContains.Text), nil
	case len(st.Command) > 0:
		want := 0
		if st.ExitCode != nil {
			want = *st.ExitCode
		}
		res, err := n.Exec(ctx, sandbox, backend.ExecRequest{Path: st.Command[0], Args: st.Command[1:], Env: taskEnv(a)})
		if err != nil {
			return "", err
		}
		if res.ExitCode != want {
			return string(res.Stdout), fmt.Errorf("%s exited with %d, want %d", strings.Join(st.Command, " "), res.ExitCode, want)
		}
		return fmt.Sprintf("exit %d", res.ExitCode), nil
	case st.ScreenNotBlank:
		b, _, err := n.Screenshot(ctx, sandbox, backend.ScreenshotOptions{Format: "png", Width: 320})
		if err != nil {
			return "", err
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			return "", fmt.Errorf("decode screenshot: %w", err)
		}
		if blank(img) {
			return "", errors.New("the screen is blank (one colour)")
		}
		return "the screen is not blank", nil
	}
	return "", errors.New("an assert with nothing to check")
}

// blank reports whether every pixel of img has the same colour.
func blank(img image.Image) bool {
	b := img.Bounds()
	r0, g0, b0, _ := img.At(b.Min.X, b.Min.Y).RGBA()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bb, _ := img.At(x, y).RGBA()
			if r != r0 || g != g0 || bb != b0 {
				return false
			}
		}
	}
	return true
}

// saveScreenshot stores a PNG of the sandbox's screen under the attempt's
// screenshots/ and returns its path relative to the attempt.
func (n *Node) saveScreenshot(ctx context.Context, sandbox, dir, file string) (string, error) {
	b, _, err := n.Screenshot(ctx, sandbox, backend.ScreenshotOptions{Format: "png"})
	if err != nil {
		return "", err
	}
	return saveImage(dir, file, b)
}

// saveImage stores an image under the attempt's screenshots/ and returns
// its path relative to the attempt.
func saveImage(dir, file string, b []byte) (string, error) {
	rel := path.Join("screenshots", file)
	if err := os.MkdirAll(filepath.Join(dir, "screenshots"), 0o700); err != nil {
		return "", err
	}
	return rel, os.WriteFile(filepath.Join(dir, filepath.FromSlash(rel)), b, 0o600)
}

// taskEnv is what an agent's programs learn of their task.
func taskEnv(a *api.Agent) []string {
	env := []string{"HVKUBE_AGENT=" + a.Metadata.Name, "HVKUBE_SANDBOX=" + a.Status.Sandbox}
	if len(a.Spec.Task.Input) > 0 {
		env = append(env, "HVKUBE_TASK_INPUT="+string(a.Spec.Task.Input))
	}
	if c := a.Status.Checkpoint; c != nil && c.Attempt == a.Status.Attempts && c.ResumedAt != nil {
		// The command starts again on the desktop of its checkpoint.
		env = append(env, "HVKUBE_RESUMED_FROM="+c.At.Format(time.RFC3339))
	}
	return env
}

// runCommand runs the command of a custom (or playwright, selenium)
// agent, on the host (with the API's address and a token scoped to its
// sandbox in its environment) when the node allows host commands, or in
// the guest; env is added to its environment. Its exit code decides
// success; its standard output, when it is JSON, is the result's output.
func (n *Node) runCommand(ctx context.Context, a *api.Agent, env []string, lg *runLog) (*api.AgentResult, error) {
	argv := a.Spec.Task.Command
	var stdout []byte
	code := 0
	if a.Spec.Task.In == "guest" {
		res, err := n.Exec(ctx, a.Status.Sandbox, backend.ExecRequest{Path: argv[0], Args: argv[1:], Env: append(taskEnv(a), env...)})
		if err != nil {
			return nil, err
		}
		stdout, code = res.Stdout, res.ExitCode
		lg.printf("guest command %s: exit %d\n--- stdout\n%s--- stderr\n%s", argv[0], code, truncate(string(res.Stdout), maxStepOutput), truncate(string(res.Stderr), maxStepOutput))
	} else {
		if n.opt.HostCommands == nil {
			return nil, n.refuseHostCommand(ctx, a, lg)
		}
		var err error
		stdout, code, err = n.runHostEnv(ctx, a, append(slices.Clip(env), n.sessionVars(a.Status.Sandbox)...), lg)
		if err != nil {
			return nil, err
		}
	}
	res := &api.AgentResult{Success: code == 0, ExitCode: &code}
	if out := bytes.TrimSpace([]byte(n.maskText(a.Status.Sandbox, string(stdout)))); len(out) > 0 {
		if json.Valid(out) {
			res.Output = json.RawMessage(out)
		} else {
			res.Output, _ = json.Marshal(string(out))
		}
	}
	if code != 0 {
		return res, fmt.Errorf("%s exited with %d", argv[0], code)
	}
	return res, nil
}

// runHost runs an agent's command on the host: an argument list, no
// shell; as the user n.opt.HostCommands names, in a fresh working
// directory outside the data directory (also its HOME and TMPDIR), with a
// minimal environment. The directory, and whatever the command left
// running in its process group, go when it ends; its standard output is
// the result's, and its output streams are in the attempt's log.
func (n *Node) runHost(ctx context.Context, a *api.Agent, lg *runLog) ([]byte, int, error) {
	return n.runHostEnv(ctx, a, nil, lg)
}

// runHostEnv is runHost with extra added to the command's environment.
func (n *Node) runHostEnv(ctx context.Context, a *api.Agent, extra []string, lg *runLog) ([]byte, int, error) {
	hc := n.opt.HostCommands
	argv := a.Spec.Task.Command
	work, err := hc.workDir(n.opt.DataDir, a.Metadata.Name, a.Status.Attempts)
	if err != nil {
		return nil, -1, err
	}
	defer func() {
		if err := os.RemoveAll(work); err != nil {
			lg.printf("remove the working directory %s: %v", work, err)
		}
	}()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = work
	env := taskEnv(a)
	for _, k := range []string{"PATH", "LANG"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	env = append(env, "HOME="+work, "TMPDIR="+work)
	env = append(env, extra...)
	if n.opt.ServerURL != "" {
		env = append(env, "HVKUBE_SERVER="+n.opt.ServerURL)
	}
	if ca := n.opt.ServerCAFile; ca != "" {
		env = append(env, "HVKUBE_CA_FILE="+ca, "NODE_EXTRA_CA_CERTS="+ca)
	}
	if n.opt.Tokens != nil {
		tok, err := n.opt.Tokens(ctx, a, agentstate.Timeout(a))
		if err != nil {
			return nil, -1, fmt.Errorf("the attempt's token: %w", err)
		}
		env = append(env, "HVKUBE_TOKEN="+tok)
	}
	cmd.Env = env
	var stdout limitedBuffer
	stdout.max = maxOutput
	cmd.Stdout = io.MultiWriter(&stdout, lg.writer("stdout"))
	cmd.Stderr = lg.writer("stderr")
	if err := setHostCommandAttrs(cmd, hc.User); err != nil {
		return nil, -1, err
	}
	cmd.WaitDelay = 5 * time.Second
	lg.printf("host command %s as %s in %s", argv[0], hc.User, work)
	if err := cmd.Start(); err != nil {
		return nil, -1, fmt.Errorf("run %s: %w", argv[0], err)
	}
	err = waitHostCommand(cmd)
	var ee *exec.ExitError
	if errors.As(err, &ee) && ctx.Err() == nil {
		return stdout.Bytes(), ee.ExitCode(), nil
	}
	if err != nil {
		return stdout.Bytes(), -1, fmt.Errorf("run %s: %w", argv[0], err)
	}
	return stdout.Bytes(), 0, nil
}

// waitMCP waits while an external agent works through the API, until it
// completes the attempt (or something else ends it) or the deadline.
func (n *Node) waitMCP(ctx context.Context, a *api.Agent, lg *runLog) error {
	lg.printf("waiting for the agent to complete through POST /api/v1/agents/%s/complete", a.Metadata.Name)
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		o, err := n.read(ctx, api.KindAgent, a.Metadata.Name)
		if errors.Is(err, api.ErrNotFound) {
			return errEndedElsewhere
		}
		if err != nil {
			continue
		}
		cur := o.(*api.Agent)
		if cur.Status.Phase != api.AgentRunning || cur.Status.Attempts != a.Status.Attempts {
			return errEndedElsewhere
		}
		if d, reason, msg := agentstate.MCPDeadline(cur, n.now()); reason == "HeartbeatLost" && !n.now().Before(d) {
			return heartbeatLost(msg)
		}
	}
}

// heartbeatLost: an mcp-agent's external agent stopped sending heartbeats
// (completion.heartbeatSeconds); the attempt fails with HeartbeatLost.
type heartbeatLost string

func (e heartbeatLost) Error() string { return string(e) }

// collect copies the files matching output.artifacts out of the guest into
// the attempt's artifacts/, and takes a final screenshot with
// output.screenshots. Errors are logged, not fatal: the result matters
// more than its attachments.
func (n *Node) collect(ctx context.Context, a *api.Agent, sandbox, dir string, res *api.AgentResult, lg *runLog) {
	if a.Spec.Output.Screenshots {
		if shot, err := n.saveScreenshot(ctx, sandbox, dir, "final.png"); err == nil {
			res.Screenshots = append(res.Screenshots, shot)
		}
	}
	if len(a.Spec.Output.Artifacts) == 0 {
		return
	}
	g, err := n.guest(ctx, sandbox, "collect artifacts from")
	if err != nil {
		lg.printf("artifacts: %v", err)
		return
	}
	osys := n.guestOS(ctx, sandbox)
	if err := os.MkdirAll(filepath.Join(dir, "artifacts"), 0o700); err != nil {
		lg.printf("artifacts: %v", err)
		return
	}
	seen := map[string]bool{}
	for _, pattern := range a.Spec.Output.Artifacts {
		files, err := osys.Glob(ctx, guest.Bind(g, sandbox), pattern)
		if err != nil {
			lg.printf("artifacts %s: %v", pattern, err)
			continue
		}
		if len(files) == 0 {
			lg.printf("artifacts %s: no file matches", pattern)
		}
		for _, f := range files {
			if len(res.Artifacts) >= maxArtifacts {
				lg.printf("artifacts: more than %d files; the rest are left out", maxArtifacts)
				return
			}
			base := path.Base(f)
			for i := 2; seen[base]; i++ {
				base = fmt.Sprintf("%d-%s", i, path.Base(f))
			}
			seen[base] = true
			rel := path.Join("artifacts", base)
			if err := copyOut(ctx, g, sandbox, f, filepath.Join(dir, filepath.FromSlash(rel))); err != nil {
				lg.printf("artifact %s: %v", f, err)
				continue
			}
			res.Artifacts = append(res.Artifacts, rel)
			lg.printf("artifact %s -> %s", f, rel)
		}
	}
}

func copyOut(ctx context.Context, g backend.Guest, sandbox, from, to string) error {
	f, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	w := &limitedWriter{w: f, left: maxArtifactBytes}
	err = g.CopyOut(ctx, sandbox, from, w)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(to)
	}
	return err
}

// runLog is an attempt's log, in the node's journal (logjournal.go).
type runLog struct {
	mu      sync.Mutex
	j       *logJournal // nil: the node keeps no logs
	key     string      // the agent's (journalKey)
	attempt int
	mask    func(string) string // hides Secret values (env.go); nil: none
}

// setMask has every later line of the log pass through mask.
func (l *runLog) setMask(mask func(string) string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mask = mask
}

// newRunLog begins the log of a's attempt; a node without a data
// directory keeps none.
func (n *Node) newRunLog(a *api.Agent, attempt int) *runLog {
	l := &runLog{key: journalKey(a.Metadata.Name, a.Metadata.UID), attempt: attempt}
	if n.opt.DataDir != "" {
		l.j = &n.journal
	}
	return l
}

func (l *runLog) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.j != nil {
		line := fmt.Sprintf(format, args...)
		if l.mask != nil {
			line = l.mask(line)
		}
		// A line the journal cannot take is lost, as one a full disk
		// refuses: the attempt goes on.
		_ = l.j.append(l.key, l.attempt, []byte(time.Now().UTC().Format("15:04:05.000")+" "+line+"\n"))
	}
}

// writer is an io.Writer whose lines go to the log, prefixed with stream.
func (l *runLog) writer(stream string) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		for _, line := range strings.SplitAfter(string(p), "\n") {
			if line != "" {
				l.printf("%s: %s", stream, strings.TrimSuffix(line, "\n"))
			}
		}
		return len(p), nil
	})
}

// Close ends the log: nothing is left to write.
func (l *runLog) Close() error { return nil }

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// limitedWriter fails once more than left bytes are written.
type limitedWriter struct {
	w    io.Writer
	left int64
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.left {
		return 0, fmt.Errorf("larger than %d bytes", maxArtifactBytes)
	}
	l.left -= int64(len(p))
	return l.w.Write(p)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
