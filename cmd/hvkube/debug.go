package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/backend/direct"
	"github.com/hvkube/hvkube/internal/cli"
	"github.com/hvkube/hvkube/internal/display"
	"github.com/hvkube/hvkube/internal/vmdebug"
)

// newDebugCmd is `hvkube debug`, hidden from the main help: tools for
// making guest images, against a VM's own sockets rather than a server,
// which they reach with dial.
func newDebugCmd(dial direct.Dialer, extra ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "debug",
		Short: "Tools for developing guest images: talk to one VM's QMP and guest-agent sockets",
		Long: `Tools for developing guest images. They talk straight to the QMP and
guest-agent sockets of one VM that no server manages, such as the one
images/linux-desktop/boot.sh starts, with the clients, key map and pointer
mapping hvkube itself uses. --qmp and --qga default to $QMP_SOCKET and
$QGA_SOCKET, which boot.sh sets for the command it runs.`,
		Example: `  images/linux-desktop/boot.sh "$dir" hvkube debug selftest /tmp/selftest
  hvkube debug exec -- uname -a
  hvkube debug screenshot screen.png
  hvkube debug input --click 495,336 --type 'echo hi' --key Return`,
		Hidden: true,
	}
	cmd.AddCommand(newDebugWaitReadyCmd(dial), newDebugExecCmd(dial), newDebugQMPCmd(dial), newDebugScreenshotCmd(dial),
		newDebugInputCmd(dial), newDebugSelfTestCmd(dial))
	cmd.AddCommand(extra...)
	return cmd
}

// socketFlag adds --qmp or --qga, defaulting to the environment variable
// boot.sh sets.
func socketFlag(cmd *cobra.Command, p *string, name, env, what string) {
	cmd.Flags().StringVar(p, name, os.Getenv(env), what+" socket (env "+env+")")
}

func needSocket(name, v string) error {
	if v == "" {
		return fmt.Errorf("--%s: required (or set $%s_SOCKET, as boot.sh does)", name, strings.ToUpper(name))
	}
	return nil
}

func newDebugWaitReadyCmd(dial direct.Dialer) *cobra.Command {
	var o vmdebug.WaitOptions
	var since string
	var verbose bool
	cmd := &cobra.Command{
		Use:   "wait-ready [--qga SOCKET] [--since EPOCH] [--timeout D] [--pid PID]",
		Short: "Wait until the guest agent answers and the desktop's ready helper succeeds",
		Long: `Wait until the guest agent answers, then until the image's ready helper
(/usr/local/bin/hvkube-ready) exits 0, printing the time each took since
--since (seconds since the epoch, as date +%s.%N prints; default now).
Gives up after --timeout, or when process --pid (QEMU) exits.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := needSocket("qga", o.QGA); err != nil {
				return err
			}
			if since != "" {
				s, err := strconv.ParseFloat(since, 64)
				if err != nil || s <= 0 {
					return fmt.Errorf("--since %q: want seconds since the epoch (date +%%s.%%N)", since)
				}
				o.Since = time.Unix(0, int64(s*1e9))
			}
			if o.Timeout <= 0 {
				return fmt.Errorf("--timeout %s: want a positive duration", o.Timeout)
			}
			o.Out = cmd.OutOrStdout()
			if verbose {
				o.Verbose = cmd.ErrOrStderr()
			}
			return vmdebug.WaitReady(cmd.Context(), dial, o)
		},
	}
	socketFlag(cmd, &o.QGA, "qga", "QGA_SOCKET", "guest agent")
	cmd.Flags().StringVar(&since, "since", "", "when the clock starts, in seconds since the epoch (default now)")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", 180*time.Second, "give up after this long")
	cmd.Flags().IntVar(&o.PID, "pid", 0, "give up when this process (QEMU) exits")
	cmd.Flags().BoolVar(&verbose, "verbose", false, "print every failed attempt")
	return cmd
}

func newDebugExecCmd(dial direct.Dialer) *cobra.Command {
	var socket, input string
	var envs []string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "exec [--qga SOCKET] [--env K=V]... [--input TEXT] -- COMMAND [ARG...]",
		Short: "Run a program in the guest through its agent",
		Long: `Run a program in the guest through the guest agent and wait for it; prints
its output and exits with its exit status. Without --env the program
inherits the agent's environment; with it, that is the whole environment
(the desktop needs DISPLAY=:0 XAUTHORITY=/home/agent/.Xauthority).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := needSocket("qga", socket); err != nil {
				return err
			}
			for _, kv := range envs {
				if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
					return fmt.Errorf("--env %q: want NAME=VALUE", kv)
				}
			}
			req := backend.ExecRequest{Path: args[0], Args: args[1:], Env: envs}
			if cmd.Flags().Changed("input") {
				req.Stdin = []byte(input)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			res, err := vmdebug.Exec(ctx, dial, socket, req)
			if err != nil {
				return err
			}
			cmd.OutOrStdout().Write(res.Stdout)
			cmd.ErrOrStderr().Write(res.Stderr)
			// A program ended by signal N exits 128+N, as in a shell.
			if res.ExitCode != 0 {
				return &cli.ExitError{Code: res.ExitCode}
			}
			return nil
		},
	}
	socketFlag(cmd, &socket, "qga", "QGA_SOCKET", "guest agent")
	cmd.Flags().StringArrayVar(&envs, "env", nil, "NAME=VALUE of the program's environment (repeatable)")
	cmd.Flags().StringVar(&input, "input", "", "text for the program's standard input")
	cmd.Flags().DurationVar(&timeout, "timeout", 60*time.Second, "give up waiting for the program after this long")
	return cmd
}

