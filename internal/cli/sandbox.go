package cli

import (
	"encoding/base64"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hvkube/hvkube/internal/api"
)

func newScreenCmd(e *env) *cobra.Command {
	var save, format string
	var width, height, quality int
	cmd := &cobra.Command{
		Use:   "screen SANDBOX [--save FILE]",
		Short: "Take a screenshot of a sandbox",
		Long: `Take a screenshot of a sandbox. With --save the image goes to FILE;
without it, to standard output when that is not a terminal, else to
SANDBOX-TIME.png in the current directory.`,
		Example: `  hvkube screen browser-agent-1 --save s.png
  hvkube screen browser-agent-1 --format jpeg --width 640 > small.jpg`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			q := url.Values{}
			if format != "" {
				q.Set("format", format)
			}
			for k, v := range map[string]int{"width": width, "height": height, "quality": quality} {
				if v != 0 {
					q.Set(k, strconv.Itoa(v))
				}
			}
			img, _, err := c.Screenshot(cmd.Context(), args[0], q)
			if err != nil {
				return err
			}
			if save == "" && !isTerminal(e.out) {
				_, err := e.out.Write(img)
				return err
			}
			if save == "" {
				ext := "png"
				if format == "jpeg" {
					ext = "jpg"
				}
				save = fmt.Sprintf("%s-%s.%s", args[0], e.now().Format("20060102-150405"), ext)
			}
			if err := os.WriteFile(save, img, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(e.out, "saved %s (%d bytes)\n", save, len(img))
			return nil
		},
	}
	cmd.Flags().StringVar(&save, "save", "", "write the image to FILE")
	cmd.Flags().StringVar(&format, "format", "", "png (default) or jpeg")
	cmd.Flags().IntVar(&width, "width", 0, "scale to this width")
	cmd.Flags().IntVar(&height, "height", 0, "scale to this height")
	cmd.Flags().IntVar(&quality, "quality", 0, "JPEG quality 1..100")
	return cmd
}

