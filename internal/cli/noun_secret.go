package cli

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hvkube/hvkube/internal/api"
)

func newSecretCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "secret",
		Short: "Create, list and delete Secrets: values for desktops' sessions",
		Long: `Create, list and delete Secrets. A Secret's values reach a desktop's
session when an agent (or the sandbox itself) names them in spec.env
(valueFrom.secretKeyRef) or spec.envFrom (secretRef); docs/secrets.md.

The server seals the values with its key before it stores them, and never
serves them back: get, list, watch, describe and the dashboard show a
Secret's keys only. 'hvkube secret list' is 'hvkube get secrets'.`,
		Example: `  hvkube secret create api-keys --from-literal OPENAI_API_KEY=sk-... --from-file SSH_KEY=./id_ed25519
  hvkube secret create site-login --from-env-file ./login.env
  hvkube secret list
  hvkube secret delete api-keys`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newSecretCreateCmd(e), newSecretListCmd(e), newSecretDeleteCmd(e))
	return cmd
}

func newSecretCreateCmd(e *env) *cobra.Command {
	var literals, files, envFiles []string
	cmd := &cobra.Command{
		Use:   "create NAME [--from-literal KEY=VALUE] [--from-file KEY=PATH] [--from-env-file PATH]",
		Short: "Create a Secret from values, files or an env file",
		Long: `Create a Secret from --from-literal KEY=VALUE, --from-file KEY=PATH (the
file's bytes) and --from-env-file PATH (lines KEY=VALUE; blank lines and
lines starting with # are skipped), each repeatable. Keys are variable
names (letters, digits and '_'). A value given on the command line shows
in the shell's history and the host's process list: --from-file keeps it
out of both.

Fails if a Secret of that name exists; 'hvkube apply -f' changes one.`,
		Example: `  hvkube secret create api-keys --from-literal OPENAI_API_KEY=sk-...
  hvkube secret create ssh --from-file SSH_KEY=./id_ed25519`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data := map[string][]byte{}
			put := func(flag, k string, v []byte) error {
				if err := api.ValidateEnvName(flag, k); err != nil {
					return err
				}
				if _, dup := data[k]; dup {
					return fmt.Errorf("%s: key %s is given twice", flag, k)
				}
				data[k] = v
				return nil
			}
			for _, l := range literals {
				k, v, ok := strings.Cut(l, "=")
				if !ok {
					return fmt.Errorf("--from-literal %.40q: want KEY=VALUE", l)
				}
				if err := put("--from-literal", k, []byte(v)); err != nil {
					return err
				}
			}
			for _, f := range files {
				k, path, ok := strings.Cut(f, "=")
				if !ok || path == "" {
					return fmt.Errorf("--from-file %q: want KEY=PATH", f)
				}
				b, err := readBounded(path, api.MaxSecretValue)
				if err != nil {
					return fmt.Errorf("--from-file %s: %w", k, err)
				}
				if err := put("--from-file", k, b); err != nil {
					return err
				}
			}
			for _, path := range envFiles {
				b, err := readBounded(path, api.MaxSecretBytes)
				if err != nil {
					return fmt.Errorf("--from-env-file: %w", err)
				}
				sc := bufio.NewScanner(bytes.NewReader(b))
				sc.Buffer(make([]byte, 64<<10), api.MaxSecretValue+api.MaxEnvNameLength+2)
				for line := 1; sc.Scan(); line++ {
					t := strings.TrimSpace(sc.Text())
					if t == "" || strings.HasPrefix(t, "#") {
						continue
					}
					k, v, ok := strings.Cut(t, "=")
					if !ok {
						return fmt.Errorf("--from-env-file %s:%d: want KEY=VALUE", path, line)
					}
					if err := put(fmt.Sprintf("--from-env-file %s:%d", path, line), strings.TrimSpace(k), []byte(v)); err != nil {
						return err
					}
				}
				if err := sc.Err(); err != nil {
					return fmt.Errorf("--from-env-file %s: %w", path, err)
				}
			}
			if len(data) == 0 {
				return fmt.Errorf("secret create needs values: --from-literal, --from-file or --from-env-file")
			}
			sec := &api.Secret{
				TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSecret},
				Metadata: api.ObjectMeta{Name: args[0]},
				Spec:     api.SecretSpec{Data: data},
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			if _, err := c.Create(cmd.Context(), sec); err != nil {
				return err
			}
			fmt.Fprintf(e.out, "secret/%s created\n", args[0])
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&literals, "from-literal", nil, "KEY=VALUE; repeatable")
	f.StringArrayVar(&files, "from-file", nil, "KEY=PATH: the file's bytes are the value; repeatable")
	f.StringArrayVar(&envFiles, "from-env-file", nil, "PATH of KEY=VALUE lines; repeatable")
	return cmd
}

func newSecretListCmd(e *env) *cobra.Command {
	var output, selector string
	var watch, noHeaders bool
	cmd := &cobra.Command{
		Use:   "list [-o wide|json|yaml|name]",
		Short: "List Secrets and their keys (same as get secrets)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.runGet(cmd, "secrets", output, selector, watch, noHeaders)
		},
	}
	addListFlags(cmd, &output, &selector, &watch, &noHeaders, "")
	return cmd
}

func newSecretDeleteCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:     "delete NAME...",
		Short:   "Delete Secrets (same as delete secret)",
		Example: `  hvkube secret delete api-keys`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.runCommand(cmd, newDeleteCmd(e), append([]string{"--", "secrets"}, args...))
		},
	}
}
