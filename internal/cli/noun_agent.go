package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/client"
)

func newAgentCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Submit agent tasks, list them and read their results",
		Long: `Submit workflow tasks to run on a pool's sandboxes (or on one named sandbox),
list agents and read their results, and print an mcp-agent's MCP address and
token. These are shortcuts over the same API as apply and get: 'hvkube agent
list' is 'hvkube get agents'.`,
		Example: `  hvkube agent submit --pool browser-pool --workflow book-flight.yaml --input '{"dest":"NYC"}'
  hvkube agent list
  hvkube agent result task-x7k2pq
  env $(hvkube agent token my-mcp-task) my-agent-loop`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newAgentSubmitCmd(e), newAgentListCmd(e), newAgentResultCmd(e), newAgentTokenCmd(e))
	return cmd
}

func newAgentSubmitCmd(e *env) *cobra.Command {
	var pool, sandbox, workflow, steps, input, name string
	var maxRetries int
	var timeout time.Duration
	var wait bool
	cmd := &cobra.Command{
		Use:   "submit (--pool POOL | --sandbox NAME) (--workflow FILE | --steps JSON) [flags]",
		Short: "Create a workflow agent: a list of computer-use steps run on a sandbox",
		Long: `Create an Agent of type workflow. Its steps run in order on a sandbox taken
from --pool (any sandbox labelled pool=POOL) or on the sandbox --sandbox
names.

--workflow FILE reads the steps from a YAML or JSON file; --steps takes the
same text inline. Either holds a list of steps or an object {steps: [...]}.
A step is one computer-use action, with the fields the input API takes:

  steps:
    - {action: left_click, coordinate: [500, 300]}
    - {action: type, text: "New York"}
    - {action: key, text: Return}
    - {action: wait, duration: 1}
    - {action: exec, command: [xdg-open, "https://example.com"]}

Unknown fields are errors; the server checks the actions themselves and names
the step at fault (spec.task.steps[N]).

--input is JSON handed to the task as spec.task.input. --name defaults to
task- and six random letters and digits. --timeout bounds the task (the
server's default is 30m); --max-retries is how often a failed run is tried
again.

Prints agent/NAME created. With --wait, then prints each phase the agent goes
through and, once it is Completed, Failed or Cancelled, its result as JSON;
the exit code is 0 if it Completed and 1 otherwise.`,
		Example: `  hvkube agent submit --pool browser-pool --workflow book-flight.yaml --input '{"dest":"NYC"}'
  hvkube agent submit --sandbox browser-agent-1 --name open-site \
      --steps '[{"action":"key","text":"ctrl+l"},{"action":"type","text":"example.com\n"}]'
  hvkube agent submit --pool browser-pool --workflow login.yaml --timeout 10m --max-retries 2 --wait`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			spec := api.AgentSpec{Type: "workflow"}
			switch {
			case pool != "" && sandbox != "":
				return fmt.Errorf("agent submit takes --pool or --sandbox, not both")
			case pool != "":
				spec.SandboxSelector = &api.SandboxSelector{Pool: pool}
			case sandbox != "":
				spec.SandboxName = sandbox
			default:
				return fmt.Errorf("agent submit needs --pool POOL or --sandbox NAME")
			}
			var err error
			switch {
			case workflow != "" && cmd.Flags().Changed("steps"):
				return fmt.Errorf("agent submit takes --workflow or --steps, not both")
			case workflow != "":
				data, rerr := os.ReadFile(workflow)
				if errors.Is(rerr, fs.ErrNotExist) {
					return fmt.Errorf("--workflow %s: no such file (give a YAML or JSON file of steps)", workflow)
				}
				if rerr != nil {
					return fmt.Errorf("--workflow: %w", rerr)
				}
				if spec.Task.Steps, err = decodeSteps(data); err != nil {
					return fmt.Errorf("--workflow %s: %w", workflow, err)
				}
			case cmd.Flags().Changed("steps"):
				if spec.Task.Steps, err = decodeSteps([]byte(steps)); err != nil {
					return fmt.Errorf("--steps: %w", err)
				}
			default:
				return fmt.Errorf("agent submit needs --workflow FILE or --steps JSON")
			}
			if cmd.Flags().Changed("input") {
				if err := api.CheckJSON([]byte(input)); err != nil {
					return fmt.Errorf("--input: %w", err)
				}
				var buf bytes.Buffer
				if err := json.Compact(&buf, []byte(input)); err != nil {
					return fmt.Errorf("--input: invalid JSON: %w", err)
				}
				spec.Task.Input = buf.Bytes()
			}
			if timeout < 0 {
				return fmt.Errorf("--timeout: %s is negative", timeout)
			}
			spec.Task.TimeoutSeconds = int(math.Ceil(timeout.Seconds()))
			spec.Completion.MaxRetries = maxRetries
			if name == "" {
				name = taskName()
			}
			a := &api.Agent{
				TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindAgent},
				Metadata: api.ObjectMeta{Name: name},
				Spec:     spec,
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			if _, err := c.Create(cmd.Context(), a); err != nil {
				return err
			}
			fmt.Fprintf(e.out, "agent/%s created\n", name)
			if !wait {
				return nil
			}
			done, err := e.followAgent(cmd.Context(), c, name)
			if err != nil {
				return err
			}
			if err := printAgentResult(cmd.Context(), e, c, name); err != nil {
				return err
			}
			if phase := done.Status.Phase; phase != api.AgentCompleted {
				return &ExitError{Code: 1, Err: fmt.Errorf("agent/%s did not complete: it is %s", name, phase)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&pool, "pool", "", "run on a sandbox of this pool (sandboxSelector.pool)")
	f.StringVar(&sandbox, "sandbox", "", "run on this sandbox (sandboxName)")
	f.StringVar(&workflow, "workflow", "", "YAML or JSON file holding the steps")
	f.StringVar(&steps, "steps", "", "the steps as inline JSON (or YAML)")
	f.StringVar(&input, "input", "", "JSON input for the task (spec.task.input)")
	f.StringVar(&name, "name", "", "the agent's name (default task-XXXXXX)")
	f.IntVar(&maxRetries, "max-retries", 0, "how often to retry a failed run (spec.completion.maxRetries)")
	f.DurationVar(&timeout, "timeout", 0, "how long the task may take, e.g. 30m (server default 30m)")
	f.BoolVarP(&wait, "wait", "w", false, "follow the agent until it ends, print its result, exit 1 unless it Completed")
	return cmd
}

// decodeSteps reads workflow steps from YAML or JSON: a list of actions or
// an object {steps: [...]}. It is as strict as apply: unknown fields, wrong
// types and duplicate keys are errors naming the field (steps[0].foo).
func decodeSteps(data []byte) ([]api.Action, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("empty: want a list of steps or {steps: [...]}")
	}
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("invalid YAML or JSON: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("invalid YAML or JSON: %w", err)
	}
	var list any
	switch t := v.(type) {
	case []any:
		list = t
	case map[string]any:
		for k := range t {
			if k != "steps" {
				return nil, api.Invalid(k, "unknown field: want a list of steps or {steps: [...]}")
			}
		}
		if list = t["steps"]; list == nil {
			return nil, api.Invalid("steps", "required")
		}
	default:
		return nil, errors.New("want a list of steps or {steps: [...]}")
	}
	// Decode the steps as part of an Agent, so that they get exactly the
	// checks apply gives a file, then name fields relative to the steps.
	doc := map[string]any{
		"apiVersion": api.Version, "kind": api.KindAgent,
		"metadata": map[string]any{"name": "steps"},
		"spec":     map[string]any{"task": map[string]any{"steps": list}},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	o, err := api.DecodeOne(b, api.DecodeOptions{})
	if err != nil {
		var fe *api.FieldError
		if errors.As(err, &fe) {
			return nil, api.Invalid(strings.TrimPrefix(fe.Field, "spec.task."), "%s", fe.Detail)
		}
		return nil, err
	}
	steps := o.(*api.Agent).Spec.Task.Steps
	if len(steps) == 0 {
		return nil, api.Invalid("steps", "no steps: a workflow needs at least one")
	}
	return steps, nil
}

// taskName is a fresh agent name: "task-" and six lower-case letters and
// digits.
func taskName() string {
	return "task-" + strings.ToLower(rand.Text()[:6])
}

// followAgent prints each phase the agent goes through and returns it once
// it is Completed, Failed or Cancelled. It watches all agents and picks this
// one out (the API selects by label, not by name), and watches again when a
// stream breaks. It fails if the agent is deleted first.
func (e *env) followAgent(ctx context.Context, c *client.Client, name string) (*api.Agent, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	last := ""
	for {
		ch, err := c.Watch(ctx, "agents", "")
		if err != nil {
			return nil, fmt.Errorf("follow agent/%s: %w", name, err)
		}
		for ev := range ch {
			if ev.Err != nil {
				break // watch again
			}
			a, ok := ev.Object.(*api.Agent)
			if !ok || a.Metadata.Name != name {
				continue
			}
			if ev.Type == "DELETED" {
				return nil, fmt.Errorf("agent/%s was deleted before it ended", name)
			}
			if line := phaseLine(a); line != last {
				fmt.Fprintf(e.out, "agent/%s %s\n", name, line)
				last = line
			}
			switch a.Status.Phase {
			case api.AgentCompleted, api.AgentFailed, api.AgentCancelled:
				return a, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// phaseLine is an agent's phase with the sandbox it runs on, or, once it
// ended, the reason it gave.
func phaseLine(a *api.Agent) string {
	phase := orDefault(phaseOf(a, a.Status.Phase), api.AgentPending)
	switch {
	case a.Status.Phase == api.AgentFailed || a.Status.Phase == api.AgentCancelled:
		var why []string
		for _, s := range []string{a.Status.Reason, a.Status.Message} {
			if s != "" {
				why = append(why, s)
			}
		}
		if len(why) > 0 {
			return phase + ": " + strings.Join(why, ": ")
		}
	case a.Status.Sandbox != "":
		return phase + " on sandbox/" + a.Status.Sandbox
	}
	return phase
}

func newAgentListCmd(e *env) *cobra.Command {
	var output, selector string
	var watch, noHeaders bool
	cmd := &cobra.Command{
		Use:   "list [-o wide|json|yaml|name]",
		Short: "List agents (same as get agents)",
		Example: `  hvkube agent list
  hvkube agent list -o wide
  hvkube agent list -w`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.runGet(cmd, "agents", output, selector, watch, noHeaders)
		},
	}
	addListFlags(cmd, &output, &selector, &watch, &noHeaders, "")
	return cmd
}

func newAgentResultCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "result NAME",
		Short: "Print an agent's result as JSON",
		Long: `Print an agent's result as JSON: its status (the phase in lower case),
success, output, artifacts, duration, sandbox and attempts. An agent that has
not ended yet shows its current status and no output.`,
		Example: `  hvkube agent result task-x7k2pq`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			return printAgentResult(cmd.Context(), e, c, args[0])
		},
	}
}

func printAgentResult(ctx context.Context, e *env, c *client.Client, name string) error {
	var res json.RawMessage
	if _, err := c.Do(ctx, http.MethodGet, "/api/v1/agents/"+url.PathEscape(name)+"/result", nil, "", &res); err != nil {
		return err
	}
	return printJSON(e.out, res)
}