func newDebugQMPCmd(dial direct.Dialer) *cobra.Command {
	var socket string
	cmd := &cobra.Command{
		Use:   "qmp [--qmp SOCKET] COMMAND [JSON_ARGUMENTS]",
		Short: "Run one QMP command and print its answer",
		Example: `  hvkube debug qmp query-status
  hvkube debug qmp human-monitor-command '{"command-line": "info mice"}'`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := needSocket("qmp", socket); err != nil {
				return err
			}
			var arguments json.RawMessage
			if len(args) == 2 {
				if !json.Valid([]byte(args[1])) {
					return fmt.Errorf("arguments %q: not JSON", args[1])
				}
				arguments = json.RawMessage(args[1])
			}
			mon, err := dial.DialMonitor(cmd.Context(), socket)
			if err != nil {
				return err
			}
			defer mon.Close()
			ret, err := mon.Command(cmd.Context(), args[0], arguments)
			if err != nil {
				return err
			}
			var b bytes.Buffer
			if len(ret) == 0 || json.Indent(&b, ret, "", "  ") != nil {
				b.Reset()
				b.WriteString("{}")
			}
			fmt.Fprintln(cmd.OutOrStdout(), b.String())
			return nil
		},
	}
	socketFlag(cmd, &socket, "qmp", "QMP_SOCKET", "QMP")
	return cmd
}

func newDebugScreenshotCmd(dial direct.Dialer) *cobra.Command {
	var socket, format string
	cmd := &cobra.Command{
		Use:   "screenshot [--qmp SOCKET] OUT",
		Short: "Save the VM's screen (a QMP screendump) as PNG or JPEG",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := needSocket("qmp", socket); err != nil {
				return err
			}
			f := display.Format(format)
			if f == "" {
				f = display.PNG
				if strings.HasSuffix(strings.ToLower(args[0]), ".jpg") || strings.HasSuffix(strings.ToLower(args[0]), ".jpeg") {
					f = display.JPEG
				}
			}
			mon, err := dial.DialMonitor(cmd.Context(), socket)
			if err != nil {
				return err
			}
			defer mon.Close()
			img, took, err := vmdebug.Screendump(cmd.Context(), mon)
			if err != nil {
				return err
			}
			var b bytes.Buffer
			var enc display.Encoder
			if err := enc.Encode(&b, img, display.EncodeOptions{Format: f}); err != nil {
				return err
			}
			if err := os.WriteFile(args[0], b.Bytes(), 0o644); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %dx%d (screendump %d ms)\n", args[0], img.Rect.Dx(), img.Rect.Dy(), took.Milliseconds())
			return nil
		},
	}
	socketFlag(cmd, &socket, "qmp", "QMP_SOCKET", "QMP")
	cmd.Flags().StringVar(&format, "format", "", "png or jpeg (default: by OUT's extension, else png)")
	return cmd
}

