package cli

import (
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/spf13/cobra"
)

func newLogsCmd(e *env) *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs SANDBOX | agent/NAME [-f]",
		Short: "Print a sandbox's console log, or an agent's log",
		Long: `Print a sandbox's serial console log (SANDBOX or sandbox/NAME), or the log of
an agent's latest attempt (agent/NAME). With -f, keep printing what is added:
for an agent, through its next attempts, until it has finished.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := logsPath(args[0])
			if err != nil {
				return err
			}
			if follow {
				path += "?follow=true"
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			resp, err := c.Raw(cmd.Context(), "GET", path, nil, "")
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if _, err := io.Copy(e.out, resp.Body); err != nil && cmd.Context().Err() == nil {
				return err
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing what is added")
	return cmd
}

// logsPath is the API path of the log of a sandbox (NAME, sandbox/NAME)
// or of an agent (agent/NAME).
func logsPath(arg string) (string, error) {
	kind, name, ok := strings.Cut(arg, "/")
	if !ok {
		kind, name = "sandbox", arg
	}
	switch kind {
	case "sandbox", "sandboxes", "sb":
		return "/api/v1/sandboxes/" + url.PathEscape(name) + "/logs", nil
	case "agent", "agents":
		return "/api/v1/agents/" + url.PathEscape(name) + "/logs", nil
	}
	return "", fmt.Errorf("%q: want SANDBOX, sandbox/NAME or agent/NAME", arg)
}
