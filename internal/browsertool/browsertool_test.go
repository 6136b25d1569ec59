package browsertool

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestCheckCalls: an envelope that is not a browser member's tool_use is
// refused as a whole, naming the field.
func TestCheckCalls(t *testing.T) {
	ok := Call{Type: "tool_use", ID: "toolu_1", Name: "screenshot", ToolsetName: ToolsetName}
	for _, tt := range []struct {
		name  string
		calls []Call
		field string
	}{
		{"none", nil, "tool_use"},
		{"not tool_use", []Call{{Type: "text", ID: "a", Name: "x", ToolsetName: ToolsetName}}, "[0].type"},
		{"no id", []Call{{Type: "tool_use", Name: "x", ToolsetName: ToolsetName}}, "[0].id"},
		{"id twice", []Call{ok, ok}, "[1].id"},
		{"another tool's", []Call{{Type: "tool_use", ID: "a", Name: "left_click", ToolsetName: "computer"}}, "[0].toolset_name"},
		{"no name", []Call{{Type: "tool_use", ID: "a", ToolsetName: ToolsetName}}, "[0].name"},
		{"too many", make([]Call, MaxCalls+1), "tool_use"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckCalls(tt.calls)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field {
				t.Errorf("%v, want an error naming %s", err, tt.field)
			}
		})
	}
	if err := CheckCalls([]Call{ok}); err != nil {
		t.Errorf("a good call: %v", err)
	}
}

// TestParseKeys reads key texts as the toolset writes them.
func TestParseKeys(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want string // chords: key names joined by +, modifiers in hex
		err  bool
	}{
		{in: "Return", want: "Enter/0"},
		{in: "ctrl+a", want: "Control+a/2"},
		{in: "cmd+shift+p", want: "Meta+Shift+p/c"},
		{in: "Backspace Backspace Delete", want: "Backspace/0 Backspace/0 Delete/0"},
		{in: "F5", want: "F5/0"},
		{in: "F25", err: true},
		{in: "ctrl+", err: true},
		{in: "", err: true},
	} {
		got, err := parseKeys(tt.in)
		if (err != nil) != tt.err {
			t.Errorf("%q: %v", tt.in, err)
			continue
		}
		var parts []string
		for _, c := range got {
			var names []string
			for _, k := range c.keys {
				names = append(names, k.key)
			}
			parts = append(parts, fmt.Sprintf("%s/%x", strings.Join(names, "+"), c.mods))
		}
		if s := strings.Join(parts, " "); !tt.err && s != tt.want {
			t.Errorf("%q: %s, want %s", tt.in, s, tt.want)
		}
	}
}

// TestGuestText: what a guest's page names (a title, a URL, an element's
// name) reaches the model on one line, without control characters, and
// bounded.
func TestGuestText(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"Order\nform", "Order form"},
		{"a\u2028b\u2029c\x00d", "a b c d"},
		{"\x1b[31mred", " [31mred"},
	} {
		if got := field(tt.in); got != tt.want {
			t.Errorf("field(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := len([]rune(field(strings.Repeat("é", 5000)))); got != 4096 {
		t.Errorf("a 5000-character title: %d characters kept, want 4096", got)
	}
	if got := flat("  line one\n\tline\rtwo  "); got != "line one line two" {
		t.Errorf("flat: %q", got)
	}
	if got := len([]rune(flat(strings.Repeat("x", 500)))); got != 201 {
		t.Errorf("a 500-character name: %d characters, want 200 and an ellipsis", got)
	}
}
