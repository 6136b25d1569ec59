package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/authtoken"
	"github.com/hvkube/hvkube/internal/client"
	"github.com/hvkube/hvkube/internal/mcptools"
)

func newMCPCmd(e *env) *cobra.Command {
	var sandbox, agent, logLevel string
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve hvkube's MCP tools on stdin and stdout, for desktop MCP clients",
		Long: `Serve hvkube's MCP tools over stdio: a desktop MCP client starts 'hvkube mcp'
and talks MCP on its standard input and output; each tool call becomes a call
to the hvkube server at --server (HVKUBE_SERVER) with the token in
HVKUBE_TOKEN. Logs go to standard error.

The tools are the computer-use actions, each named as the action (screenshot,
left_click, right_click, middle_click, double_click, triple_click,
mouse_move, left_click_drag, left_mouse_down, left_mouse_up, scroll, type,
key, hold_key, cursor_position, wait, zoom) and computer, which runs a batch
of actions in Anthropic's, OpenAI's or Gemini's words; the browser tools (browser_navigate, browser_click,
browser_type, browser_snapshot, browser_back, browser_tabs), which reach a
browser-desktop sandbox's Chromium through the server's port forward; the
sandbox tools (list_sandboxes, acquire_sandbox, release_sandbox),
complete_task and ask_human. Each takes the sandbox as an argument; --sandbox (HVKUBE_SANDBOX)
makes one the default, and --agent (HVKUBE_AGENT) the agent complete_task and
ask_human speak for.

A client configuration (Claude Desktop's claude_desktop_config.json and most
others use this shape):

  {
    "mcpServers": {
      "hvkube": {
        "command": "hvkube",
        "args": ["mcp"],
        "env": {
          "HVKUBE_SERVER": "http://127.0.0.1:8080",
          "HVKUBE_TOKEN": "the server's token, or an agent's from 'hvkube agent token'"
        }
      }
    }
  }

With an agent's token (hvkube agent token NAME prints it with HVKUBE_SANDBOX
and HVKUBE_AGENT), the tools reach that agent's sandbox only and act on it by
default. Clients that speak Streamable HTTP can skip this command and use
SERVER/mcp with "Authorization: Bearer TOKEN".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level %q: want debug, info, warn or error", logLevel)
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			sc := mcptools.Scope{Sandbox: sandbox, Agent: agent, Restricted: sandbox != "" && authtoken.Is(e.token)}
			log := slog.New(slog.NewTextHandler(e.errOut, &slog.HandlerOptions{Level: level}))
			srv := mcptools.NewServer(mcptools.NewRemote(c), mcptools.Options{Version: e.opts.Version, Logger: log,
				Scope: func(context.Context, *mcp.RequestExtra) mcptools.Scope { return sc }})
			err = srv.Run(cmd.Context(), &mcp.IOTransport{Reader: io.NopCloser(e.in), Writer: nopWriteCloser{e.out}})
			if errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
				return nil
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&sandbox, "sandbox", os.Getenv("HVKUBE_SANDBOX"), "the sandbox tools act on when a call names none (env HVKUBE_SANDBOX)")
	f.StringVar(&agent, "agent", os.Getenv("HVKUBE_AGENT"), "the agent complete_task and ask_human speak for (env HVKUBE_AGENT)")
	f.StringVar(&logLevel, "log-level", "warn", "debug, info, warn or error (logs go to standard error)")
	return cmd
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

func newAgentTokenCmd(e *env) *cobra.Command {
	var output string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "token NAME",
		Short: "Print a token that reaches one agent and its sandbox, and the MCP endpoint",
		Long: `Print what an agent loop outside hvkube (an Agent of type mcp-agent) needs to
work its sandbox: the server and MCP addresses and a token that reaches only
this agent and the sandbox it is bound to, until the attempt's deadline.
Waits (up to --timeout) for the agent to be bound to a sandbox.

The output is KEY=value lines, ready for env(1) or a .env file:

  HVKUBE_SERVER=http://127.0.0.1:8080
  HVKUBE_MCP_URL=http://127.0.0.1:8080/mcp
  HVKUBE_TOKEN=hvks2....
  HVKUBE_AGENT=NAME
  HVKUBE_SANDBOX=the sandbox

so 'env $(hvkube agent token NAME) hvkube mcp' serves that sandbox's tools on
stdio, and an HTTP MCP client uses HVKUBE_MCP_URL with
"Authorization: Bearer $HVKUBE_TOKEN". The loop ends the task with the MCP
tool complete_task (or POST /api/v1/agents/NAME/complete).`,
		Example: `  hvkube apply -f examples/mcp-agent.yaml
  env $(hvkube agent token my-task) my-agent-loop`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "" && output != "env" && output != "json" {
				return fmt.Errorf("-o %q: want env or json", output)
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			name := args[0]
			var tok *client.AgentToken
			for {
				tok, err = c.AgentToken(ctx, name)
				if err == nil || !errors.Is(err, api.ErrConflict) {
					break
				}
				o, gerr := c.Get(ctx, api.KindAgent, name)
				if gerr == nil {
					if a := o.(*api.Agent); a.Status.Phase == api.AgentCompleted || a.Status.Phase == api.AgentFailed || a.Status.Phase == api.AgentCancelled {
						return err
					}
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("agent %s was not bound to a sandbox within %s: %w", name, timeout, err)
				case <-time.After(250 * time.Millisecond):
				}
			}
			if err != nil {
				return err
			}
			if output == "json" {
				b, _ := json.MarshalIndent(tok, "", "  ")
				fmt.Fprintf(e.out, "%s\n", b)
				return nil
			}
			fmt.Fprintf(e.out, "HVKUBE_SERVER=%s\nHVKUBE_MCP_URL=%s\nHVKUBE_TOKEN=%s\nHVKUBE_AGENT=%s\nHVKUBE_SANDBOX=%s\n",
				tok.Server, tok.MCP, tok.Token, tok.Agent, tok.Sandbox)
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "env", "env (KEY=value lines) or json")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait for the agent to be bound to a sandbox")
	return cmd
}
