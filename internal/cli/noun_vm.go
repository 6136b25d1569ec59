package cli

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/hvkube/hvkube/internal/api"
)

func newVMCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "vm",
		Short: "List sandbox VMs, pause and resume them, take screenshots",
		Long: `Work with individual sandboxes (the desktop VMs). These are shortcuts over
the same API as get, pause, resume, save, reset, screen and describe:
'hvkube vm list' is 'hvkube get sandboxes -o wide'.`,
		Example: `  hvkube vm list
  hvkube vm pause browser-pool-x7k2p
  hvkube vm resume browser-pool-x7k2p
  hvkube vm screenshot browser-pool-x7k2p -o screen.png
  hvkube vm console browser-pool-x7k2p`,
		Args: cobra.NoArgs,
	}
	pause := newSandboxOpCmd(e, "pause", "Pause running sandboxes (they stay in RAM)")
	pause.Example = "  hvkube vm pause browser-pool-x7k2p"
	resume := newSandboxOpCmd(e, "resume", "Resume paused or saved sandboxes")
	resume.Long = "Resume paused or saved sandboxes; returns when each guest answers."
	resume.Example = "  hvkube vm resume browser-pool-x7k2p"
	save := newSandboxOpCmd(e, "save", "Save sandboxes to disk and end their VMs")
	save.Example = "  hvkube vm save browser-pool-x7k2p"
	reset := newSandboxOpCmd(e, "reset", "Return sandboxes to their clean snapshot")
	reset.Example = "  hvkube vm reset browser-pool-x7k2p"
	cmd.AddCommand(newVMListCmd(e), newVMInfoCmd(e), pause, resume, save, reset, newVMScreenshotCmd(e), newVMConsoleCmd(e))
	return cmd
}

func newVMListCmd(e *env) *cobra.Command {
	var output, selector, pool string
	var watch, noHeaders bool
	cmd := &cobra.Command{
		Use:   "list [--pool POOL] [-o wide|json|yaml|name]",
		Short: "List sandboxes with their template, display and process (same as get sandboxes -o wide)",
		Example: `  hvkube vm list
  hvkube vm list --pool browser-pool
  hvkube vm list -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if pool != "" {
				if selector != "" {
					selector += ","
				}
				selector += "pool=" + pool
			}
			return e.runGet(cmd, "sandboxes", output, selector, watch, noHeaders)
		},
	}
	addListFlags(cmd, &output, &selector, &watch, &noHeaders, "wide")
	cmd.Flags().StringVarP(&pool, "pool", "p", "", "only the sandboxes of this pool (the label pool=POOL)")
	return cmd
}

func newVMInfoCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "info NAME",
		Short: "Show a sandbox's VM (its process and display), then the sandbox in detail with its recent events",
		Long: `Show a sandbox's VM: its status, the node it runs on, the PID of its VM's
process on that node (its QEMU, or Hyper-V's worker process) and where its
screen is served; then the sandbox in detail with its recent events, as
'hvkube describe sandbox' shows it.

A QEMU process is named after what it was started for: hvkube-sandbox:NAME:N
for a sandbox, hvkube-spare:TEMPLATE:N for a spare made ahead of need. A
sandbox that took a spare runs that QEMU, which keeps the spare's name: the
PID shown here (and by 'hvkube get sandboxes -o wide') is what ties a
process to its sandbox.`,
		Example: "  hvkube vm info browser-pool-x7k2p",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			o, err := c.Get(cmd.Context(), api.KindSandbox, args[0])
			if err != nil {
				return err
			}
			evs, err := c.Events(cmd.Context(), api.KindSandbox, args[0])
			if err != nil {
				return err
			}
			vmSummary(e.out, o.(*api.Sandbox))
			fmt.Fprintln(e.out)
			describe(e.out, o, evs, e.now())
			return nil
		},
	}
}

// vmSummary writes what vm info shows first: the sandbox's VM.
func vmSummary(w io.Writer, s *api.Sandbox) {
	tw := tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
	fmt.Fprintf(tw, "VM:\t%s (%s)\n", s.Metadata.Name, sandboxStatus(s))
	fmt.Fprintf(tw, "Node:\t%s\n", orDash(s.Status.Node))
	pid := "-"
	if s.Status.PID > 0 {
		pid = strconv.Itoa(s.Status.PID)
	}
	fmt.Fprintf(tw, "Process:\t%s\n", pid)
	fmt.Fprintf(tw, "Display:\t%s\n", orDash(s.Status.Display))
	tw.Flush()
}

// newVMScreenshotCmd is the screen command under vm, with -o/--output as
// another name for --save.
func newVMScreenshotCmd(e *env) *cobra.Command {
	cmd := newScreenCmd(e)
	var output string
	cmd.Use = "screenshot NAME [-o FILE]"
	cmd.Long += "\n\n-o FILE is the same as --save FILE."
	cmd.Example = `  hvkube vm screenshot browser-pool-x7k2p -o screen.png
  hvkube vm screenshot browser-pool-x7k2p --format jpeg --width 640 > small.jpg`
	cmd.Flags().StringVarP(&output, "output", "o", "", "write the image to FILE (same as --save)")
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		if !cmd.Flags().Changed("output") {
			return nil
		}
		if cmd.Flags().Changed("save") {
			return fmt.Errorf("give -o or --save, not both")
		}
		return cmd.Flags().Set("save", output)
	}
	return cmd
}

func newVMConsoleCmd(e *env) *cobra.Command {
	var open bool
	cmd := &cobra.Command{
		Use:   "console NAME [--open]",
		Short: "Show a sandbox's display and the link to its live view (vmconnect for Hyper-V)",
		Long: `Show where a sandbox's screen is served (status.display, on the server's
host) and print the link to its live view in the dashboard, which carries a
view-only display token valid for 5 minutes; with --open, open the link with
xdg-open. Same as 'hvkube console NAME', with details.

A sandbox of the hyperv backend has no live view in the dashboard: its
display is the VM's Hyper-V console: the command prints the vmconnect.exe
command line and, on Windows, opens vmconnect.`,
		Example: "  hvkube vm console browser-pool-x7k2p",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.console(cmd.Context(), args[0], open, true)
		},
	}
	cmd.Flags().BoolVar(&open, "open", false, "open the link in a browser (xdg-open)")
	return cmd
}
