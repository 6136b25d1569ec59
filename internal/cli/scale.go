package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hvkube/hvkube/internal/api"
)

func newScaleCmd(e *env) *cobra.Command {
	replicas := -1
	cmd := &cobra.Command{
		Use:   "scale [sandboxpool] NAME --replicas N",
		Short: "Set the number of sandboxes in a pool",
		Example: `  hvkube scale browser-workers --replicas 3
  hvkube scale sandboxpool browser-workers --replicas 3
  hvkube scale pool/browser-workers --replicas 3`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("replicas") {
				return fmt.Errorf("scale needs --replicas N")
			}
			if replicas < 0 {
				return fmt.Errorf("--replicas: %d is negative", replicas)
			}
			var name string
			switch {
			case len(args) == 2:
				k, ok := api.LookupKind(args[0])
				if !ok || k.Kind != api.KindSandboxPool {
					return fmt.Errorf("only sandboxpools can be scaled, not %q", args[0])
				}
				name = args[1]
			default:
				name = args[0]
				if k, n, ok := strings.Cut(name, "/"); ok {
					if kk, found := api.LookupKind(k); !found || kk.Kind != api.KindSandboxPool {
						return fmt.Errorf("only sandboxpools can be scaled, not %q", k)
					}
					name = n
				}
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			if _, err := c.Scale(cmd.Context(), name, replicas); err != nil {
				return err
			}
			fmt.Fprintf(e.out, "sandboxpool/%s scaled\n", name)
			return nil
		},
	}
	cmd.Flags().IntVar(&replicas, "replicas", -1, "the number of sandboxes the pool should hold")
	return cmd
}
