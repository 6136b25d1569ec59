package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/hvkube/hvkube/internal/cli"

	"github.com/hvkube/hvkube/internal/drivers/qemu/qga/qgatest"
)

// TestDebugExec runs `hvkube debug exec` against a guest agent test peer:
// arguments, environment and input reach the agent; output and the exit
// status come back.
func TestDebugExec(t *testing.T) {
	peer := qgatest.NewPeer(t)
	var got qgatest.ExecRequest
	peer.SetExec(func(r qgatest.ExecRequest) qgatest.Process {
		got = r
		switch r.Path {
		case "false":
			return qgatest.Process{ExitCode: 3, Stderr: []byte("failed\n")}
		case "kill":
			return qgatest.Process{Signal: 9}
		}
		return qgatest.Process{Stdout: r.Input}
	})
	t.Setenv("QGA_SOCKET", "")
	out, errOut, code := runMain(t, "debug", "exec", "--qga", peer.SocketPath(), "--env", "DISPLAY=:0", "--env", "A=b=c", "--input", "hi there", "--", "cat", "-n")
	if code != 0 || out != "hi there" || errOut != "" {
		t.Fatalf("exec: %d %q %q", code, out, errOut)
	}
	if got.Path != "cat" || strings.Join(got.Args, " ") != "-n" || strings.Join(got.Env, " ") != "DISPLAY=:0 A=b=c" || string(got.Input) != "hi there" {
		t.Fatalf("the agent got %+v", got)
	}
	// $QGA_SOCKET is the default, as boot.sh sets it.
	t.Setenv("QGA_SOCKET", peer.SocketPath())
	if _, errOut, code := runMain(t, "debug", "exec", "--", "false"); code != 3 || errOut != "failed\n" {
		t.Fatalf("exec false: %d %q", code, errOut)
	}
	if _, _, code := runMain(t, "debug", "exec", "--", "kill"); code != 128+9 {
		t.Fatalf("exec of a killed program: %d", code)
	}
	if len(got.Env) != 0 || len(got.Input) != 0 {
		t.Fatalf("without --env and --input: %+v", got)
	}
}

func TestDebugWaitReady(t *testing.T) {
	peer := qgatest.NewPeer(t)
	peer.SetExec(func(r qgatest.ExecRequest) qgatest.Process {
		return qgatest.Process{Stdout: []byte("ready 1280x800\n")}
	})
	out, errOut, code := runMain(t, "debug", "wait-ready", "--qga", peer.SocketPath(), "--since", "1700000000.5", "--timeout", "10s")
	if code != 0 || !strings.Contains(out, "guest agent answered after") || !strings.Contains(out, "desktop ready after") || !strings.Contains(out, "(ready 1280x800)") {
		t.Fatalf("wait-ready: %d %q %q", code, out, errOut)
	}
}

func TestDebugArguments(t *testing.T) {
	t.Setenv("QMP_SOCKET", "")
	t.Setenv("QGA_SOCKET", "")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"debug", "exec", "--", "true"}, "--qga: required (or set $QGA_SOCKET"},
		{[]string{"debug", "exec", "--qga", "x", "--env", "NOVALUE", "--", "true"}, `--env "NOVALUE": want NAME=VALUE`},
		{[]string{"debug", "exec", "--qga", "x"}, "requires at least 1 arg"},
		{[]string{"debug", "wait-ready", "--qga", "x", "--since", "yesterday"}, "--since \"yesterday\": want seconds since the epoch"},
		{[]string{"debug", "wait-ready", "--qga", "x", "--timeout", "0s"}, "--timeout 0s"},
		{[]string{"debug", "wait-ready", "--qga", "x", "--timeout", "180"}, "invalid argument \"180\""},
		{[]string{"debug", "screenshot", "out.png"}, "--qmp: required (or set $QMP_SOCKET"},
		{[]string{"debug", "qmp", "--qmp", "x", "query-status", "{not json"}, "not JSON"},
		{[]string{"debug", "input", "--qmp", "x"}, "no input: give --move"},
		{[]string{"debug", "input", "--qmp", "x", "--click", "12"}, "--click \"12\": want X,Y"},
		{[]string{"debug", "input", "--qmp", "x", "--action", `{"action":"left_click","colour":"red"}`}, "unknown field \"colour\""},
		{[]string{"debug", "input", "--qmp", "x", "--action", `{"type":"teleport"}`}, "unknown OpenAI computer action"},
		{[]string{"debug", "selftest", "--qmp", "x", "/tmp/out"}, "--qga: required"},
		{[]string{"debug", "selftest", "--qmp", "x", "--qga", "y"}, "accepts 1 arg"},
	} {
		_, errOut, code := runMain(t, tt.args...)
		if code == 0 || !strings.Contains(errOut, tt.want) {
			t.Errorf("%v: exit %d, %q; want an error with %q", tt.args, code, errOut, tt.want)
		}
	}
	// Hidden from the main help, there when asked for.
	if out, _, _ := runMain(t, "--help"); strings.Contains(out, "debug") {
		t.Errorf("the main help lists debug:\n%s", out)
	}
	if out, _, code := runMain(t, "debug", "--help"); code != 0 || !strings.Contains(out, "guest images") || !strings.Contains(out, "selftest") {
		t.Errorf("debug --help: %d\n%s", code, out)
	}
}

// runMain runs this binary's main command line in-process, as hvkube
// would: the CLI with this binary's commands.
func runMain(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = cli.Main(context.Background(), cli.Options{Version: "test", Extra: commands(), Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut}, args)
	return out.String(), errOut.String(), code
}
