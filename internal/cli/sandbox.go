package cli

import (
	"context"
	"encoding/base64"
	"encoding/json"
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
	var settle bool
	cmd := &cobra.Command{
		Use:   "screen SANDBOX [--save FILE]",
		Short: "Take a screenshot of a sandbox",
		Long: `Take a screenshot of a sandbox. With --save the image goes to FILE;
without it, to standard output when that is not a terminal, else to
SANDBOX-TIME.png in the current directory.`,
		Example: `  hvkube screen browser-agent-1 --save s.png
  hvkube screen browser-agent-1 --format jpeg --width 640 > small.jpg
  hvkube screen browser-agent-1 --settle --save after-click.png`,
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
			if settle {
				q.Set("settle", "true")
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
	cmd.Flags().BoolVar(&settle, "settle", false, "wait until the screen stops changing (at most 3 s)")
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
	var click, doubleClick, tripleClick, rightClick, middleClick, move, typ, key, scroll, drag, down, holdKey, zoom, save string
	var up, cursor bool
	var wait, duration float64
	var width int
	var raw []string
	cmd := &cobra.Command{
		Use:   "input SANDBOX (--click X,Y | --type TEXT | --key COMBO | --action JSON | …)",
		Short: "Move the mouse, click, type or press keys in a sandbox",
		Long: `Send input to a running sandbox. Each flag is one computer-use action; given
several, they run in this order: move, mouse-down, click, double-click,
triple-click, right-click, middle-click, drag, mouse-up, scroll, type, key,
hold-key, wait, cursor, zoom, then each --action.

--action takes any action as JSON: Anthropic's computer-use form
({"action": "left_click", "coordinate": [10, 20]}) or OpenAI's
({"type": "click", "button": "left", "x": 10, "y": 20}).

Keys use xdotool names: Return, Tab, BackSpace, Escape, ctrl+shift+t,
alt+F4, super, Page_Down. Several combos separated by spaces are pressed in
turn. --width N sends coordinates in a screen scaled to N pixels wide (as
"hvkube screen --width N" shows it). A person holding the sandbox's
control (the dashboard's take-over) makes input fail with 409.`,
		Example: `  hvkube input browser-agent-1 --click 500,300
  hvkube input browser-agent-1 --type "hello world" --key Return
  hvkube input browser-agent-1 --scroll 640,400,down,5
  hvkube input browser-agent-1 --drag 100,100,400,300
  hvkube input browser-agent-1 --hold-key shift --duration 2
  hvkube input browser-agent-1 --cursor
  hvkube input browser-agent-1 --zoom 0,0,400,300 --save corner.png
  hvkube input browser-agent-1 --action '{"type":"keypress","keys":["CTRL","L"]}'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var actions []api.Action
			point := func(flag, action, value string) error {
				if value == "" {
					return nil
				}
				xy, err := ParseXY(flag, value)
				if err != nil {
					return err
				}
				actions = append(actions, api.Action{Action: action, Coordinate: xy})
				return nil
			}
			if err := point("move", "mouse_move", move); err != nil {
				return err
			}
			if cmd.Flags().Changed("mouse-down") {
				a := api.Action{Action: "left_mouse_down"}
				if down != "here" {
					xy, err := ParseXY("mouse-down", down)
					if err != nil {
						return err
					}
					a.Coordinate = xy
				}
				actions = append(actions, a)
			}
			for _, f := range []struct{ flag, action, value string }{
				{"click", "left_click", click}, {"double-click", "double_click", doubleClick}, {"triple-click", "triple_click", tripleClick},
				{"right-click", "right_click", rightClick}, {"middle-click", "middle_click", middleClick},
			} {
				if err := point(f.flag, f.action, f.value); err != nil {
					return err
				}
			}
			if drag != "" {
				n, err := parseInts("drag", drag, 4, "X1,Y1,X2,Y2")
				if err != nil {
					return err
				}
				actions = append(actions, api.Action{Action: "left_click_drag", StartCoordinate: n[:2], Coordinate: n[2:]})
			}
			if up {
				actions = append(actions, api.Action{Action: "left_mouse_up"})
			}
			if scroll != "" {
				parts := strings.Split(scroll, ",")
				if len(parts) < 3 || len(parts) > 4 {
					return fmt.Errorf("--scroll %q: want X,Y,DIRECTION[,AMOUNT]", scroll)
				}
				xy, err := ParseXY("scroll", strings.Join(parts[:2], ","))
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
			if holdKey != "" {
				actions = append(actions, api.Action{Action: "hold_key", Text: holdKey, Duration: duration})
			} else if cmd.Flags().Changed("duration") {
				return fmt.Errorf("--duration goes with --hold-key")
			}
			if cmd.Flags().Changed("wait") {
				actions = append(actions, api.Action{Action: "wait", Duration: wait})
			}
			if cursor {
				actions = append(actions, api.Action{Action: "cursor_position"})
			}
			if zoom != "" {
				n, err := parseInts("zoom", zoom, 4, "X0,Y0,X1,Y1")
				if err != nil {
					return err
				}
				actions = append(actions, api.Action{Action: "zoom", Region: n})
			}
			bodies := make([][]byte, 0, len(actions)+len(raw))
			for _, a := range actions {
				b, _ := json.Marshal(a)
				bodies = append(bodies, b)
			}
			for _, r := range raw {
				if !json.Valid([]byte(r)) {
					return fmt.Errorf("--action %q: not JSON", r)
				}
				bodies = append(bodies, []byte(r))
			}
			if len(bodies) == 0 {
				return fmt.Errorf("input needs an action: --click X,Y, --type TEXT, --key COMBO, --action JSON, … (see --help)")
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			for _, b := range bodies {
				res, err := c.Act(cmd.Context(), args[0], b, width)
				if err != nil {
					return err
				}
				if res.Coordinate != nil {
					fmt.Fprintf(e.out, "%d,%d\n", res.Coordinate[0], res.Coordinate[1])
				}
				if res.Image != nil {
					if save == "" {
						save = fmt.Sprintf("%s-%s.png", args[0], e.now().Format("20060102-150405"))
					}
					if err := os.WriteFile(save, res.Image, 0o644); err != nil {
						return err
					}
					fmt.Fprintf(e.out, "saved %s (%d bytes)\n", save, len(res.Image))
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&click, "click", "", "left-click at X,Y")
	f.StringVar(&doubleClick, "double-click", "", "double-click at X,Y")
	f.StringVar(&tripleClick, "triple-click", "", "triple-click at X,Y")
	f.StringVar(&rightClick, "right-click", "", "right-click at X,Y")
	f.StringVar(&middleClick, "middle-click", "", "middle-click at X,Y")
	f.StringVar(&move, "move", "", "move the pointer to X,Y")
	f.StringVar(&down, "mouse-down", "", "press the left button (at X,Y if given: --mouse-down=X,Y)")
	f.Lookup("mouse-down").NoOptDefVal = "here"
	f.BoolVar(&up, "mouse-up", false, "release the left button")
	f.StringVar(&drag, "drag", "", "drag with the left button: X1,Y1,X2,Y2")
	f.StringVar(&scroll, "scroll", "", "scroll at X,Y: X,Y,up|down|left|right[,AMOUNT]")
	f.StringVar(&typ, "type", "", "type TEXT")
	f.StringVar(&key, "key", "", "press a key combo, e.g. ctrl+s or Return")
	f.StringVar(&holdKey, "hold-key", "", "hold a key combo for --duration seconds")
	f.Float64Var(&duration, "duration", 1, "seconds to hold --hold-key")
	f.Float64Var(&wait, "wait", 0, "wait SECONDS")
	f.BoolVar(&cursor, "cursor", false, "print the pointer's position as X,Y")
	f.StringVar(&zoom, "zoom", "", "save the region X0,Y0,X1,Y1 at full resolution (see --save)")
	f.StringVar(&save, "save", "", "where --zoom (or a screenshot --action) writes its image")
	f.StringArrayVar(&raw, "action", nil, "an action as JSON (Anthropic or OpenAI form); repeatable")
	f.IntVar(&width, "width", 0, "coordinates are in the screen scaled to this width")
	return cmd
}

// parseInts parses n comma-separated integers for flag.
func parseInts(flag, s string, n int, form string) ([]int, error) {
	parts := strings.Split(s, ",")
	if len(parts) != n {
		return nil, fmt.Errorf("--%s %q: want %s", flag, s, form)
	}
	out := make([]int, n)
	for i, p := range parts {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("--%s %q: want %s", flag, s, form)
		}
		out[i] = v
	}
	return out, nil
}

// ParseXY reads flag's value X,Y as a point of the desktop.
func ParseXY(flag, s string) ([]int, error) {
	xs, ys, ok := strings.Cut(s, ",")
	x, err1 := strconv.Atoi(strings.TrimSpace(xs))
	y, err2 := strconv.Atoi(strings.TrimSpace(ys))
	if !ok || err1 != nil || err2 != nil {
		return nil, fmt.Errorf("--%s %q: want X,Y (e.g. 500,300)", flag, s)
	}
	return []int{x, y}, nil
}

func newExecCmd(e *env) *cobra.Command {
	var stdin, tty bool
	cmd := &cobra.Command{
		Use:   "exec SANDBOX [-i] [-t] -- COMMAND [ARG...]",
		Short: "Run a command in a sandbox's guest",
		Long: `Run a command in a running sandbox's guest (as root, with the desktop's
DISPLAY). The command and its arguments are passed as a list: no shell is
involved unless you run one. Prints the command's output and exits with its
exit code.

With -t (usually -it) the command runs on a pseudo-terminal as the desktop's
user, interactively, over a WebSocket through the API: input is raw (Ctrl-C
goes to the command), the window's size follows this terminal's, and it
exits with the command's exit status. A Linux guest with python3 and its
network is needed. hvkube attach SANDBOX opens the user's login shell.`,
		Example: `  hvkube exec browser-agent-1 -- cat /etc/hostname
  hvkube exec browser-agent-1 -- sh -c 'ls /tmp | wc -l'
  echo hello | hvkube exec browser-agent-1 -i -- tee /tmp/hello
  hvkube exec -it browser-agent-1 -- bash`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 {
				return errNoCommand
			}
			if tty {
				return e.runTerminal(cmd.Context(), args[0], args[1:])
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
	cmd.Flags().BoolVarP(&tty, "tty", "t", false, "run the command on a pseudo-terminal, interactively (with -i: hvkube exec -it)")
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

// newSnapshotCmd is hvkube snapshot SANDBOX --template NEW.
func newSnapshotCmd(e *env) *cobra.Command {
	var template string
	cmd := &cobra.Command{
		Use:   "snapshot SANDBOX --template NEW",
		Short: "Make a template of a sandbox as it is now (its memory and disk), for pools to clone",
		Long: `Make a template of a sandbox as it is now: its memory and its disk become
the snapshot of a new template, which pools and sandboxes name in
templateRef to clone a desktop set up by hand or by an agent. The sandbox
stops for the copy (about half a second for a desktop), then runs again,
or stays paused if it was. The template is on the sandbox's node alone (spec.source), and its
sandboxes run there; it has the sandbox's memory and resolution.`,
		Example: `  hvkube snapshot desk --template desk-with-login
  hvkube apply -f pool.yaml   # templateRef: desk-with-login`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if template == "" {
				return fmt.Errorf("--template: name the template to make")
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			start := time.Now()
			t, err := c.Snapshot(cmd.Context(), args[0], template)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.out, "template/%s created from sandbox/%s (%s, %s)\n", t.Metadata.Name, args[0], t.Status.Phase, time.Since(start).Round(time.Millisecond))
			return nil
		},
	}
	cmd.Flags().StringVar(&template, "template", "", "the name of the template to make (required)")
	return cmd
}

// newForkCmd is hvkube fork SANDBOX --count N.
func newForkCmd(e *env) *cobra.Command {
	var count int
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "fork SANDBOX --count N",
		Short: "Make N sandboxes of a sandbox as it is now (its memory and disk), to explore alternatives",
		Long: `Make N sandboxes of a sandbox as it is now: its memory and disk are
captured (the sandbox stops about half a second, then runs on) into a template of
their own, SANDBOX-fork-NONCE, and N sandboxes of it are made,
SANDBOX-fork-NONCE-1..N, each with its own identity (hostname, machine id)
as every clone has. They run on the source's node, with its spec and
labels (not its pool label, its startup commands or its volumes: the
state has their work). A count the node's memory does not hold now is
refused before anything is captured. Waits until they all run (--wait 0:
not at all). Delete the forks and the template when done:
  hvkube delete sandbox -l hvkube.io/fork-of=SANDBOX
  hvkube delete template -l hvkube.io/fork-of=SANDBOX`,
		Example: `  hvkube fork desk --count 10`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if count < 1 {
				return fmt.Errorf("--count: how many forks, 1 to 100")
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			start := time.Now()
			res, err := c.Fork(cmd.Context(), args[0], count)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.out, "template/%s captured from sandbox/%s; %d forks created (%s)\n", res.Template, args[0], len(res.Sandboxes), time.Since(start).Round(time.Millisecond))
			if wait <= 0 {
				return nil
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), wait)
			defer cancel()
			running := map[string]bool{}
			for len(running) < len(res.Sandboxes) {
				for _, name := range res.Sandboxes {
					if running[name] {
						continue
					}
					o, err := c.Get(ctx, api.KindSandbox, name)
					if err != nil {
						return fmt.Errorf("fork %s: %w", name, err)
					}
					switch sb := o.(*api.Sandbox); sb.Status.Phase {
					case api.SandboxRunning:
						running[name] = true
						fmt.Fprintf(e.out, "sandbox/%s running (%d/%d, %s)\n", name, len(running), len(res.Sandboxes), time.Since(start).Round(time.Millisecond))
					case api.SandboxError:
						return fmt.Errorf("fork %s: %s: %s", name, sb.Status.Reason, sb.Status.Message)
					}
				}
				if len(running) == len(res.Sandboxes) {
					break
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("%d of %d forks running after --wait %s", len(running), len(res.Sandboxes), wait)
				case <-time.After(100 * time.Millisecond):
				}
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&count, "count", 1, "how many forks (1..100)")
	cmd.Flags().DurationVar(&wait, "wait", 5*time.Minute, "how long to wait until they all run (0: do not wait)")
	return cmd
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
