package cli

import (
	"encoding/json"
	"fmt"
	"net/url"
	"time"

	"github.com/spf13/cobra"

	"github.com/hvkube/hvkube/internal/api"
)

// controlRequest and controlResponse are the bodies of POST
// /api/v1/sandboxes/NAME/control.
type controlRequest struct {
	Action string `json:"action"`
	Holder string `json:"holder,omitempty"`
	Agent  string `json:"agent,omitempty"`
	ID     string `json:"id,omitempty"`
	Force  bool   `json:"force,omitempty"`
}

type controlResponse struct {
	Control *api.SandboxControl `json:"control"`
	Token   string              `json:"token,omitempty"`
	Key     string              `json:"key,omitempty"`
}

func newControlCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "control",
		Short: "Take a sandbox's input over from its agent, or hand it back",
		Long: `While a person holds a sandbox's input, input from agents and the API is
refused (409) unless it carries the take-over's key (header X-Hvkube-Control),
which only the person who took control gets: agents can read the take-over's
id in the sandbox's status, never its key.
A take-over ends when it is released, when the sandbox is reset to its clean
snapshot, or when the sandbox is deleted.`,
	}
	cmd.AddCommand(newControlTakeCmd(e), newControlReleaseCmd(e))
	return cmd
}

func newControlTakeCmd(e *env) *cobra.Command {
	var holder, agent string
	var force bool
	cmd := &cobra.Command{
		Use:   "take SANDBOX",
		Short: "Take a sandbox's input over; prints the take-over's id and key",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := sendControl(cmd, e, args[0], controlRequest{Action: "take", Holder: holder, Agent: agent, Force: force})
			if err != nil {
				return err
			}
			c := resp.Control
			fmt.Fprintf(e.out, "sandbox/%s: control taken by %s (take-over %s)\n", args[0], c.Holder, c.ID)
			if resp.Key != "" {
				fmt.Fprintf(e.out, "input key (X-Hvkube-Control): %s\n", resp.Key)
			}
			if resp.Token != "" {
				fmt.Fprintf(e.out, "display token: %s\n", resp.Token)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&holder, "holder", defaultPerson(), "who takes control")
	cmd.Flags().StringVar(&agent, "agent", "", "the agent whose question the take-over answers")
	cmd.Flags().BoolVar(&force, "force", false, "take control from whoever holds it")
	return cmd
}

func newControlReleaseCmd(e *env) *cobra.Command {
	var id, holder string
	var force bool
	cmd := &cobra.Command{
		Use:   "release SANDBOX",
		Short: "Hand a sandbox's input back",
		Long: `Hand a sandbox's input back. Without --id, the take-over is released when
--holder (default: your login name) holds it; --force releases anyone's.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if id == "" && !force {
				c, err := e.client()
				if err != nil {
					return err
				}
				o, err := c.Get(cmd.Context(), api.KindSandbox, args[0])
				if err != nil {
					return err
				}
				held := o.(*api.Sandbox).Status.Control
				switch {
				case held == nil:
					fmt.Fprintf(e.out, "sandbox/%s: nobody holds its input\n", args[0])
					return nil
				case held.Holder != holder:
					return fmt.Errorf("%s holds sandbox %s's input since %s (take-over %s), not %s: pass --id or --force",
						held.Holder, args[0], held.Since.Local().Format(time.DateTime), held.ID, holder)
				}
				id = held.ID
			}
			if _, err := sendControl(cmd, e, args[0], controlRequest{Action: "release", ID: id, Force: force}); err != nil {
				return err
			}
			fmt.Fprintf(e.out, "sandbox/%s: control released\n", args[0])
			return nil
		},
	}
	cmd.Flags().StringVar(&id, "id", "", "the take-over released")
	cmd.Flags().StringVar(&holder, "holder", defaultPerson(), "whose take-over to release when --id is not given")
	cmd.Flags().BoolVar(&force, "force", false, "release whoever holds it")
	return cmd
}

func sendControl(cmd *cobra.Command, e *env, sandbox string, req controlRequest) (controlResponse, error) {
	var resp controlResponse
	c, err := e.client()
	if err != nil {
		return resp, err
	}
	body, _ := json.Marshal(req)
	_, err = c.Do(cmd.Context(), "POST", "/api/v1/sandboxes/"+url.PathEscape(sandbox)+"/control", body, "application/json", &resp)
	return resp, err
}