func newDebugInputCmd(dial direct.Dialer) *cobra.Command {
	var qmpSocket, qgaSocket, move, click, typ, key string
	var raw []string
	cmd := &cobra.Command{
		Use:   "input [--qmp SOCKET] [--qga SOCKET] (--move X,Y | --click X,Y | --type TEXT | --key COMBO | --action JSON)...",
		Short: "Move, click, type or press keys in the VM through hvkube's action layer",
		Long: `Send input to the VM as hvkube sends it to a sandbox: the same action
layer, key map and pointer mapping, in desktop pixels. The flags run in this
order: move, click, type, key, then each --action, which takes any action as
JSON (Anthropic's or OpenAI's form, as 'hvkube input' does). cursor_position
prints the pointer's place; screenshot and zoom are not written anywhere.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := needSocket("qmp", qmpSocket); err != nil {
				return err
			}
			var acts []api.Action
			for _, f := range []struct{ flag, action, value string }{{"move", "mouse_move", move}, {"click", "left_click", click}} {
				if f.value != "" {
					xy, err := cli.ParseXY(f.flag, f.value)
					if err != nil {
						return err
					}
					acts = append(acts, api.Action{Action: f.action, Coordinate: xy})
				}
			}
			if cmd.Flags().Changed("type") {
				acts = append(acts, api.Action{Action: "type", Text: typ})
			}
			if key != "" {
				acts = append(acts, api.Action{Action: "key", Text: key})
			}
			for _, r := range raw {
				more, err := parseAction([]byte(r))
				if err != nil {
					return fmt.Errorf("--action %s: %w", r, err)
				}
				acts = append(acts, more...)
			}
			if len(acts) == 0 {
				return errors.New("no input: give --move, --click, --type, --key or --action")
			}
			mon, err := dial.DialMonitor(cmd.Context(), qmpSocket)
			if err != nil {
				return err
			}
			defer mon.Close()
			d := &vmdebug.Desktop{Monitor: mon, Env: vmdebug.XEnv}
			if qgaSocket != "" {
				d.Agent = dial.Agent(qgaSocket)
				defer d.Agent.Close()
			}
			res, err := display.NewActions(d).Run(cmd.Context(), "", acts, display.Space{})
			if err != nil {
				return err
			}
			if res.Coordinate != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "%d,%d\n", res.Coordinate[0], res.Coordinate[1])
			}
			return nil
		},
	}
	socketFlag(cmd, &qmpSocket, "qmp", "QMP_SOCKET", "QMP")
	socketFlag(cmd, &qgaSocket, "qga", "QGA_SOCKET", "guest agent (for typing beyond ASCII and cursor_position)")
	cmd.Flags().StringVar(&move, "move", "", "move the pointer to X,Y")
	cmd.Flags().StringVar(&click, "click", "", "left-click at X,Y")
	cmd.Flags().StringVar(&typ, "type", "", "type TEXT")
	cmd.Flags().StringVar(&key, "key", "", "press a key or combination (xdotool names: Return, ctrl+s)")
	cmd.Flags().StringArrayVar(&raw, "action", nil, "an action as JSON (repeatable)")
	return cmd
}

// parseAction reads one action as JSON: api.Action, or one of OpenAI's,
// which may be several of the layer's.
func parseAction(b []byte) ([]api.Action, error) {
	if display.IsOpenAI(b) {
		return display.FromOpenAI(b)
	}
	var a api.Action
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return nil, err
	}
	return []api.Action{a}, nil
}

func newDebugSelfTestCmd(dial direct.Dialer) *cobra.Command {
	o := vmdebug.SelfTestOptions{}
	cmd := &cobra.Command{
		Use:   "selftest OUT_DIR [--qmp SOCKET] [--qga SOCKET] [--image-dir DIR]",
		Short: "Check a running linux-desktop guest (screens, pointer, typing, clipboard, resolution, identity, clock)",
		Long: `Check a running images/linux-desktop guest the way hvkube uses it, and write
its screenshots to OUT_DIR. Meant to run under boot.sh, which sets the
sockets and $HVKUBE_IMAGE_DIR:

  images/linux-desktop/boot.sh "$dir" hvkube debug selftest /tmp/selftest

Exits 1 when a check fails.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := needSocket("qmp", o.QMP); err != nil {
				return err
			}
			if err := needSocket("qga", o.QGA); err != nil {
				return err
			}
			o.Out, o.Log = args[0], cmd.OutOrStdout()
			failed, err := vmdebug.SelfTest(cmd.Context(), dial, o)
			if err != nil {
				return err
			}
			if failed > 0 {
				return &cli.ExitError{Code: 1}
			}
			return nil
		},
	}
	socketFlag(cmd, &o.QMP, "qmp", "QMP_SOCKET", "QMP")
	socketFlag(cmd, &o.QGA, "qga", "QGA_SOCKET", "guest agent")
	cmd.Flags().StringVar(&o.ImageDir, "image-dir", os.Getenv("HVKUBE_IMAGE_DIR"), "the image's directory, for its image.json (env HVKUBE_IMAGE_DIR)")
	return cmd
}
