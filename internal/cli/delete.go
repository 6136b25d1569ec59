package cli

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hvkube/hvkube/internal/api"
)

func newDeleteCmd(e *env) *cobra.Command {
	var files []string
	var selector string
	var recursive, wait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "delete (KIND[,KIND...] NAME... | KIND/NAME... | KIND[,KIND...] -l SELECTOR | -f FILE|DIR|-)",
		Short: "Delete objects by name or by the files that made them",
		Long: `Delete objects. Deleting an agent cancels it; deleting a sandbox stops
and removes its VM; deleting a pool deletes its sandboxes. Such objects stay,
being deleted, until that is done; delete waits for it (--wait=false
returns at once).`,
		Example: `  hvkube delete agent book-flight-task-123
  hvkube delete pool/browser-workers
  hvkube delete agent/job-1 sandbox/desk-1
  hvkube delete sandbox -l hvkube.io/fork-of=desk
  hvkube delete -f examples/`,
		RunE: func(cmd *cobra.Command, args []string) error {
			type target struct{ kind, name string }
			var targets []target
			switch {
			case len(files) > 0 && len(args) > 0:
				return fmt.Errorf("delete takes either KIND NAME or -f, not both")
			case len(files) > 0:
				objs, err := readObjects(e.in, files, recursive)
				if err != nil {
					return err
				}
				for _, o := range objs {
					targets = append(targets, target{o.GetTypeMeta().Kind, o.GetMeta().Name})
				}
			case len(args) == 0:
				return fmt.Errorf("delete needs KIND NAME or -f FILE")
			default:
				groups, err := kindArgs(args)
				if err != nil {
					return err
				}
				for _, g := range groups {
					if g.kind.Kind == api.KindEvent {
						return fmt.Errorf("events cannot be deleted")
					}
					if len(g.names) > 0 && selector != "" {
						return fmt.Errorf("delete takes either names or -l, not both")
					}
					if len(g.names) == 0 && selector == "" {
						return fmt.Errorf("delete needs a name: hvkube delete %s NAME (or -l SELECTOR)", g.kind.Singular)
					}
				}
				for _, g := range groups {
					names := g.names
					if selector != "" {
						c, err := e.client()
						if err != nil {
							return err
						}
						objs, err := c.List(cmd.Context(), g.kind.Kind, selector)
						if err != nil {
							return err
						}
						if len(objs) == 0 {
							fmt.Fprintf(e.out, "no %s matches %s\n", g.kind.Plural, selector)
						}
						for _, o := range objs {
							names = append(names, o.GetMeta().Name)
						}
					}
					for _, n := range names {
						targets = append(targets, target{g.kind.Kind, n})
					}
				}
				if len(targets) == 0 {
					return nil
				}
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			failed := 0
			var pending []target
			for _, t := range targets {
				done, err := c.Delete(cmd.Context(), t.kind, t.name)
				if err != nil {
					fmt.Fprintf(e.errOut, "error: %v\n", err)
					failed++
					continue
				}
				if done {
					fmt.Fprintf(e.out, "%s %q deleted\n", strings.ToLower(t.kind), t.name)
				} else if !wait {
					fmt.Fprintf(e.out, "%s %q deletion requested\n", strings.ToLower(t.kind), t.name)
				} else {
					pending = append(pending, t)
				}
			}
			deadline := time.Now().Add(timeout)
			for _, t := range pending {
				for {
					_, err := c.Get(cmd.Context(), t.kind, t.name)
					if errors.Is(err, api.ErrNotFound) {
						fmt.Fprintf(e.out, "%s %q deleted\n", strings.ToLower(t.kind), t.name)
						break
					}
					if err != nil || time.Now().After(deadline) {
						if err == nil {
							err = fmt.Errorf("%s %q is still being deleted after %s (its controller has not finished: see hvkube describe %s %s)", strings.ToLower(t.kind), t.name, timeout, strings.ToLower(t.kind), t.name)
						}
						fmt.Fprintf(e.errOut, "error: %v\n", err)
						failed++
						break
					}
					select {
					case <-cmd.Context().Done():
						return cmd.Context().Err()
					case <-time.After(50 * time.Millisecond):
					}
				}
			}
			if failed > 0 {
				return &ExitError{Code: 1}
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "file, directory or - whose objects to delete")
	cmd.Flags().BoolVarP(&recursive, "recursive", "R", false, "read directories recursively")
	cmd.Flags().BoolVar(&wait, "wait", true, "wait until objects held by finalizers are gone")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long --wait waits")
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "delete the objects of KIND whose labels match (key=value,...)")
	return cmd
}
