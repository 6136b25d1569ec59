package cli

import (
	"github.com/spf13/cobra"

	"github.com/hvkube/hvkube/internal/crd"
)

func newCRDsCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "crds",
		Short: "Print the CustomResourceDefinitions of hvkube's kinds (for kubectl apply -f -)",
		Long: `Print the CustomResourceDefinitions of every hvkube kind, in group hvkube.io,
version v1, as YAML documents: the same files deploy/crds holds. Install them on
a cluster before "hvkube serve --store kubernetes":

  hvkube crds | kubectl apply -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			all, err := crd.All()
			if err != nil {
				return err
			}
			for i, c := range all {
				b, err := crd.YAML(c)
				if err != nil {
					return err
				}
				if i > 0 {
					e.out.Write([]byte("---\n"))
				}
				if _, err := e.out.Write(b); err != nil {
					return err
				}
			}
			return nil
		},
	}
}
