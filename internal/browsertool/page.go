package browsertool

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"

	"github.com/hvkube/hvkube/internal/cdp"
)

// refTable is the references one tab handed out for one document: ref_N
// to the element's DOM node, and back (a node keeps its reference).
type refTable struct {
	loader string // the document's loader id: another document, stale refs
	byRef  map[string]int
	byNode map[int]string
	next   int
}

// loaderID is the id of the document the page's main frame shows.
func loaderID(ctx context.Context, p *cdp.Page) (string, error) {
	var r struct {
		FrameTree struct {
			Frame struct {
				LoaderID string `json:"loaderId"`
			} `json:"frame"`
		} `json:"frameTree"`
	}
	if err := p.Conn().Call(ctx, "Page.getFrameTree", nil, &r); err != nil {
		return "", err
	}
	return r.FrameTree.Frame.LoaderID, nil
}

// refsFor is tab's table for the document p shows now, new when it shows
// another than the table's.
func (b *browser) refsFor(ctx context.Context, tab string, p *cdp.Page) (*refTable, error) {
	loader, err := loaderID(ctx, p)
	if err != nil {
		return nil, err
	}
	t := b.refs[tab]
	if t == nil || t.loader != loader {
		t = &refTable{loader: loader, byRef: map[string]int{}, byNode: map[int]string{}}
		b.refs[tab] = t
	}
	return t, nil
}

func (b *browser) dropRefs(tab string) { delete(b.refs, tab) }

// refOf is node's reference, given out now if it has none.
func (t *refTable) refOf(node int) string {
	if r, ok := t.byNode[node]; ok {
		return r
	}
	if t.next >= maxRefs {
		return ""
	}
	t.next++
	r := fmt.Sprintf("ref_%d", t.next)
	t.byRef[r], t.byNode[node] = node, r
	return r
}

func staleRef(ref string) error {
	return fmt.Errorf("%s is stale or not found on the current page. Re-read the page to get fresh references.", ref)
}

// ref reads field as a ref target: the DOM node it names on tab's page.
func (b *browser) ref(ctx context.Context, in input, field, tab string, p *cdp.Page) (int, string, error) {
	t, err := in.target(field)
	if err != nil {
		return 0, "", err
	}
	if t.Type != "ref" {
		return 0, "", fmt.Errorf("%s: takes a ref target ({\"type\": \"ref\", \"ref\": \"ref_N\"})", field)
	}
	table, err := b.refsFor(ctx, tab, p)
	if err != nil {
		return 0, "", err
	}
	node, ok := table.byRef[t.Ref]
	if !ok {
		return 0, "", staleRef(t.Ref)
	}
	return node, t.Ref, nil
}

// target reads field as a point of the viewport: a coordinate, or (when
// refs is true) the centre of a referenced element, scrolled into view.
func (b *browser) target(ctx context.Context, in input, field, tab string, p *cdp.Page, refs bool) (float64, float64, error) {
	t, err := in.target(field)
	if err != nil {
		return 0, 0, err
	}
	if t.Type == "ref" {
		if !refs {
			return 0, 0, fmt.Errorf("%s: takes a coordinate target ({\"type\": \"coordinate\", \"x\", \"y\"})", field)
		}
		node, ref, err := b.ref(ctx, in, field, tab, p)
		if err != nil {
			return 0, 0, err
		}
		x, y, err := p.NodeCentre(ctx, node, ref)
		if err != nil {
			return 0, 0, staleRef(ref)
		}
		return x, y, nil
	}
	w, h, err := viewport(ctx, p)
	if err != nil {
		return 0, 0, err
	}
	x, y := *t.X, *t.Y
	if x < 0 || y < 0 || x >= float64(w) || y >= float64(h) {
		return 0, 0, fmt.Errorf("%s: (%g, %g) is off the %dx%d viewport", field, x, y, w, h)
	}
	return x, y, nil
}

// axTree is a page's accessibility tree.
type axTree struct {
	nodes  []cdp.AXNode
	byID   map[string]*cdp.AXNode
	byNode map[int]*cdp.AXNode // by DOM node
}

// pageTree is tab's references and the accessibility tree of its page.
func (b *browser) pageTree(ctx context.Context, tab string, p *cdp.Page) (*refTable, *axTree, error) {
	table, err := b.refsFor(ctx, tab, p)
	if err != nil {
		return nil, nil, err
	}
	tree, err := fullTree(ctx, p)
	return table, tree, err
}

