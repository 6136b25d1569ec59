package qga

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"time"
)

// Ping checks that the agent answers (guest-ping). On a fresh connection or
// after a timeout it resynchronises first, so a nil error means the agent is
// up and the stream is in sync.
func (c *Client) Ping(ctx context.Context) error {
	return c.do(ctx, "guest-ping", nil, nil)
}

// Sync resynchronises with the agent (guest-sync-delimited) even if the
// stream is believed to be in sync, connecting first if needed. It is the
// cheapest proof that the agent is reading its port.
func (c *Client) Sync(ctx context.Context) error {
	if err := c.lock(ctx); err != nil {
		return fmt.Errorf("qga sync: %w", err)
	}
	defer c.unlock()
	if c.closed {
		return fmt.Errorf("qga sync: %w", ErrClosed)
	}
	c.dirty = true
	if err := c.readyLocked(ctx); err != nil {
		return fmt.Errorf("qga %w", err) // readyLocked's errors start with "connect" or "sync"
	}
	return nil
}

// Info describes the agent (guest-info).
type Info struct {
	// Version is the agent's version, e.g. "7.2.0".
	Version string `json:"version"`
	// Commands lists the commands the agent knows.
	Commands []CommandInfo `json:"supported_commands"`
}

// CommandInfo describes one agent command.
type CommandInfo struct {
	Name string `json:"name"`
	// Enabled is false for commands the guest's administrator disabled.
	Enabled bool `json:"enabled"`
	// SuccessResponse is false for commands that send no reply on success
	// (guest-shutdown, guest-suspend-*).
	SuccessResponse bool `json:"success-response"`
}

// Info returns the agent's version and commands (guest-info).
func (c *Client) Info(ctx context.Context) (Info, error) {
	var info Info
	err := c.do(ctx, "guest-info", nil, &info)
	return info, err
}

// Enabled reports whether the agent has the command enabled.
func (i Info) Enabled(command string) bool {
	for _, ci := range i.Commands {
		if ci.Name == command {
			return ci.Enabled
		}
	}
	return false
}

// ExecRequest is a process to run in the guest.
type ExecRequest struct {
	// Path is the program, an absolute path or a name looked up in the
	// agent's PATH.
	Path string
	// Args are the arguments, not including the program name.
	Args []string
	// Env, when not empty, is the process's whole environment ("NAME=value"
	// entries); when empty, the process inherits the agent's. Talking to X
	// needs DISPLAY=:0 and the session's XAUTHORITY.
	Env []string
	// Input is written to the process's standard input, which is then
	// closed.
	Input []byte
	// CaptureOutput collects standard output and error, to be returned when
	// the process exits (the agent keeps at most 16 MiB of each).
	CaptureOutput bool
}

// ExecResult is the state of a process started with ExecStart or Exec.
type ExecResult struct {
	// PID is the process id in the guest.
	PID int
	// Exited reports whether the process has ended; the other fields are
	// only meaningful when it has.
	Exited bool
	// ExitCode is the exit status of a process that exited normally.
	ExitCode int
	// Signal is the number of the signal that killed the process (on
	// Windows guests, the unhandled exception code), 0 if none.
	Signal int
	// Stdout and Stderr are the captured output (with CaptureOutput).
	Stdout, Stderr []byte
	// Truncated reports that the agent dropped part of the output because
	// it exceeded the agent's limit.
	Truncated bool
}

// ExecStart starts a process in the guest (guest-exec) and returns its pid
// without waiting for it. Poll ExecStatus until it reports Exited: the
// agent keeps the exit status and captured output until then.
func (c *Client) ExecStart(ctx context.Context, req ExecRequest) (int, error) {
	if req.Path == "" {
		return 0, errors.New("qga guest-exec: empty path")
	}
	args := struct {
		Path          string   `json:"path"`
		Arg           []string `json:"arg,omitempty"`
		Env           []string `json:"env,omitempty"`
		InputData     string   `json:"input-data,omitempty"`
		CaptureOutput bool     `json:"capture-output,omitempty"`
	}{req.Path, req.Args, req.Env, "", req.CaptureOutput}
	if len(req.Input) > 0 {
		args.InputData = base64.StdEncoding.EncodeToString(req.Input)
	}
	var ret struct {
		PID int `json:"pid"`
	}
	if err := c.do(ctx, "guest-exec", args, &ret); err != nil {
		return 0, err
	}
	return ret.PID, nil
}

