package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/hvkube/hvkube/internal/nodeca"
	"github.com/hvkube/hvkube/internal/server"
)

func newWebhookConfigCmd() *cobra.Command {
	var keyFile, ns, url string
	cmd := &cobra.Command{
		Use:   "webhook-config",
		Short: "Print the ValidatingWebhookConfiguration of hvkube serve's admission webhook",
		Long: `Print the ValidatingWebhookConfiguration that makes the Kubernetes API
server send writes of hvkube's kinds (kubectl apply, anyone's controller)
to the admission webhook of hvkube serve (on --tls-addr), which refuses
what hvkube's API refuses, with the same error text. It names the
authority the webhook's certificate is checked by, derived from the API
servers' key (--key-file), so it is the same for every replica and needs
no Secret of its own.

hvkube's own service accounts (hvkube-controller, hvkube-node) are left
out: the API servers check what they write themselves, and the nodes are
held by deploy/admission-policy.yaml. Writes of everyone else fail while
no replica answers (failurePolicy Fail).`,
		Example: `  hvkube webhook-config --key-file key --namespace hvkube-system | kubectl apply -f -`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
				return fmt.Errorf("--namespace %q: %v", ns, errs)
			}
			ca, err := apiCA(keyFile)
			if err != nil {
				return err
			}
			b, err := yaml.Marshal(server.WebhookConfig(ns, url, ca.PEM()))
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	}
	cmd.Flags().StringVar(&keyFile, "key-file", "", "the API servers' key (hvkube serve --key-file)")
	cmd.Flags().StringVar(&ns, "namespace", "hvkube-system", "the namespace of hvkube's objects and of the Service hvkube (port 8443)")
	cmd.Flags().StringVar(&url, "url", "", "reach the webhook at this https URL instead of the Service (outside a cluster)")
	return cmd
}

func newCACmd() *cobra.Command {
	var keyFile string
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "Print the certificate of the API servers' TLS authority",
		Long: `Print, as PEM, the certificate of the authority that signs hvkube serve's
TLS certificate (--tls-addr). It is derived from the API servers' key
(--key-file), so every replica has the same one and it changes only with
the key. Give it to whoever connects over TLS: hvkube node --server-ca,
the CLI's --ca-file (HVKUBE_CA_FILE), the Python SDK (HVKUBE_CA_FILE).
It is public: it signs nothing.`,
		Example: `  hvkube ca --key-file key > ca.crt
  kubectl -n hvkube-system create configmap hvkube-ca --from-file=ca.crt`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ca, err := apiCA(keyFile)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(ca.PEM())
			return err
		},
	}
	cmd.Flags().StringVar(&keyFile, "key-file", "", "the API servers' key (hvkube serve --key-file)")
	return cmd
}

// apiCA is the authority of the API servers' TLS certificate under the key
// in keyFile (--key-file, required).
func apiCA(keyFile string) (*nodeca.CA, error) {
	if keyFile == "" {
		return nil, errors.New("--key-file: required: the API servers' key")
	}
	key, err := loadKey(serveConfig{keyFile: keyFile})
	if err != nil {
		return nil, err
	}
	return nodeca.New(key.APICASeed())
}
