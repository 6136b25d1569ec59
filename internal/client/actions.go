package client

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// ActResult answers Act: a coordinate (cursor_position) or an image
// (screenshot, zoom).
type ActResult struct {
	Coordinate  []int
	Image       []byte
	ContentType string
}

// Act sends one action as JSON: an api.Action, or one of OpenAI's computer
// actions ({"type": "click", ...}). width, when non-zero, is the screen
// space the coordinates are in (the screen as ?width= scales it).
func (c *Client) Act(ctx context.Context, name string, action []byte, width int) (ActResult, error) {
	p := sandboxPath(name, "input")
	if width > 0 {
		p += "?" + url.Values{"width": {strconv.Itoa(width)}}.Encode()
	}
	resp, err := c.Raw(ctx, http.MethodPost, p, action, "application/json")
	if err != nil {
		return ActResult{}, err
	}
	defer resp.Body.Close()
	ctype := resp.Header.Get("Content-Type")
	if strings.HasPrefix(ctype, "image/") {
		b, err := io.ReadAll(resp.Body)
		return ActResult{Image: b, ContentType: ctype}, err
	}
	var res InputResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return ActResult{}, err
	}
	return ActResult{Coordinate: res.Coordinate}, nil
}
