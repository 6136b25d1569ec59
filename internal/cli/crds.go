package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hvkube/hvkube/internal/crd"
)

func newCRDsCmd(e *env) *cobra.Command {
	var apply bool
	var kubeconfig string
	cmd := &cobra.Command{
		Use:   "crds [--apply [--kubeconfig FILE]]",
		Short: "Print (or install) the CustomResourceDefinitions of hvkube's kinds",
		Long: `Print the CustomResourceDefinitions of every hvkube kind, in group hvkube.io,
version v1, as YAML documents: the same files deploy/crds holds. Install them on
a cluster before "hvkube serve --store kubernetes":

  hvkube crds | kubectl apply -f -

or, without kubectl, with --apply: create or update them on the API server of
--kubeconfig (default KUBECONFIG, ~/.kube/config, or the pod's account) and
wait until they are established.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if apply {
				rules := clientcmd.NewDefaultClientConfigLoadingRules()
				rules.ExplicitPath = kubeconfig
				rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
				if err != nil {
					return fmt.Errorf("--apply: no API server to reach: %w", err)
				}
				ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
				defer cancel()
				if err := crd.Install(ctx, rc); err != nil {
					return err
				}
				fmt.Fprintf(e.out, "CRDs of group %s installed on %s\n", crd.Group, rc.Host)
				return nil
			}
			files, err := crd.Files()
			if err != nil {
				return err
			}
			for i, b := range files {
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
	cmd.Flags().BoolVar(&apply, "apply", false, "install the CRDs on the cluster instead of printing them")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "with --apply: the kubeconfig file")
	return cmd
}