// ExecStatus returns the state of a process started with ExecStart
// (guest-exec-status). Once it reports Exited, the agent forgets the
// process: asking again fails.
func (c *Client) ExecStatus(ctx context.Context, pid int) (ExecResult, error) {
	var st struct {
		Exited       bool   `json:"exited"`
		ExitCode     int    `json:"exitcode"`
		Signal       int    `json:"signal"`
		OutData      string `json:"out-data"`
		ErrData      string `json:"err-data"`
		OutTruncated bool   `json:"out-truncated"`
		ErrTruncated bool   `json:"err-truncated"`
	}
	if err := c.do(ctx, "guest-exec-status", map[string]int{"pid": pid}, &st); err != nil {
		return ExecResult{PID: pid}, err
	}
	res := ExecResult{
		PID:       pid,
		Exited:    st.Exited,
		ExitCode:  st.ExitCode,
		Signal:    st.Signal,
		Truncated: st.OutTruncated || st.ErrTruncated,
	}
	var err error
	if res.Stdout, err = base64.StdEncoding.DecodeString(st.OutData); err != nil {
		return res, fmt.Errorf("qga guest-exec-status: decode stdout: %w", err)
	}
	if res.Stderr, err = base64.StdEncoding.DecodeString(st.ErrData); err != nil {
		return res, fmt.Errorf("qga guest-exec-status: decode stderr: %w", err)
	}
	return res, nil
}

// Exec runs a process in the guest and waits for it to exit, polling
// guest-exec-status with a backoff from 5 ms up to 100 ms (captured output
// arrives only at exit). A non-zero exit status is not an error: check
// ExitCode and Signal. If ctx ends first, Exec returns the ctx error along
// with the pid; the process keeps running in the guest.
//
// A poll whose connection is lost (Abort, as a resume of a stopped guest
// does to a request the stop caught) is asked again on a new connection, a
// few times in a row at most: the process runs on in the guest, and the
// agent keeps its status until a poll reports it exited.
func (c *Client) Exec(ctx context.Context, req ExecRequest) (ExecResult, error) {
	pid, err := c.ExecStart(ctx, req)
	if err != nil {
		return ExecResult{}, err
	}
	delay := 5 * time.Millisecond
	const maxDelay = 100 * time.Millisecond
	const maxLost = 3
	lost := 0
	timer := time.NewTimer(delay)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ExecResult{PID: pid}, fmt.Errorf("qga exec %s (pid %d): %w", req.Path, pid, context.Cause(ctx))
		case <-timer.C:
		}
		res, err := c.ExecStatus(ctx, pid)
		var ioe ioError
		if err != nil && errors.As(err, &ioe) && ctx.Err() == nil && lost < maxLost {
			lost++
			timer.Reset(delay)
			continue
		}
		if err != nil || res.Exited {
			return res, err
		}
		lost = 0
		delay = min(2*delay, maxDelay)
		timer.Reset(delay)
	}
}

// closeTimeout bounds guest-file-close, which runs even when the caller's
// ctx has ended so that no handle leaks in the agent.
const closeTimeout = 5 * time.Second

func (c *Client) fileOpen(ctx context.Context, path, mode string) (int64, error) {
	var h int64
	err := c.do(ctx, "guest-file-open", map[string]string{"path": path, "mode": mode}, &h)
	return h, err
}

func (c *Client) fileClose(ctx context.Context, h int64) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	return c.do(ctx, "guest-file-close", map[string]int64{"handle": h}, nil)
}

