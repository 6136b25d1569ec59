package cli

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"
)

func newVersionCmd(e *env) *cobra.Command {
	var clientOnly bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the client and server versions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprintf(e.out, "Client Version: %s\n", e.opts.Version)
			if clientOnly {
				return nil
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
			defer cancel()
			var v struct {
				Version     string `json:"version"`
				Node        string `json:"node"`
				Backend     string `json:"backend"`
				Accel       string `json:"accel"`
				AccelReason string `json:"accelReason"`
			}
			if _, err := c.Do(ctx, http.MethodGet, "/version", nil, "", &v); err != nil {
				return err
			}
			fmt.Fprintf(e.out, "Server Version: %s\n", v.Version)
			if v.Backend != "" {
				fmt.Fprintf(e.out, "Server Backend: %s on node %s", v.Backend, v.Node)
				if v.Accel != "" {
					fmt.Fprintf(e.out, ", %s (%s)", v.Accel, v.AccelReason)
				}
				fmt.Fprintln(e.out)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "print only the client version")
	return cmd
}
