package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/client"
)

func newGetCmd(e *env) *cobra.Command {
	var output, selector string
	var watch, noHeaders bool
	cmd := &cobra.Command{
		Use:   "get KIND[,KIND...] [NAME...] | KIND/NAME...",
		Short: "List objects, or show some by name",
		Long: `List objects of a kind, or show the named ones.

Kinds: templates (tpl), sandboxes (sb), sandboxpools (pools, pool),
agents, displayservices (ds), nodes (no: each host's memory, desktops by
phase and how many more of each template fit), secrets, events (ev).
Singular and plural both work. Several kinds go comma-separated (one table
each), and objects of different kinds as KIND/NAME arguments.`,
		Example: `  hvkube get pools
  hvkube get nodes -o wide
  hvkube get agents -o yaml
  hvkube get sandboxes -l pool=browser-workers -o wide
  hvkube get agents -w
  hvkube get pools,sandboxes
  hvkube get pool/browser-workers agent/book-flight-task-123`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			groups, err := kindArgs(args)
			if err != nil {
				return err
			}
			switch output {
			case "", "wide", "json", "yaml", "name":
			default:
				return fmt.Errorf("unknown output format %q: want wide, json, yaml or name", output)
			}
			named := 0
			for _, g := range groups {
				named += len(g.names)
			}
			if selector != "" {
				if named > 0 {
					return fmt.Errorf("-l selects among all the objects of a kind: give it no names")
				}
				if _, err := api.ParseSelector(selector); err != nil {
					return err
				}
			}
			if watch {
				if len(groups) > 1 {
					return fmt.Errorf("-w follows one kind at a time, not %s", args[0])
				}
				return e.watch(cmd, groups[0].kind, selector, output, noHeaders)
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			lists := make([][]api.Object, len(groups))
			for i, g := range groups {
				if lists[i], err = getKind(cmd.Context(), c, g, selector); err != nil {
					return err
				}
			}
			switch output {
			case "json", "yaml":
				var v any
				switch {
				case len(groups) == 1 && named == 1:
					v = lists[0][0]
				case len(groups) == 1:
					v = listOf(groups[0].kind.Kind, lists[0])
				default:
					items := []api.Object{}
					for _, objs := range lists {
						items = append(items, objs...)
					}
					v = map[string]any{"apiVersion": api.Version, "kind": "List", "items": items}
				}
				if output == "json" {
					return printJSON(e.out, v)
				}
				return printYAML(e.out, v)
			case "name":
				for _, objs := range lists {
					for _, o := range objs {
						fmt.Fprintln(e.out, kindRef(o))
					}
				}
				return nil
			}
			printed := 0
			for i, objs := range lists {
				if len(objs) == 0 {
					continue
				}
				if printed > 0 {
					fmt.Fprintln(e.out)
				}
				newTablePrinter(e.out, groups[i].kind.Kind, output == "wide", noHeaders, e.now).print(objs...)
				printed++
			}
			switch {
			case printed > 0:
			case len(groups) == 1:
				fmt.Fprintf(e.errOut, "No %s found.\n", groups[0].kind.Plural)
			default:
				fmt.Fprintln(e.errOut, "No resources found.")
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: wide, json, yaml or name")
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "label selector, e.g. pool=browser-workers,tier!=gpu")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "after listing, watch for changes")
	cmd.Flags().BoolVar(&noHeaders, "no-headers", false, "do not print the table header")
	return cmd
}

// kindNames is one kind of a command's arguments and the names given
// with it (none: every object of the kind).
type kindNames struct {
	kind  api.KindInfo
	names []string
}

// kindArgs reads a command's object arguments as kubectl does: "KIND
// [NAME…]", "KIND,KIND… [NAME…]" (each kind with the same names), or
// "KIND/NAME…" (each argument a kind and a name). A kind given twice is
// one group, in the order first given.
func kindArgs(args []string) ([]kindNames, error) {
	var out []kindNames
	add := func(kindName string, names ...string) error {
		k, ok := api.LookupKind(kindName)
		if !ok {
			return fmt.Errorf("unknown resource type %q: want templates, sandboxes, sandboxpools, agents, displayservices, nodes, secrets or events", kindName)
		}
		for i := range out {
			if out[i].kind.Kind == k.Kind {
				out[i].names = append(out[i].names, names...)
				return nil
			}
		}
		out = append(out, kindNames{kind: k, names: names})
		return nil
	}
	if strings.Contains(args[0], "/") {
		for _, a := range args {
			k, n, ok := strings.Cut(a, "/")
			if !ok || k == "" || n == "" {
				return nil, fmt.Errorf("%q: when one argument is KIND/NAME, every argument must be", a)
			}
			if err := add(k, n); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	names := args[1:]
	for _, n := range names {
		if strings.Contains(n, "/") {
			return nil, fmt.Errorf("%q: give either KIND NAME… or KIND/NAME…, not both", n)
		}
	}
	for _, k := range strings.Split(args[0], ",") {
		if err := add(k, names...); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// getKind reads g's named objects, or lists its kind by selector when it
// names none. Events are listed whole.
func getKind(ctx context.Context, c *client.Client, g kindNames, selector string) ([]api.Object, error) {
	switch {
	case g.kind.Kind == api.KindEvent:
		evs, err := c.Events(ctx, "", "")
		if err != nil {
			return nil, err
		}
		objs := make([]api.Object, 0, len(evs))
		for _, ev := range evs {
			objs = append(objs, ev)
		}
		return objs, nil
	case len(g.names) == 0:
		return c.List(ctx, g.kind.Kind, selector)
	}
	objs := make([]api.Object, 0, len(g.names))
	for _, n := range g.names {
		o, err := c.Get(ctx, g.kind.Kind, n)
		if err != nil {
			return nil, err
		}
		objs = append(objs, o)
	}
	return objs, nil
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
