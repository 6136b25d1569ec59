package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hvkube/hvkube/internal/api"
)

func newGetCmd(e *env) *cobra.Command {
	var output, selector string
	var watch, noHeaders bool
	cmd := &cobra.Command{
		Use:   "get KIND [NAME...]",
		Short: "List objects, or show some by name",
		Long: `List objects of a kind, or show the named ones.

Kinds: templates (tpl), sandboxes (sb), sandboxpools (pools, pool),
agents, displayservices (ds), nodes (no: each host's memory, desktops by
phase and how many more of each template fit), events (ev). Singular and
plural both work.`,
		Example: `  hvkube get pools
  hvkube get nodes -o wide
  hvkube get agents -o yaml
  hvkube get sandboxes -l pool=browser-workers -o wide
  hvkube get agents -w`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, names, err := splitKindArgs(args)
			if err != nil {
				return err
			}
			switch output {
			case "", "wide", "json", "yaml", "name":
			default:
				return fmt.Errorf("unknown output format %q: want wide, json, yaml or name", output)
			}
			if selector != "" {
				if _, err := api.ParseSelector(selector); err != nil {
					return err
				}
			}
			if watch {
				return e.watch(cmd, kind, selector, output, noHeaders)
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			var objs []api.Object
			if kind.Kind == api.KindEvent {
				evs, err := c.Events(cmd.Context(), "", "")
				if err != nil {
					return err
				}
				for _, ev := range evs {
					objs = append(objs, ev)
				}
			} else if len(names) == 0 {
				if objs, err = c.List(cmd.Context(), kind.Kind, selector); err != nil {
					return err
				}
			} else {
				for _, n := range names {
					o, err := c.Get(cmd.Context(), kind.Kind, n)
					if err != nil {
						return err
					}
					objs = append(objs, o)
				}
			}
			switch output {
			case "json", "yaml":
				var v any = listOf(kind.Kind, objs)
				if len(names) == 1 {
					v = objs[0]
				}
				if output == "json" {
					return printJSON(e.out, v)
				}
				return printYAML(e.out, v)
			case "name":
				for _, o := range objs {
					fmt.Fprintln(e.out, kindRef(o))
				}
				return nil
			}
			if len(objs) == 0 {
				fmt.Fprintf(e.errOut, "No %s found.\n", kind.Plural)
				return nil
			}
			newTablePrinter(e.out, kind.Kind, output == "wide", noHeaders, e.now).print(objs...)
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: wide, json, yaml or name")
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "label selector, e.g. pool=browser-workers,tier!=gpu")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "after listing, watch for changes")
	cmd.Flags().BoolVar(&noHeaders, "no-headers", false, "do not print the table header")
	return cmd
}

// splitKindArgs accepts "KIND NAME…" and "KIND/NAME".
func splitKindArgs(args []string) (api.KindInfo, []string, error) {
	kindName, names := args[0], args[1:]
	if k, n, ok := strings.Cut(kindName, "/"); ok {
		kindName = k
		names = append([]string{n}, names...)
	}
	k, ok := api.LookupKind(kindName)
	if !ok {
		return api.KindInfo{}, nil, fmt.Errorf("unknown resource type %q: want templates, sandboxes, sandboxpools, agents, displayservices, nodes, secrets or events", kindName)
	}
	return k, names, nil
}

func (e *env) watch(cmd *cobra.Command, kind api.KindInfo, selector, output string, noHeaders bool) error {
	c, err := e.client()
	if err != nil {
		return err
	}
	ch, err := c.Watch(cmd.Context(), kind.Plural, selector)
	if err != nil {
		return err
	}
	tp := newTablePrinter(e.out, kind.Kind, output == "wide", noHeaders, e.now)
	for ev := range ch {
		if ev.Err != nil {
			return ev.Err
		}
		switch output {
		case "json":
			printJSON(e.out, ev.Object)
		case "yaml":
			fmt.Fprintln(e.out, "---")
			printYAML(e.out, ev.Object)
		case "name":
			fmt.Fprintln(e.out, kindRef(ev.Object))
		default:
			tp.print(ev.Object)
		}
	}
	// Ctrl-C (or SIGTERM) ends a watch: that is how it is meant to end.
	return nil
}
