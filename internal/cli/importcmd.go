package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/osworld"
)

// maxTaskFile bounds a task file and a steps file.
const maxTaskFile = 1 << 20

func newImportCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "import",
		Short: "Turn tasks of other tools into hvkube Agents",
	}
	cmd.AddCommand(newImportOSWorldCmd(e))
	return cmd
}

func newImportOSWorldCmd(e *env) *cobra.Command {
	var pool, user, stepsFile string
	var settle float64
	var apply bool
	cmd := &cobra.Command{
		Use:   "osworld TASK.json... --pool POOL [--steps FILE] [--apply]",
		Short: "Turn OSWorld task files into workflow Agents",
		Long: `Turn OSWorld task files (evaluation_examples/examples/DOMAIN/ID.json) into
workflow Agents that run on sandboxes of --pool, and print them as YAML (or
create them with --apply).

Each Agent's steps are:
  1. the task's config, as exec and wait steps run as the desktop's user:
     launch, execute/command, open, sleep, activate_window, close_window,
     download (fetched in the guest, under its egress policy) and
     chrome_open_tabs (browser-desktop);
  2. the steps of --steps FILE (a YAML or JSON list of workflow steps): what
     does the task, such as a recorded run, or an exec step that starts your
     agent program in the guest (it finds the task in HVKUBE_TASK_INPUT);
  3. the evaluator's postconfig, then its metrics as assert steps:
     exact_match and check_include_exclude over vm_command_line or vm_file
     results with rule expectations ("and" of several is every assert),
     each retried for --settle seconds until it passes.

The instruction is the task's input: {"instruction": ..., "osworldTask": ID}.
What does not map (another setup type, metric or getter, an "or" of metrics,
"until" retries, options) is printed on stderr and kept on the Agent in the
annotation ` + osworld.UnmappedAnnotation + `: nothing is dropped silently.
Without --steps the Agent runs setup then evaluation at once, which checks
that a task starts undone.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var steps []api.Action
			if stepsFile != "" {
				var err error
				if steps, err = readSteps(stepsFile); err != nil {
					return err
				}
			}
			var agents []*api.Agent
			for _, f := range args {
				data, err := readBounded(f, maxTaskFile)
				if err != nil {
					return err
				}
				a, notes, err := osworld.Import(data, osworld.ImportOptions{Pool: pool, User: user, Steps: steps, Settle: settle})
				if err != nil {
					return fmt.Errorf("%s: %w", f, err)
				}
				for _, n := range notes {
					fmt.Fprintf(e.errOut, "%s: not mapped: %s\n", f, n)
				}
				agents = append(agents, a)
			}
			if !apply {
				for i, a := range agents {
					if i > 0 {
						fmt.Fprintln(e.out, "---")
					}
					if err := printYAML(e.out, a); err != nil {
						return err
					}
				}
				return nil
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			for _, a := range agents {
				if _, err := c.Create(cmd.Context(), a); err != nil {
					return fmt.Errorf("agent/%s: %w", a.Metadata.Name, err)
				}
				fmt.Fprintf(e.out, "agent/%s created\n", a.Metadata.Name)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&pool, "pool", "", "the sandbox pool the Agents run on (required)")
	cmd.Flags().StringVar(&user, "user", api.DefaultGuestUser, "the desktop's user, whom setup and checks run as")
	cmd.Flags().StringVar(&stepsFile, "steps", "", "a YAML or JSON list of workflow steps that do the task, run between setup and evaluation")
	cmd.Flags().Float64Var(&settle, "settle", 10, "seconds each check retries until it passes (0..100): the desktop acts after its input arrives")
	cmd.Flags().BoolVar(&apply, "apply", false, "create the Agents on the server instead of printing them")
	cmd.MarkFlagRequired("pool")
	return cmd
}

// readBounded reads a file of at most max bytes.
func readBounded(name string, max int64) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s: larger than %d bytes", name, max)
	}
	return data, nil
}

// readSteps reads a YAML or JSON list of workflow steps, strictly.
func readSteps(name string) ([]api.Action, error) {
	data, err := readBounded(name, maxTaskFile)
	if err != nil {
		return nil, err
	}
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("--steps %s: %w", name, err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	var steps []api.Action
	if err := dec.Decode(&steps); err != nil {
		return nil, fmt.Errorf("--steps %s: want a list of workflow steps: %w", name, err)
	}
	return steps, nil
}