func fullTree(ctx context.Context, p *cdp.Page) (*axTree, error) {
	var r struct {
		Nodes []cdp.AXNode `json:"nodes"`
	}
	if err := p.Conn().Call(ctx, "Accessibility.getFullAXTree", nil, &r); err != nil {
		return nil, err
	}
	t := &axTree{nodes: r.Nodes, byID: map[string]*cdp.AXNode{}, byNode: map[int]*cdp.AXNode{}}
	for i := range t.nodes {
		n := &t.nodes[i]
		t.byID[n.NodeID] = n
		if n.BackendDOMNodeID != 0 && t.byNode[n.BackendDOMNodeID] == nil {
			t.byNode[n.BackendDOMNodeID] = n
		}
	}
	return t, nil
}

// interactive are the roles of controls: read_page's filter interactive.
var interactive = []string{"button", "checkbox", "combobox", "link", "listbox", "menuitem", "menuitemcheckbox", "menuitemradio",
	"option", "radio", "scrollbar", "searchbox", "slider", "spinbutton", "switch", "tab", "textbox", "treeitem", "textField"}

// silent are the roles drawn only through their children.
var silent = []string{"generic", "none", "presentation", "InlineTextBox", "LineBreak", "RootWebArea", "WebArea", "Section", "ignored", ""}

// line is n's line without indent, and whether it is drawn.
func line(n *cdp.AXNode, table *refTable, onlyControls bool) (string, bool) {
	if n.Ignored {
		return "", false
	}
	role, name := n.Role.String(), flat(n.Name.String())
	if role == "StaticText" {
		if onlyControls || name == "" {
			return "", false
		}
		return "text " + quote(name), true
	}
	if onlyControls && !slices.Contains(interactive, role) {
		return "", false
	}
	if slices.Contains(silent, role) && name == "" {
		return "", false
	}
	s := role
	if name != "" {
		s += " " + quote(name)
	}
	var states []string
	for _, pr := range n.Properties {
		switch pr.Name {
		case "checked", "disabled", "expanded", "pressed", "selected", "required", "focused":
			if v := pr.Value.String(); v != "" && v != "false" {
				if v == "true" {
					states = append(states, pr.Name)
				} else {
					states = append(states, pr.Name+"="+v)
				}
			}
		}
	}
	if len(states) > 0 {
		s += " (" + strings.Join(states, ", ") + ")"
	}
	if v := flat(n.Value.String()); v != "" && v != name {
		s += ": " + quote(v)
	}
	if n.BackendDOMNodeID != 0 {
		if r := table.refOf(n.BackendDOMNodeID); r != "" {
			s += " [" + r + "]"
		}
	}
	return s, true
}

// flat is s on one line, cut at 200 characters.
func flat(s string) string {
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }), " ")
	if r := []rune(s); len(r) > 200 {
		s = string(r[:200]) + "…"
	}
	return s
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return strings.ReplaceAll(string(b), `\u0026`, "&")
}

