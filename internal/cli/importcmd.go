package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

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
	var pool, user, stepsFile, evaluator, osworldDir, python, pythonPath, cache string
	var settle float64
	var apply, unchecked bool
	cmd := &cobra.Command{
		Use:   "osworld TASK.json... --pool POOL [--evaluator osworld --osworld DIR] [--steps FILE] [--apply]",
		Short: "Turn OSWorld task files into Agents",
		Long: `Turn OSWorld task files (evaluation_examples/examples/DOMAIN/ID.json) into
Agents that run on sandboxes of --pool, and print them as YAML (or create
them with --apply).

With --evaluator osworld (and --osworld DIR, OSWorld's directory on the
hosts that run the Agents, with the Python modules its evaluators import),
each task runs with OSWorld's own code: a custom Agent whose host command is
the Python SDK's hvkube.osworld_task, which sets the task up with OSWorld's
SetupController on the Agent's sandbox, runs the OSWorld actions of --steps
FILE (a JSON list: pyautogui code, WAIT, DONE, FAIL), and evaluates it with
the task's own evaluator: the Agent completes when the score is 1, and
fails otherwise. Every metric OSWorld has is then checked as OSWorld checks
it. The node must allow host commands (hvkube serve --allow-host-commands),
and python3 there must find the hvkube package (--pythonpath).

Without it (--evaluator map, the default) each task becomes a workflow
Agent, and its steps are:
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
A task with a part that does not map (another setup type, metric or getter,
an "or" of metrics, "until" retries, options) is refused, since its Agent
could pass without the check: run it with --evaluator osworld, or import it
anyway with --unchecked (what does not map is then printed on stderr and
kept on the Agent in the annotation ` + osworld.UnmappedAnnotation + `).
Without --steps the Agent runs setup then evaluation at once, which checks
that a task starts undone.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var steps []api.Action
			var run *osworld.OSWorldRun
			switch evaluator {
			case "map":
				if osworldDir != "" {
					return fmt.Errorf("--osworld: only with --evaluator osworld")
				}
				if stepsFile != "" {
					var err error
					if steps, err = readSteps(stepsFile); err != nil {
						return err
					}
				}
			case "osworld":
				var err error
				if run, err = osworldRun(osworldDir, stepsFile, cache, python, pythonPath); err != nil {
					return err
				}
			default:
				return fmt.Errorf("--evaluator %q: want map or osworld", evaluator)
			}
			var agents []*api.Agent
			for _, f := range args {
				data, err := readBounded(f, maxTaskFile)
				if err != nil {
					return err
				}
				opts := osworld.ImportOptions{Pool: pool, User: user, Steps: steps, Settle: settle}
				if run != nil {
					r := *run
					if r.Task, err = filepath.Abs(f); err != nil {
						return err
					}
					opts.OSWorld = &r
				}
				a, notes, err := osworld.Import(data, opts)
				if err != nil {
					return fmt.Errorf("%s: %w", f, err)
				}
				for _, n := range notes {
					fmt.Fprintf(e.errOut, "%s: not mapped: %s\n", f, n)
				}
				if len(notes) > 0 && !unchecked {
					return fmt.Errorf("%s: %d parts of the task do not map, and its Agent could pass without its check: run it with OSWorld's own code (--evaluator osworld --osworld DIR), or import it anyway (--unchecked)", f, len(notes))
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
	cmd.Flags().StringVar(&stepsFile, "steps", "", "what does the task, between setup and evaluation: a YAML or JSON list of workflow steps (--evaluator map), or a JSON list of OSWorld actions (--evaluator osworld)")
	cmd.Flags().StringVar(&evaluator, "evaluator", "map", "map: the task's setup and checks as workflow steps; osworld: run it with OSWorld's own code (needs --osworld)")
	cmd.Flags().StringVar(&osworldDir, "osworld", "", "OSWorld's directory on the hosts that run the Agents (--evaluator osworld)")
	cmd.Flags().StringVar(&cache, "cache", "", "OSWorld's cache of task files on those hosts (default: OSWORLD/cache)")
	cmd.Flags().StringVar(&python, "python", "python3", "the Python that runs hvkube.osworld_task there")
	cmd.Flags().StringVar(&pythonPath, "pythonpath", "", "its PYTHONPATH (the hvkube SDK's directory, OSWorld's modules), when not installed")
	cmd.Flags().BoolVar(&unchecked, "unchecked", false, "import tasks with parts that do not map (their Agents may pass without the check)")
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

// osworldRun checks --evaluator osworld's flags: the paths the Agents'
// host command gets, made absolute.
func osworldRun(dir, steps, cache, python, pythonPath string) (*osworld.OSWorldRun, error) {
	if dir == "" {
		return nil, fmt.Errorf("--osworld: required with --evaluator osworld: OSWorld's directory on the hosts that run the Agents")
	}
	abs := func(flag, p string) (string, error) {
		if p == "" {
			return "", nil
		}
		a, err := filepath.Abs(p)
		if err != nil {
			return "", fmt.Errorf("%s: %w", flag, err)
		}
		return a, nil
	}
	r := &osworld.OSWorldRun{Python: python, PythonPath: pythonPath}
	var err error
	if r.Dir, err = abs("--osworld", dir); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(filepath.Join(r.Dir, "desktop_env")); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("--osworld %s: not OSWorld's directory (no desktop_env/ in it)", dir)
	}
	if r.Steps, err = abs("--steps", steps); err != nil {
		return nil, err
	}
	if r.Steps != "" {
		data, err := readBounded(r.Steps, maxTaskFile)
		if err != nil {
			return nil, err
		}
		var actions []any
		if err := json.Unmarshal(data, &actions); err != nil {
			return nil, fmt.Errorf("--steps %s: want a JSON list of OSWorld actions: %w", steps, err)
		}
	}
	if r.Cache, err = abs("--cache", cache); err != nil {
		return nil, err
	}
	return r, nil
}
