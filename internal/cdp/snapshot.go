package cdp

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// AXValue is a value of the accessibility tree (a role, a name, a
// property's value).
type AXValue struct {
	Type  string          `json:"type"`
	Value json.RawMessage `json:"value,omitempty"`
}

// String is the value as text: a string unquoted, anything else as JSON;
// "" for none.
func (v *AXValue) String() string {
	if v == nil || len(v.Value) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(v.Value, &s) == nil {
		return s
	}
	return string(v.Value)
}

// AXProperty is a property of an accessibility node.
type AXProperty struct {
	Name  string  `json:"name"`
	Value AXValue `json:"value"`
}

// AXNode is a node of a page's accessibility tree, as
// Accessibility.getFullAXTree gives it.
type AXNode struct {
	NodeID           string       `json:"nodeId"`
	Ignored          bool         `json:"ignored"`
	Role             *AXValue     `json:"role,omitempty"`
	Name             *AXValue     `json:"name,omitempty"`
	Value            *AXValue     `json:"value,omitempty"`
	Properties       []AXProperty `json:"properties,omitempty"`
	ParentID         string       `json:"parentId,omitempty"`
	ChildIDs         []string     `json:"childIds,omitempty"`
	BackendDOMNodeID int          `json:"backendDOMNodeId,omitempty"`
}

// Bounds of a snapshot's lines.
const (
	maxTextInLine = 200 // characters of a name or a value
	maxIndent     = 40  // levels; deeper nodes are drawn at this depth
)

// shownProps are the properties a snapshot line shows: what an agent
// needs to know of a control's state.
var shownProps = []string{"checked", "disabled", "expanded", "focused", "level", "pressed", "required", "selected"}

// FormatAXTree writes an accessibility tree as text, one node a line,
// indented two spaces a level: "- ", the role, the name in quotes,
// [properties], and after a colon the value when it is not the name, as in
// `- textbox "Email" [focused, required]: ada@example.com`.
// Nodes the browser ignores, and containers without a name or
// role of their own (generic, none), are left out and their children
// drawn in their place; so is text that repeats the name or value of the
// node it is in. Names and values are cut at 200 characters; the whole at max
// bytes (0: no bound), with a last line that says so.
func FormatAXTree(nodes []AXNode, max int) string {
	byID := make(map[string]*AXNode, len(nodes))
	for i := range nodes {
		byID[nodes[i].NodeID] = &nodes[i]
	}
	type item struct {
		id      string
		depth   int
		context string // the name and value of the nearest node drawn above
	}
	var stack []item
	for i := len(nodes) - 1; i >= 0; i-- {
		if p := nodes[i].ParentID; p == "" || byID[p] == nil {
			stack = append(stack, item{id: nodes[i].NodeID})
		}
	}
	seen := make(map[string]bool, len(nodes))
	var b strings.Builder
	lines, cut := 0, false
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		n := byID[it.id]
		if n == nil || seen[it.id] {
			continue // a guest's page builds the tree: no loops, whatever it says
		}
		seen[it.id] = true
		role, name := n.Role.String(), oneLine(n.Name.String())
		childDepth, childContext := it.depth, it.context
		if line, ok := axLine(n, role, name, it.context); ok {
			ind := min(it.depth, maxIndent)
			line = strings.Repeat("  ", ind) + line + "\n"
			if max > 0 && b.Len()+len(line) > max {
				cut = true
				break
			}
			b.WriteString(line)
			lines++
			childDepth++
			// A text field's text is its value as well.
			childContext = name + "\n" + oneLine(n.Value.String())
		}
		if role == "InlineTextBox" {
			continue // pieces of the text above
		}
		for i := len(n.ChildIDs) - 1; i >= 0; i-- {
			stack = append(stack, item{id: n.ChildIDs[i], depth: childDepth, context: childContext})
		}
	}
	if cut {
		left := 0
		for _, n := range nodes {
			if !seen[n.NodeID] && !n.Ignored {
				left++
			}
		}
		fmt.Fprintf(&b, "… (snapshot cut at %d bytes after %d lines; about %d more nodes)\n", max, lines, left+1)
	}
	return b.String()
}

// axLine is n's line, or false when n is not drawn.
func axLine(n *AXNode, role, name, context string) (string, bool) {
	switch {
	case n.Ignored:
		return "", false
	case role == "InlineTextBox" || role == "LineBreak":
		return "", false
	case (role == "generic" || role == "none" || role == "presentation" || role == "") && name == "":
		return "", false
	case role == "StaticText" && (strings.TrimSpace(name) == "" || strings.Contains(context, strings.TrimSpace(name))):
		return "", false
	}
	var b strings.Builder
	b.WriteString("- ")
	b.WriteString(role)
	if name != "" {
		b.WriteString(" " + strconv.Quote(cutText(name)))
	}
	var props []string
	for _, p := range n.Properties {
		for _, want := range shownProps {
			if p.Name != want {
				continue
			}
			switch v := p.Value.String(); {
			case v == "true":
				props = append(props, p.Name)
			case v == "false" && p.Name == "expanded":
				props = append(props, p.Name+"=false")
			case v == "false" || v == "":
			default:
				props = append(props, p.Name+"="+cutText(v))
			}
		}
	}
	if len(props) > 0 {
		b.WriteString(" [" + strings.Join(props, ", ") + "]")
	}
	if v := oneLine(n.Value.String()); v != "" && v != name {
		b.WriteString(": " + cutText(v))
	}
	return b.String(), true
}

// oneLine puts s on one line.
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n\t") {
		return s
	}
	return strings.Join(strings.Fields(s), " ")
}

// cutText cuts s to maxTextInLine characters.
func cutText(s string) string {
	r := []rune(s)
	if len(r) <= maxTextInLine {
		return s
	}
	return string(r[:maxTextInLine]) + "…"
}
