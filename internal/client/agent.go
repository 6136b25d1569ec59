package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

func agentPath(name, sub string) string {
	return "/api/v1/agents/" + url.PathEscape(name) + "/" + sub
}

// CompleteRequest ends an mcp-agent's attempt.
type CompleteRequest struct {
	// Success defaults to true on the server.
	Success *bool           `json:"success,omitempty"`
	Output  json.RawMessage `json:"output,omitempty"`
	Message string          `json:"message,omitempty"`
}

// Complete ends the running attempt of an mcp-agent
// (POST /agents/NAME/complete).
func (c *Client) Complete(ctx context.Context, agent string, req CompleteRequest) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	_, err = c.Do(ctx, http.MethodPost, agentPath(agent, "complete"), body, "application/json", nil)
	return err
}

// AskHuman raises a question to a person for agent
// (POST /agents/NAME/hitl).
func (c *Client) AskHuman(ctx context.Context, agent, question string) (*api.HumanRequest, error) {
	body, _ := json.Marshal(map[string]string{"question": question})
	var hr api.HumanRequest
	if _, err := c.Do(ctx, http.MethodPost, agentPath(agent, "hitl"), body, "application/json", &hr); err != nil {
		return nil, err
	}
	return &hr, nil
}

// HumanRequest returns agent's latest question, waiting up to wait (whole
// seconds) for its answer (GET /agents/NAME/hitl?wait=).
func (c *Client) HumanRequest(ctx context.Context, agent string, wait time.Duration) (*api.HumanRequest, error) {
	p := agentPath(agent, "hitl")
	if s := int(wait / time.Second); s > 0 {
		p += "?wait=" + strconv.Itoa(s)
	}
	var hr api.HumanRequest
	if _, err := c.Do(ctx, http.MethodGet, p, nil, "", &hr); err != nil {
		return nil, err
	}
	return &hr, nil
}

// AgentToken is a token that reaches one agent and its sandbox, and where
// to use it.
type AgentToken struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expiresAt"`
	Server    string    `json:"server"`
	MCP       string    `json:"mcp"`
	Agent     string    `json:"agent"`
	Sandbox   string    `json:"sandbox"`
}

// AgentToken mints a token scoped to a bound agent and its sandbox
// (POST /agents/NAME/token).
func (c *Client) AgentToken(ctx context.Context, agent string) (*AgentToken, error) {
	var t AgentToken
	if _, err := c.Do(ctx, http.MethodPost, agentPath(agent, "token"), nil, "", &t); err != nil {
		return nil, err
	}
	return &t, nil
}
