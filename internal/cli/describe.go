package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/hvkube/hvkube/internal/api"
)

func newDescribeCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:     "describe KIND NAME... | KIND/NAME...",
		Short:   "Show an object in detail, with its recent events",
		Example: "  hvkube describe pool browser-workers\n  hvkube describe sandbox/desk-1",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			groups, err := kindArgs(args)
			if err != nil {
				return err
			}
			for _, g := range groups {
				if len(g.names) == 0 {
					return fmt.Errorf("describe needs a name: hvkube describe %s NAME", g.kind.Singular)
				}
				if g.kind.Kind == api.KindEvent {
					return fmt.Errorf("events cannot be described: use hvkube get events")
				}
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			first := true
			for _, g := range groups {
				for _, name := range g.names {
					o, err := c.Get(cmd.Context(), g.kind.Kind, name)
					if err != nil {
						return err
					}
					evs, err := c.Events(cmd.Context(), g.kind.Kind, name)
					if err != nil {
						return err
					}
					if !first {
						fmt.Fprintln(e.out)
					}
					first = false
					describe(e.out, o, evs, e.now())
				}
			}
			return nil
		},
	}
}

func describe(w io.Writer, o api.Object, evs []*api.Event, now time.Time) {
	m := o.GetMeta()
	tw := tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
	fmt.Fprintf(tw, "Name:\t%s\n", m.Name)
	fmt.Fprintf(tw, "Kind:\t%s\n", o.GetTypeMeta().Kind)
	fmt.Fprintf(tw, "Labels:\t%s\n", sortedLabels(m.Labels))
	if len(m.Annotations) > 0 {
		fmt.Fprintf(tw, "Annotations:\t%s\n", sortedLabels(m.Annotations))
	}
	fmt.Fprintf(tw, "UID:\t%s\n", m.UID)
	fmt.Fprintf(tw, "Created:\t%s (%s ago)\n", m.CreationTimestamp.Local().Format(time.RFC1123Z), age(m.CreationTimestamp, now))
	if m.DeletionTimestamp != nil {
		fmt.Fprintf(tw, "Deleting since:\t%s\n", m.DeletionTimestamp.Local().Format(time.RFC1123Z))
	}
	for _, r := range m.OwnerReferences {
		fmt.Fprintf(tw, "Owned by:\t%s/%s\n", strings.ToLower(r.Kind), r.Name)
	}
	fmt.Fprintf(tw, "Generation:\t%d\n", m.Generation)
	fmt.Fprintf(tw, "Resource Version:\t%s\n", m.ResourceVersion)
	tw.Flush()
	section(w, "Spec", o.GetSpec())
	section(w, "Status", o.GetStatus())
	fmt.Fprintln(w, "Events:")
	if len(evs) == 0 {
		fmt.Fprintln(w, "  <none>")
		return
	}
	tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  LAST SEEN\tTYPE\tREASON\tMESSAGE")
	for _, ev := range evs {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", age(ev.Timestamp, now), ev.Type, ev.Reason, ev.Message)
	}
	tw.Flush()
}

func section(w io.Writer, title string, v any) {
	fmt.Fprintf(w, "%s:\n", title)
	j, _ := json.Marshal(v)
	if string(j) == "{}" || string(j) == "null" {
		fmt.Fprintln(w, "  <none>")
		return
	}
	y, err := yaml.JSONToYAML(j)
	if err != nil {
		fmt.Fprintf(w, "  %s\n", j)
		return
	}
	for _, line := range strings.Split(strings.TrimRight(string(y), "\n"), "\n") {
		fmt.Fprintf(w, "  %s\n", line)
	}
}