func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func newInputCmd(e *env) *cobra.Command {
	var click, doubleClick, rightClick, move, typ, key, scroll string
	cmd := &cobra.Command{
		Use:   "input SANDBOX (--click X,Y | --type TEXT | --key COMBO | …)",
		Short: "Move the mouse, click, type or press keys in a sandbox",
		Long: `Send input to a running sandbox. Each flag is one computer-use action; given
several, they run in this order: move, click, double-click, right-click,
scroll, type, key.

Keys use xdotool names: Return, Tab, BackSpace, Escape, ctrl+shift+t,
alt+F4, super, Page_Down. Several combos separated by spaces are pressed in
turn.`,
		Example: `  hvkube input browser-agent-1 --click 500,300
  hvkube input browser-agent-1 --type "hello world" --key Return
  hvkube input browser-agent-1 --scroll 640,400,down,5`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var actions []api.Action
			for _, f := range []struct {
				flag, action, value string
			}{{"move", "mouse_move", move}, {"click", "left_click", click}, {"double-click", "double_click", doubleClick}, {"right-click", "right_click", rightClick}} {
				if f.value == "" {
					continue
				}
				xy, err := parseXY(f.flag, f.value)
				if err != nil {
					return err
				}
				actions = append(actions, api.Action{Action: f.action, Coordinate: xy})
			}
			if scroll != "" {
				parts := strings.Split(scroll, ",")
				if len(parts) < 3 || len(parts) > 4 {
					return fmt.Errorf("--scroll %q: want X,Y,DIRECTION[,AMOUNT]", scroll)
				}
				xy, err := parseXY("scroll", strings.Join(parts[:2], ","))
				if err != nil {
					return err
				}
				a := api.Action{Action: "scroll", Coordinate: xy, ScrollDirection: parts[2], ScrollAmount: 3}
				if len(parts) == 4 {
					if a.ScrollAmount, err = strconv.Atoi(parts[3]); err != nil {
						return fmt.Errorf("--scroll: amount %q is not a number", parts[3])
					}
				}
				actions = append(actions, a)
			}
			if cmd.Flags().Changed("type") {
				actions = append(actions, api.Action{Action: "type", Text: typ})
			}
			if cmd.Flags().Changed("key") {
				actions = append(actions, api.Action{Action: "key", Text: key})
			}
			if len(actions) == 0 {
				return fmt.Errorf("input needs an action: --click X,Y, --type TEXT, --key COMBO, --move X,Y, --double-click X,Y, --right-click X,Y or --scroll X,Y,DIR")
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			for _, a := range actions {
				if _, err := c.Input(cmd.Context(), args[0], a); err != nil {
					return err
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&click, "click", "", "left-click at X,Y")
	f.StringVar(&doubleClick, "double-click", "", "double-click at X,Y")
	f.StringVar(&rightClick, "right-click", "", "right-click at X,Y")
	f.StringVar(&move, "move", "", "move the pointer to X,Y")
	f.StringVar(&scroll, "scroll", "", "scroll at X,Y: X,Y,up|down|left|right[,AMOUNT]")
	f.StringVar(&typ, "type", "", "type TEXT")
	f.StringVar(&key, "key", "", "press a key combo, e.g. ctrl+s or Return")
	return cmd
}

func parseXY(flag, s string) ([]int, error) {
	xs, ys, ok := strings.Cut(s, ",")
	x, err1 := strconv.Atoi(strings.TrimSpace(xs))
	y, err2 := strconv.Atoi(strings.TrimSpace(ys))
	if !ok || err1 != nil || err2 != nil {
		return nil, fmt.Errorf("--%s %q: want X,Y (e.g. 500,300)", flag, s)
	}
	return []int{x, y}, nil
}

func newExecCmd(e *env) *cobra.Command {
	var stdin bool
	cmd := &cobra.Command{
		Use:   "exec SANDBOX [-i] -- COMMAND [ARG...]",
		Short: "Run a command in a sandbox's guest",
		Long: `Run a command in a running sandbox's guest (as root, with the desktop's
DISPLAY). The command and its arguments are passed as a list: no shell is
involved unless you run one. Prints the command's output and exits with its
exit code.`,
		Example: `  hvkube exec browser-agent-1 -- cat /etc/hostname
  hvkube exec browser-agent-1 -- sh -c 'ls /tmp | wc -l'
  echo hello | hvkube exec browser-agent-1 -i -- tee /tmp/hello`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 {
				return fmt.Errorf("usage: hvkube exec SANDBOX -- COMMAND [ARG...]")
			}
			input := ""
			if stdin {
				b, err := io.ReadAll(e.in)
				if err != nil {
					return err
				}
				input = string(b)
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			res, err := c.Exec(cmd.Context(), args[0], args[1], args[2:], input)
			if err != nil {
				return err
			}
			if err := writeMaybeBase64(e.out, res.Stdout, res.StdoutBase64); err != nil {
				return err
			}
			if err := writeMaybeBase64(e.errOut, res.Stderr, res.StderrBase64); err != nil {
				return err
			}
			if res.ExitCode != 0 {
				return &ExitError{Code: res.ExitCode}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&stdin, "stdin", "i", false, "pass standard input to the command")
	return cmd
}

func writeMaybeBase64(w interface{ Write([]byte) (int, error) }, s string, isB64 bool) error {
	if !isB64 {
		_, err := w.Write([]byte(s))
		return err
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

func newSandboxOpCmd(e *env, op, short string) *cobra.Command {
	return &cobra.Command{
		Use:   op + " SANDBOX...",
		Short: short,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			for _, name := range args {
				start := time.Now()
				sb, err := c.SandboxOp(cmd.Context(), name, op)
				if err != nil {
					return err
				}
				fmt.Fprintf(e.out, "sandbox/%s %s (%s, %s)\n", name, pastTense(op), sb.Status.Phase, time.Since(start).Round(time.Millisecond))
			}
			return nil
		},
	}
}

func pastTense(op string) string {
	switch op {
	case "pause":
		return "paused"
	case "resume":
		return "resumed"
	case "save":
		return "saved"
	case "reset":
		return "reset"
	}
	return op
}