// FileRead returns the whole content of the guest file at path, read in
// chunks (guest-file-open, guest-file-read, guest-file-close). The handle is
// always closed, even when reading fails or ctx ends.
func (c *Client) FileRead(ctx context.Context, path string) ([]byte, error) {
	h, err := c.fileOpen(ctx, path, "r")
	if err != nil {
		return nil, err
	}
	var data []byte
	for {
		var chunk struct {
			Count  int    `json:"count"`
			BufB64 string `json:"buf-b64"`
			EOF    bool   `json:"eof"`
		}
		args := map[string]int64{"handle": h, "count": int64(c.chunkSize)}
		if err = c.do(ctx, "guest-file-read", args, &chunk); err != nil {
			break
		}
		var b []byte
		if b, err = base64.StdEncoding.DecodeString(chunk.BufB64); err != nil {
			err = fmt.Errorf("qga guest-file-read %s: decode: %w", path, err)
			break
		}
		data = append(data, b...)
		if chunk.EOF || len(b) == 0 {
			break
		}
	}
	// After a complete read a failed close loses nothing, so only the
	// read's error is reported.
	c.fileClose(ctx, h)
	if err != nil {
		return nil, err
	}
	if data == nil {
		data = []byte{}
	}
	return data, nil
}

// FileWrite creates or truncates the guest file at path and writes data to
// it in chunks (guest-file-open with mode "w", guest-file-write,
// guest-file-close). The handle is always closed, even when writing fails or
// ctx ends; a failed close is reported, since the data may not be complete.
// A new file gets the agent's permissions (qemu-ga 7.2 creates files with
// mode 0666, ignoring its umask); change them with Exec if that matters.
func (c *Client) FileWrite(ctx context.Context, path string, data []byte) error {
	h, err := c.fileOpen(ctx, path, "w")
	if err != nil {
		return err
	}
	for rest := data; len(rest) > 0 && err == nil; {
		chunk := rest[:min(len(rest), c.chunkSize)]
		var ret struct {
			Count int `json:"count"`
		}
		args := map[string]any{"handle": h, "buf-b64": base64.StdEncoding.EncodeToString(chunk)}
		if err = c.do(ctx, "guest-file-write", args, &ret); err != nil {
			break
		}
		if ret.Count <= 0 || ret.Count > len(chunk) {
			err = fmt.Errorf("qga guest-file-write %s: agent wrote %d of %d bytes", path, ret.Count, len(chunk))
			break
		}
		rest = rest[ret.Count:]
	}
	if cerr := c.fileClose(ctx, h); err == nil {
		err = cerr
	}
	return err
}

// SetTime sets the guest's system clock to t with nanosecond precision and
// then the guest's hardware clock from it (guest-set-time), as is needed
// after a VM was paused or restored from a snapshot: the guest does not
// notice the time that passed. A zero t sets the system clock from the
// hardware clock instead (not supported by every guest OS).
func (c *Client) SetTime(ctx context.Context, t time.Time) error {
	var args any
	if !t.IsZero() {
		args = map[string]int64{"time": t.UnixNano()}
	}
	return c.do(ctx, "guest-set-time", args, nil)
}

// Time returns the guest's system clock (guest-get-time).
func (c *Client) Time(ctx context.Context) (time.Time, error) {
	var ns int64
	if err := c.do(ctx, "guest-get-time", nil, &ns); err != nil {
		return time.Time{}, err
	}
	return time.Unix(0, ns), nil
}

// Shutdown asks the guest to shut down (guest-shutdown) with mode
// "powerdown" (the default when empty), "halt" or "reboot". The agent sends
// no reply when it accepts, so Shutdown returns once the request is sent and
// cannot report a refusal; confirm through QEMU (a SHUTDOWN event or
// query-status). The next request resynchronises, skipping any late reply.
func (c *Client) Shutdown(ctx context.Context, mode string) error {
	switch mode {
	case "", "powerdown", "halt", "reboot":
	default:
		return fmt.Errorf("qga guest-shutdown: mode %q, want powerdown, halt or reboot", mode)
	}
	var args any
	if mode != "" {
		args = map[string]string{"mode": mode}
	}
	if err := c.lock(ctx); err != nil {
		return fmt.Errorf("qga guest-shutdown: %w", err)
	}
	defer c.unlock()
	if err := c.requestLocked(ctx, "guest-shutdown", args, nil, false); err != nil {
		return fmt.Errorf("qga guest-shutdown: %w", err)
	}
	return nil
}
