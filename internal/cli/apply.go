package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hvkube/hvkube/internal/api"
)

func newApplyCmd(e *env) *cobra.Command {
	var files []string
	var recursive bool
	cmd := &cobra.Command{
		Use:   "apply -f FILE|DIR|-",
		Short: "Create or update objects from YAML or JSON files",
		Long: `Create or update objects from YAML (documents separated by ---) or JSON.
A directory applies every .yaml, .yml and .json file in it, in name order;
- reads standard input. Prints what happened to each object:
  sandboxpool/browser-workers created|configured|unchanged`,
		Example: `  hvkube apply -f examples/
  hvkube apply -f pool.yaml
  cat agent.yaml | hvkube apply -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(files) == 0 {
				return fmt.Errorf("apply needs -f FILE, -f DIR or -f -")
			}
			objs, err := readObjects(e.in, files, recursive)
			if err != nil {
				return err
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			failed := 0
			for _, o := range objs {
				_, res, err := c.Apply(cmd.Context(), o)
				if err != nil {
					fmt.Fprintf(e.errOut, "error: %s: %v\n", kindRef(o), err)
					failed++
					continue
				}
				fmt.Fprintf(e.out, "%s %s\n", kindRef(o), res)
			}
			if failed > 0 {
				return &ExitError{Code: 1}
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "file, directory or - (standard input); repeatable")
	cmd.Flags().BoolVarP(&recursive, "recursive", "R", false, "read directories recursively")
	return cmd
}

// readObjects decodes every object in the given files, directories or -.
// A decode error anywhere stops before anything is sent.
func readObjects(stdin io.Reader, files []string, recursive bool) ([]api.Object, error) {
	var objs []api.Object
	for _, f := range files {
		paths, err := expand(f, recursive)
		if err != nil {
			return nil, err
		}
		for _, p := range paths {
			var data []byte
			if p == "-" {
				data, err = io.ReadAll(stdin)
			} else {
				data, err = os.ReadFile(p)
			}
			if err != nil {
				return nil, err
			}
			got, err := api.Decode(data, api.DecodeOptions{})
			if err != nil {
				return nil, fmt.Errorf("%s: %w", displayName(p), err)
			}
			objs = append(objs, got...)
		}
	}
	return objs, nil
}

func displayName(p string) string {
	if p == "-" {
		return "<stdin>"
	}
	return p
}

func expand(f string, recursive bool) ([]string, error) {
	if f == "-" {
		return []string{"-"}, nil
	}
	st, err := os.Stat(f)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []string{f}, nil
	}
	var out []string
	err = filepath.WalkDir(f, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != f && !recursive {
				return filepath.SkipDir
			}
			return nil
		}
		switch strings.ToLower(filepath.Ext(p)) {
		case ".yaml", ".yml", ".json":
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(out)
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no .yaml, .yml or .json files", f)
	}
	return out, nil
}
