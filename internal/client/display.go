package client

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// DisplayToken is a short-lived token that opens one sandbox's live
// display, with the links that carry it.
type DisplayToken struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expiresAt"`
	// URL is the display's WebSocket (VNC over WebSocket).
	URL string `json:"url"`
	// Page is the dashboard's page of the sandbox.
	Page string `json:"page"`
}

// DisplayToken asks for a display token for sandbox, valid for ttl (the
// server's default when 0); control, when set, is the key of the current
// take-over, whose holder may send input through the display.
func (c *Client) DisplayToken(ctx context.Context, sandbox, control string, ttl time.Duration) (*DisplayToken, error) {
	body, err := json.Marshal(struct {
		Control    string `json:"control,omitempty"`
		TTLSeconds int    `json:"ttlSeconds,omitempty"`
	}{control, int(ttl / time.Second)})
	if err != nil {
		return nil, err
	}
	var out DisplayToken
	if _, err := c.Do(ctx, http.MethodPost, sandboxPath(sandbox, "display/token"), body, "application/json", &out); err != nil {
		return nil, err
	}
	return &out, nil
}