func (b *browser) readPage(ctx context.Context, in input, tab string, p *cdp.Page) ([]any, error) {
	filter, err := in.str("filter", false, 16)
	if err != nil {
		return nil, err
	}
	if filter != "" && filter != "interactive" && filter != "all" {
		return nil, fmt.Errorf("filter: %q is not interactive or all", filter)
	}
	depth, err := in.intIn("depth", defaultDepth, 1, 1000)
	if err != nil {
		return nil, err
	}
	table, tree, err := b.pageTree(ctx, tab, p)
	if err != nil {
		return nil, err
	}
	var roots []*cdp.AXNode
	if in.has("ref") {
		ref, err := in.str("ref", true, 64)
		if err != nil {
			return nil, err
		}
		node, ok := table.byRef[ref]
		if !ok || tree.byNode[node] == nil {
			return nil, staleRef(ref)
		}
		roots = []*cdp.AXNode{tree.byNode[node]}
	} else {
		for i := range tree.nodes {
			if pid := tree.nodes[i].ParentID; pid == "" || tree.byID[pid] == nil {
				roots = append(roots, &tree.nodes[i])
			}
		}
	}
	var sb strings.Builder
	seen := map[string]bool{}
	total, cutAt := 0, 0
	var walk func(n *cdp.AXNode, level int)
	walk = func(n *cdp.AXNode, level int) {
		if seen[n.NodeID] {
			return // a guest's page builds the tree: no loops
		}
		seen[n.NodeID] = true
		next := level
		if s, ok := line(n, table, filter == "interactive"); ok {
			if level >= depth {
				return
			}
			l := strings.Repeat("  ", min(level, 40)) + s + "\n"
			total += len([]rune(l))
			if total > MaxPageText {
				if cutAt == 0 {
					cutAt = sb.Len()
				}
				return
			}
			sb.WriteString(l)
			next = level + 1
		}
		for _, id := range n.ChildIDs {
			if c := tree.byID[id]; c != nil {
				walk(c, next)
			}
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	out := sb.String()
	if cutAt > 0 {
		out += fmt.Sprintf("… (cut at %d characters: read a part of the page with ref, or fewer with filter interactive)\n", MaxPageText)
	}
	if out == "" {
		out = "(empty)"
	}
	return []any{text(out)}, nil
}

// find gives the elements whose role, name, value or description hold
// the most of the query's words, at most MaxFind, in the page's order
// among equals: a match of words, not of meaning.
func (b *browser) find(ctx context.Context, in input, tab string, p *cdp.Page) ([]any, error) {
	q, err := in.str("query", true, MaxText)
	if err != nil {
		return nil, err
	}
	var words []string
	for _, w := range strings.FieldsFunc(strings.ToLower(q), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		if len([]rune(w)) >= 2 && !slices.Contains(stopWords, w) {
			words = append(words, w)
		}
	}
	if len(words) == 0 {
		return nil, fmt.Errorf("query: %q has no word to look for", q)
	}
	table, tree, err := b.pageTree(ctx, tab, p)
	if err != nil {
		return nil, err
	}
	type hit struct {
		n     *cdp.AXNode
		score int
		order int
	}
	var hits []hit
	for i := range tree.nodes {
		n := &tree.nodes[i]
		role := n.Role.String()
		if n.Ignored || n.BackendDOMNodeID == 0 || role == "StaticText" || role == "InlineTextBox" || (slices.Contains(silent, role) && n.Name.String() == "") {
			continue
		}
		hay := strings.ToLower(role + " " + n.Name.String() + " " + n.Value.String())
		for _, pr := range n.Properties {
			if pr.Name == "placeholder" || pr.Name == "description" || pr.Name == "roledescription" {
				hay += " " + strings.ToLower(pr.Value.String())
			}
		}
		score := 0
		for _, w := range words {
			if strings.Contains(hay, w) {
				score++
			}
		}
		if slices.Contains(interactive, role) && score > 0 {
			score = score*2 + 1 // a control before the text around it
		} else {
			score *= 2
		}
		if score > 0 {
			hits = append(hits, hit{n, score, i})
		}
	}
	sort.SliceStable(hits, func(i, j int) bool { return hits[i].score > hits[j].score })
	var sb strings.Builder
	for i, h := range hits {
		if i == MaxFind {
			break
		}
		if s, ok := line(h.n, table, false); ok {
			sb.WriteString(s + "\n")
		}
	}
	if sb.Len() == 0 {
		return []any{text("No element matches " + quote(q) + ".")}, nil
	}
	return []any{text(cut(sb.String(), MaxPageText))}, nil
}

var stopWords = []string{"the", "an", "of", "to", "in", "on", "for", "and", "or", "with", "at", "by", "is", "it", "that", "this"}

// formJS sets the value of this form field to v, as a person would leave
// it, and fires input and change; it returns why it could not.
const formJS = `function(v) {
	const e = this;
	if (e.disabled) return "it is disabled";
	if (e instanceof HTMLInputElement && (e.type === "checkbox" || e.type === "radio")) {
		if (typeof v !== "boolean") return "a " + e.type + " takes true or false";
		e.checked = v;
	} else if (e instanceof HTMLSelectElement) {
		const s = String(v);
		const opts = Array.from(e.options);
		const o = opts.find(o => o.value === s) || opts.find(o => o.text.trim() === s.trim());
		if (!o) return "it has no option " + JSON.stringify(s) + " (its options: " + opts.slice(0, 20).map(o => JSON.stringify(o.text.trim())).join(", ") + ")";
		e.value = o.value;
	} else if (e instanceof HTMLInputElement || e instanceof HTMLTextAreaElement) {
		if (e.readOnly) return "it is read-only";
		const proto = e instanceof HTMLInputElement ? HTMLInputElement.prototype : HTMLTextAreaElement.prototype;
		Object.getOwnPropertyDescriptor(proto, "value").set.call(e, String(v));
	} else if (e.isContentEditable) {
		e.innerText = String(v);
	} else {
		return "it is not a form field (an input, a select, a textarea, a checkbox or an editable element)";
	}
	e.dispatchEvent(new Event("input", {bubbles: true}));
	e.dispatchEvent(new Event("change", {bubbles: true}));
	return "";
}`

func (b *browser) formInput(ctx context.Context, in input, tab string, p *cdp.Page) ([]any, error) {
	node, ref, err := b.ref(ctx, in, "target", tab, p)
	if err != nil {
		return nil, err
	}
	if !in.has("value") {
		return nil, fmt.Errorf("value: required")
	}
	var v any
	if err := json.Unmarshal(in.raw["value"], &v); err != nil {
		return nil, fmt.Errorf("value: not a string, a number or a boolean")
	}
	switch x := v.(type) {
	case string:
		if len([]rune(x)) > MaxText {
			return nil, fmt.Errorf("value: %d characters: at most %d", len([]rune(x)), MaxText)
		}
	case float64, bool:
	default:
		return nil, fmt.Errorf("value: not a string, a number or a boolean")
	}
	var why string
	if err := p.CallOnNode(ctx, node, formJS, &why, v); err != nil {
		return nil, staleRef(ref)
	}
	if why != "" {
		return nil, fmt.Errorf("cannot set %s: %s", ref, why)
	}
	return []any{text("Set the value of " + ref + ".")}, nil
}

// tabs runs the tab members: their result is the browser's tabs alone.
func (b *browser) tabs(ctx context.Context, name string, in input) ([]any, error) {
	var changes []StateChange
	switch name {
	case "new_tab":
		t, err := b.ep.NewPage(ctx)
		if err != nil {
			return nil, err
		}
		if err := b.ep.Activate(ctx, t.ID); err != nil {
			return nil, err
		}
		changes = []StateChange{{Type: "tab_opened", TabID: t.ID}}
	case "switch_tab", "close_tab":
		id, err := in.str("tab_id", true, 256)
		if err != nil {
			return nil, err
		}
		pages, err := b.ep.Pages(ctx)
		if err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(pages, func(t cdp.Target) bool { return t.ID == id }) {
			return nil, fmt.Errorf("tab_id: there is no tab %s (list_tabs lists them)", id)
		}
		if name == "switch_tab" {
			if err := b.ep.Activate(ctx, id); err != nil {
				return nil, err
			}
			break
		}
		if len(pages) == 1 {
			// The browser would end with its last tab, and the toolset
			// with it.
			return nil, fmt.Errorf("tab %s is the browser's only tab: open another first (new_tab)", id)
		}
		if err := b.ep.ClosePage(ctx, id); err != nil {
			return nil, err
		}
		b.dropRefs(id)
		// The browser lists a closed tab for a moment.
		for i := 0; i < 50; i++ {
			pages, err := b.ep.Pages(ctx)
			if err != nil || !slices.ContainsFunc(pages, func(t cdp.Target) bool { return t.ID == id }) {
				break
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	st, _ := b.state(ctx, changes)
	if name == "new_tab" && (len(st.Tabs) == 0 || !st.Tabs[0].Active || st.Tabs[0].TabID != changes[0].TabID) {
		return nil, fmt.Errorf("the new tab did not come to the front")
	}
	return []any{st}, nil
}

// state is the browser_state block of the browser now, and whether it
// differs from the last one reported (or has changes).
func (b *browser) state(ctx context.Context, changes []StateChange) (StateBlock, bool) {
	st := StateBlock{Type: "browser_state", Tabs: []TabEntry{}, StateChanges: changes}
	pages, err := b.ep.Pages(ctx)
	if err != nil {
		return st, false
	}
	for i, p := range pages {
		if i == maxTabs {
			break
		}
		st.Tabs = append(st.Tabs, TabEntry{TabID: p.ID, Title: field(p.Title), URL: field(p.URL), Active: i == 0})
	}
	changed := len(changes) > 0 || !slices.Equal(st.Tabs, b.reported)
	b.reported = st.Tabs
	return st, changed
}

// field is s as a browser_state field takes it: one line, no control
// characters, at most 4096 characters.
func field(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return ' '
		}
		return r
	}, s)
	if r := []rune(s); len(r) > 4096 {
		s = string(r[:4096])
	}
	return s
}
