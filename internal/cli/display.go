package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hvkube/hvkube/internal/api"
)

// maxDisplayTTL is the longest a display token lives (the server refuses
// longer).
const maxDisplayTTL = time.Hour

func newDisplayCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "display",
		Short: "Links to sandboxes' live displays",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newDisplayURLCmd(e))
	return cmd
}

func newDisplayURLCmd(e *env) *cobra.Command {
	var ttl time.Duration
	var control string
	var ws bool
	cmd := &cobra.Command{
		Use:   "url SANDBOX [--ttl 5m] [--control KEY] [--ws]",
		Short: "Print a ready-to-open link to a sandbox's live display",
		Long: `Print a link to the dashboard page of a sandbox with its live display. The
link carries a display token that opens this sandbox's display only and
expires after --ttl (at most 1h). With --control, the token also lets its
viewer send keyboard and mouse input while KEY is the key of the sandbox's
current take-over (what 'hvkube control take' printed); other viewers only
watch. With --ws, the raw
WebSocket URL (VNC over WebSocket, for noVNC and other viewers) is printed
too.`,
		Example: `  hvkube display url browser-agent-1
  hvkube display url browser-agent-1 --ttl 30m --ws`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if ttl < time.Second || ttl > maxDisplayTTL {
				return fmt.Errorf("--ttl %s: want 1s to %s", ttl, maxDisplayTTL)
			}
			page, wsURL, _, err := e.displayLinks(cmd.Context(), args[0], control, ttl)
			if err != nil {
				return err
			}
			fmt.Fprintln(e.out, page)
			if ws {
				fmt.Fprintln(e.out, wsURL)
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", 5*time.Minute, "how long the link works (at most 1h)")
	cmd.Flags().StringVar(&control, "control", "", "the key of the sandbox's current take-over: the viewer may send input")
	cmd.Flags().BoolVar(&ws, "ws", false, "also print the display's WebSocket URL")
	return cmd
}

// displayLinks checks that sandbox has a display and returns the links to
// it (the dashboard page and the WebSocket), and the sandbox.
func (e *env) displayLinks(ctx context.Context, sandbox, control string, ttl time.Duration) (page, ws string, sb *api.Sandbox, err error) {
	c, err := e.client()
	if err != nil {
		return "", "", nil, err
	}
	o, err := c.Get(ctx, api.KindSandbox, sandbox)
	if err != nil {
		return "", "", nil, err
	}
	sb = o.(*api.Sandbox)
	if sb.Status.Display == "" {
		return "", "", sb, fmt.Errorf("sandbox/%s has no display yet: it is %s", sandbox, orDefault(phaseOf(sb, sb.Status.Phase), api.SandboxPending))
	}
	tok, err := c.DisplayToken(ctx, sandbox, control, ttl)
	if err != nil {
		return "", "", sb, err
	}
	return tok.Page, tok.URL, sb, nil
}

func newConsoleCmd(e *env) *cobra.Command {
	var open bool
	cmd := &cobra.Command{
		Use:   "console SANDBOX [--open]",
		Short: "Print (or open) the link to a sandbox's live view",
		Long: `Print the link to the dashboard page of a sandbox with its live display (a
view-only display token valid for 5 minutes rides in the link). With
--open the link is opened in a browser with xdg-open. A Hyper-V sandbox
has no live view: its vmconnect.exe command line is printed instead, and
--open runs it (on Windows).`,
		Example: `  hvkube console browser-agent-1
  hvkube console browser-agent-1 --open`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.console(cmd.Context(), args[0], open, false)
		},
	}
	cmd.Flags().BoolVar(&open, "open", false, "open the link in a browser (xdg-open)")
	return cmd
}

// console prints the live-view link of sandbox, with details when verbose,
// and opens it when open is set.
func (e *env) console(ctx context.Context, sandbox string, open, verbose bool) error {
	if host, vm, ok, err := e.vmconnectOf(ctx, sandbox); err != nil || ok {
		if err != nil {
			return err
		}
		// vm console opens the VM's console where vmconnect exists.
		return vmconnect(ctx, e.out, host, vm, open || verbose && runtime.GOOS == "windows")
	}
	page, _, sb, err := e.displayLinks(ctx, sandbox, "", 5*time.Minute)
	if err != nil {
		return err
	}
	if verbose {
		fmt.Fprintf(e.out, "sandbox/%s is %s\n", sandbox, orDefault(phaseOf(sb, sb.Status.Phase), api.SandboxPending))
		fmt.Fprintf(e.out, "display:    %s (%s, on the server's host)\n", sb.Status.Display, orDefault(sb.Spec.Display.Protocol, api.DefaultProtocol))
		if res := orDefault(sb.Status.Resolution, sb.Spec.Display.Resolution); res != "" {
			fmt.Fprintf(e.out, "resolution: %s\n", res)
		}
		fmt.Fprintf(e.out, "live view:  %s\n", page)
		fmt.Fprintf(e.out, "            (the link works for 5 minutes; hvkube display url %s --ttl 1h for longer)\n", sandbox)
	} else {
		fmt.Fprintln(e.out, page)
	}
	if !open {
		return nil
	}
	return openBrowser(ctx, page)
}

// openBrowser opens link with xdg-open. The API token stays out of the
// browser's environment; the link carries only the display token.
func openBrowser(ctx context.Context, link string) error {
	path, err := exec.LookPath("xdg-open")
	if err != nil {
		return fmt.Errorf("--open: xdg-open is not installed; open the link above yourself")
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, link)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HVKUBE_TOKEN=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("xdg-open: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// vmconnectOf reports whether sandbox's display is a Hyper-V console
// (status.display "vmconnect:HOST/VM", which the hyperv backend gives),
// and where.
func (e *env) vmconnectOf(ctx context.Context, sandbox string) (host, vm string, ok bool, err error) {
	c, err := e.client()
	if err != nil {
		return "", "", false, err
	}
	o, err := c.Get(ctx, api.KindSandbox, sandbox)
	if err != nil {
		return "", "", false, err
	}
	rest, found := strings.CutPrefix(o.(*api.Sandbox).Status.Display, "vmconnect:")
	if !found {
		return "", "", false, nil
	}
	host, vm, found = strings.Cut(rest, "/")
	if !found || host == "" || vm == "" || strings.HasPrefix(vm, "-") || strings.HasPrefix(host, "-") {
		return "", "", false, fmt.Errorf("sandbox/%s: unexpected display %q", sandbox, o.(*api.Sandbox).Status.Display)
	}
	return host, vm, true, nil
}

// vmconnect prints how to open a Hyper-V VM's console and, on Windows when
// asked, opens it with vmconnect.exe (arguments as a list). The server's
// live view does not serve Hyper-V sandboxes: they have no VNC server.
func vmconnect(_ context.Context, out io.Writer, host, vm string, open bool) error {
	fmt.Fprintf(out, "vmconnect.exe %s %s\n", host, vm)
	if !open {
		return nil
	}
	if runtime.GOOS != "windows" {
		return fmt.Errorf("the sandbox's display is the Hyper-V console of VM %s on %s: run the command above on Windows", vm, host)
	}
	path, err := exec.LookPath("vmconnect.exe")
	if err != nil {
		return fmt.Errorf("vmconnect.exe is not installed: add the Hyper-V management tools (%w)", err)
	}
	cmd := exec.Command(path, host, vm)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HVKUBE_TOKEN=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("vmconnect.exe: %w", err)
	}
	return cmd.Process.Release()
}
