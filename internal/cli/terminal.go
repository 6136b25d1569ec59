package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// runTerminal runs argv on a pseudo-terminal in sandbox name and relays
// this process's terminal to it: raw input (Ctrl-C goes to the program),
// the window's size as it changes, the output; it returns the program's
// exit status as an ExitError.
func (e *env) runTerminal(ctx context.Context, name string, argv []string) error {
	c, err := e.client()
	if err != nil {
		return err
	}
	in, _ := e.in.(*os.File)
	out, _ := e.out.(*os.File)
	rows, cols := 24, 80
	if out != nil && term.IsTerminal(int(out.Fd())) {
		if w, h, err := term.GetSize(int(out.Fd())); err == nil {
			rows, cols = h, w
		}
	}
	tty := os.Getenv("TERM")
	t, err := c.OpenTerminal(ctx, name, argv, rows, cols, tty)
	if err != nil {
		return err
	}
	defer t.Close()
	if in != nil && term.IsTerminal(int(in.Fd())) {
		old, err := term.MakeRaw(int(in.Fd()))
		if err != nil {
			return fmt.Errorf("set the terminal raw: %w", err)
		}
		defer term.Restore(int(in.Fd()), old)
	}
	if out != nil && term.IsTerminal(int(out.Fd())) {
		stop := watchResize(ctx, int(out.Fd()), func(rows, cols int) { t.Resize(ctx, rows, cols) })
		defer stop()
	}
	go func() {
		io.Copy(t, e.in)
	}()
	code, err := t.Copy(ctx, e.out)
	if err != nil {
		return err
	}
	if code != 0 {
		return &ExitError{Code: code}
	}
	return nil
}

// watchResize calls resize with the window's size each time it changes,
// until stop.
func watchResize(ctx context.Context, fd int, resize func(rows, cols int)) (stop func()) {
	ch := make(chan os.Signal, 1)
	notifyResize(ch)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-ch:
				if w, h, err := term.GetSize(fd); err == nil {
					resize(h, w)
				}
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}

func newAttachCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "attach SANDBOX",
		Short: "Open a terminal in a sandbox: the desktop user's login shell",
		Long: `Open a terminal in a running Linux sandbox: the desktop user's login
shell on a pseudo-terminal, over a WebSocket through the API (hvkube exec
-it SANDBOX -- COMMAND runs another program). Input is raw: Ctrl-C goes to
the program; the window's size follows this terminal's. Exits with the
shell's exit status. The guest needs python3 and its network.`,
		Example: `  hvkube attach browser-agent-1
  hvkube exec -it browser-agent-1 -- top`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.runTerminal(cmd.Context(), args[0], nil)
		},
	}
}

var errNoCommand = errors.New("usage: hvkube exec SANDBOX [-i] [-t] -- COMMAND [ARG...]")
