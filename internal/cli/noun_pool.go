package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hvkube/hvkube/internal/api"
)

// The noun-first commands (pool, agent, vm) are shortcuts over the same REST
// calls as apply, get, scale and delete: they build or name objects from
// flags and leave defaulting and validation to the server.

func newPoolCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pool",
		Short: "Create, list, scale and delete sandbox pools",
		Long: `Create, list, scale and delete sandbox pools with flags instead of YAML.
These are shortcuts over the same API as apply, get, scale and delete:
'hvkube pool list' is 'hvkube get pools'.`,
		Example: `  hvkube pool create --name browser-pool --template linux-desktop --count 5
  hvkube pool list
  hvkube pool scale browser-pool --count 8
  hvkube pool delete browser-pool`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newPoolCreateCmd(e), newPoolListCmd(e), newPoolScaleCmd(e), newPoolDeleteCmd(e))
	return cmd
}

func newPoolCreateCmd(e *env) *cobra.Command {
	var name, template, warmTier string
	var count, minReady int
	var labels []string
	cmd := &cobra.Command{
		Use:   "create --name NAME --template TEMPLATE [--count N] [flags]",
		Short: "Create a pool of warm sandboxes from a template",
		Long: `Create a SandboxPool that keeps --count sandboxes cloned from --template.

The pool's sandboxes carry the label pool=NAME (so that 'hvkube agent submit
--pool NAME' finds them) plus any --label given. --min-ready (at most
--count) is how many of them the pool keeps warm and idle; it defaults to 0.
--warm-tier says where idle sandboxes wait: paused (in RAM, the server's
default) or saved (on disk).
Other fields take the server's defaults; use 'hvkube apply -f' for the rest.

Fails if a pool of that name exists.`,
		Example: `  hvkube pool create --name browser-pool --template linux-desktop --count 5
  hvkube pool create --name batch --template linux-desktop --count 20 --min-ready 4 \
      --warm-tier saved --label team=search --label tier=cpu`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if name == "" {
				return fmt.Errorf("pool create needs --name NAME")
			}
			if template == "" {
				return fmt.Errorf("pool create needs --template TEMPLATE")
			}
			if count < 0 {
				return fmt.Errorf("--count: %d is negative", count)
			}
			tmplLabels := map[string]string{"pool": name}
			for _, l := range labels {
				k, v, ok := strings.Cut(l, "=")
				if !ok || k == "" {
					return fmt.Errorf("--label %q: want KEY=VALUE", l)
				}
				if k == "pool" {
					return fmt.Errorf("--label %q: the pool label is the pool's name, set by --name", l)
				}
				tmplLabels[k] = v
			}
			p := &api.SandboxPool{
				TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandboxPool},
				Metadata: api.ObjectMeta{Name: name},
				Spec: api.SandboxPoolSpec{
					Replicas: count,
					MinReady: minReady,
					WarmTier: warmTier,
					Template: api.SandboxTemplate{
						Metadata: api.TemplateMeta{Labels: tmplLabels},
						Spec:     api.SandboxSpec{TemplateRef: template},
					},
				},
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			if _, err := c.Create(cmd.Context(), p); err != nil {
				return err
			}
			fmt.Fprintf(e.out, "sandboxpool/%s created\n", name)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&name, "name", "", "the pool's name (required)")
	f.StringVar(&template, "template", "", "the Template its sandboxes are cloned from (required)")
	f.IntVar(&count, "count", 1, "how many sandboxes the pool holds (spec.replicas)")
	f.IntVar(&minReady, "min-ready", 0, "how many to keep warm and idle (spec.minReady)")
	f.StringVar(&warmTier, "warm-tier", "", "where idle sandboxes wait: paused or saved (server default: paused)")
	f.StringArrayVar(&labels, "label", nil, "KEY=VALUE label for the pool's sandboxes; repeatable")
	return cmd
}

func newPoolListCmd(e *env) *cobra.Command {
	var output, selector string
	var watch, noHeaders bool
	cmd := &cobra.Command{
		Use:   "list [-o wide|json|yaml|name]",
		Short: "List sandbox pools (same as get pools)",
		Example: `  hvkube pool list
  hvkube pool list -o wide`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.runGet(cmd, "sandboxpools", output, selector, watch, noHeaders)
		},
	}
	addListFlags(cmd, &output, &selector, &watch, &noHeaders, "")
	return cmd
}

func newPoolScaleCmd(e *env) *cobra.Command {
	count := -1
	cmd := &cobra.Command{
		Use:   "scale NAME --count N",
		Short: "Set the number of sandboxes in a pool (same as scale --replicas)",
		Example: `  hvkube pool scale browser-pool --count 8
  hvkube pool scale browser-pool --count 0`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("count") {
				return fmt.Errorf("pool scale needs --count N")
			}
			if count < 0 {
				return fmt.Errorf("--count: %d is negative", count)
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			if _, err := c.Scale(cmd.Context(), args[0], count); err != nil {
				return err
			}
			fmt.Fprintf(e.out, "sandboxpool/%s scaled\n", args[0])
			return nil
		},
	}
	cmd.Flags().IntVar(&count, "count", -1, "the number of sandboxes the pool should hold")
	return cmd
}

func newPoolDeleteCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME...",
		Short: "Delete pools (same as delete pool)",
		Long: `Delete pools by name. Prints "deleted" for each, or "deletion requested"
while the server still holds a pool back to clean up after it.`,
		Example: `  hvkube pool delete browser-pool`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.runCommand(cmd, newDeleteCmd(e), append([]string{"--", "sandboxpools"}, args...))
		},
	}
}

// addListFlags gives a noun-first list command the flags of get that make
// sense for it; defOutput is the default output format.
func addListFlags(cmd *cobra.Command, output, selector *string, watch, noHeaders *bool, defOutput string) {
	f := cmd.Flags()
	f.StringVarP(output, "output", "o", defOutput, "output format: wide, json, yaml or name")
	f.StringVarP(selector, "selector", "l", "", "label selector, e.g. team=search,tier!=gpu")
	f.BoolVarP(watch, "watch", "w", false, "after listing, watch for changes")
	f.BoolVar(noHeaders, "no-headers", false, "do not print the table header")
}

// runGet runs 'hvkube get KIND' with the given flags, so that a noun-first
// list prints exactly what get does.
func (e *env) runGet(cmd *cobra.Command, kind, output, selector string, watch, noHeaders bool) error {
	args := []string{kind}
	if output != "" {
		args = append(args, "--output", output)
	}
	if selector != "" {
		args = append(args, "--selector", selector)
	}
	if watch {
		args = append(args, "--watch")
	}
	if noHeaders {
		args = append(args, "--no-headers")
	}
	return e.runCommand(cmd, newGetCmd(e), args)
}

// runCommand runs another command's RunE in the context of cmd, with args
// (flags included) parsed as that command would parse them.
func (e *env) runCommand(cmd, other *cobra.Command, args []string) error {
	other.SetContext(cmd.Context())
	if err := other.ParseFlags(args); err != nil {
		return err
	}
	return other.RunE(other, other.Flags().Args())
}
