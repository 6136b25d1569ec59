// Package cli is the hvkube command line: a client of the REST API with
// kubectl habits (apply, get, describe, delete, scale, …).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/hvkube/hvkube/internal/client"
	"github.com/hvkube/hvkube/internal/datadir"
)

// Options wire the CLI.
type Options struct {
	Version string
	// Extra commands added to the root (serve, bench).
	Extra []*cobra.Command
	// Now is the clock used for AGE columns; time.Now when nil.
	Now    func() time.Time
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// env holds what every command needs.
type env struct {
	opts   Options
	server string
	token  string
	// tokenSet: HVKUBE_TOKEN was set (even to ""), or the token was
	// looked up already; otherwise client looks for a local server's.
	tokenSet bool
	// caFile is the authority an https server's certificate is checked
	// by (hvkube ca), when not the system's.
	caFile string
	out    io.Writer
	errOut io.Writer
	in     io.Reader
	now    func() time.Time
}

func (e *env) client() (*client.Client, error) {
	if !e.tokenSet {
		e.token, e.tokenSet = localToken(e.server), true
	}
	c, err := client.New(e.server, e.token)
	if err != nil || e.caFile == "" {
		return c, err
	}
	b, err := os.ReadFile(e.caFile)
	if err != nil {
		return nil, fmt.Errorf("--ca-file: %w", err)
	}
	if err := c.TrustCA(b); err != nil {
		return nil, fmt.Errorf("--ca-file %s: %w", e.caFile, err)
	}
	return c, nil
}

// NewRoot builds the root command.
func NewRoot(opts Options) *cobra.Command {
	e := &env{opts: opts, out: opts.Stdout, errOut: opts.Stderr, in: opts.Stdin, now: opts.Now}
	if e.out == nil {
		e.out = os.Stdout
	}
	if e.errOut == nil {
		e.errOut = os.Stderr
	}
	if e.in == nil {
		e.in = os.Stdin
	}
	if e.now == nil {
		e.now = time.Now
	}
	root := &cobra.Command{
		Use:   "hvkube",
		Short: "hvkube orchestrates warm desktop VMs for computer-use agents",
		Long: `hvkube keeps pools of isolated desktop VMs warm, schedules agent tasks onto
them, runs them to a result, and serves their screens: screenshots, input,
clipboard and a live view (VNC over WebSocket).

Start a server with 'hvkube serve', then use the other commands against it.
The server address comes from --server or HVKUBE_SERVER (default ` + client.DefaultServer + `);
the token from HVKUBE_TOKEN, or else, for a server on this machine (a
loopback address), from the token file 'hvkube serve' keeps in its default
data directory (` + datadir.TokenPath(datadir.Default()) + `), when this user may read it.
HVKUBE_TOKEN set to nothing sends no token.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(e.out)
	root.SetErr(e.errOut)
	root.SetIn(e.in)
	defServer := os.Getenv("HVKUBE_SERVER")
	if defServer == "" {
		defServer = client.DefaultServer
	}
	root.PersistentFlags().StringVarP(&e.server, "server", "s", defServer, "hvkube server URL (env HVKUBE_SERVER)")
	root.PersistentFlags().StringVar(&e.caFile, "ca-file", os.Getenv("HVKUBE_CA_FILE"), "for an https server: the PEM certificate of the authority its certificate is checked by, as hvkube ca prints it (env HVKUBE_CA_FILE; default the system's)")
	e.token, e.tokenSet = os.LookupEnv("HVKUBE_TOKEN")
	root.AddCommand(
		newApplyCmd(e),
		newGetCmd(e),
		newDescribeCmd(e),
		newDeleteCmd(e),
		newScaleCmd(e),
		newScreenCmd(e),
		newInputCmd(e),
		newExecCmd(e),
		newAttachCmd(e),
		newSandboxOpCmd(e, "pause", "Pause running sandboxes (they stay in RAM)"),
		newSandboxOpCmd(e, "resume", "Resume paused or saved sandboxes"),
		newSandboxOpCmd(e, "save", "Save sandboxes to disk and end their VMs"),
		newSandboxOpCmd(e, "reset", "Return sandboxes to their clean snapshot"),
		newSnapshotCmd(e),
		newForkCmd(e),
		newLogsCmd(e),
		newPortForwardCmd(e),
		newDisplayCmd(e),
		newConsoleCmd(e),
		newHITLCmd(e),
		newControlCmd(e),
		newWaitCmd(e),
		newPoolCmd(e),
		newAgentCmd(e),
		newSecretCmd(e),
		newVMCmd(e),
		newVersionCmd(e),
		newCRDsCmd(e),
		newImportCmd(e),
		newMCPCmd(e),
	)
	root.AddCommand(opts.Extra...)
	return root
}

// Main runs the CLI with args and returns the process exit code. Errors go
// to stderr as "error: …".
func Main(ctx context.Context, opts Options, args []string) int {
	root := NewRoot(opts)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Err != nil {
			fmt.Fprintln(root.ErrOrStderr(), "error:", ee.Err)
		}
		return ee.Code
	}
	fmt.Fprintln(root.ErrOrStderr(), "error:", err)
	return 1
}

// ExitError ends the CLI with a given code (and an optional message).
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}
