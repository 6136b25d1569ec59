package scheduler

import (
	"cmp"
	"container/heap"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

// entry is a sandbox that can take an agent, as the index holds it.
type entry struct {
	name string
	sb   *Sandbox
	// base is its score for an agent that asks for no GPU. An agent that
	// asks for one can take only GPU sandboxes and scores each of them 25
	// more, so the order of the sandboxes an agent can take never depends
	// on the agent.
	base  int
	taken bool
	// sameName is the next entry with the same name: nil, as sandbox
	// names are unique.
	sameName *entry
}

// compareEntries orders entries best first: higher score, then idle
// longer, then the name first in order.
func compareEntries(x, y *entry) int {
	if c := cmp.Compare(y.base, x.base); c != 0 {
		return c
	}
	return compareIdle(*x.sb, *y.sb)
}

// compareIdle orders sandboxes of the same score: the one idle longer
// first, then by name. The idle part of a score is capped, so without it
// the order of long-idle sandboxes would be their names' and would change
// as more reach the cap; with it, it is first come, first served, and
// stays so (the node readies the next in line ahead: readyahead.go).
func compareIdle(x, y Sandbox) int {
	if c := x.IdleSince.Compare(y.IdleSince); c != 0 {
		return c
	}
	return strings.Compare(x.Name, y.Name)
}

// class is the sandboxes with one label set and GPU: a selector and GPU
// need take all of them or none. Its members are a heap, the best on top;
// a taken member leaves it when it reaches the top.
type class struct {
	labels  map[string]string
	gpu     bool
	members entryHeap
}

// head returns the best member not yet taken, or nil when all are.
func (c *class) head() *entry {
	for len(c.members) > 0 && c.members[0].taken {
		heap.Pop(&c.members)
	}
	if len(c.members) == 0 {
		return nil
	}
	return c.members[0]
}

// entryHeap is a heap of entries, the best first.
type entryHeap []*entry

func (h entryHeap) Len() int           { return len(h) }
func (h entryHeap) Less(i, j int) bool { return compareEntries(h[i], h[j]) < 0 }
func (h entryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }

// Push adds x, an *entry.
func (h *entryHeap) Push(x any) { *h = append(*h, x.(*entry)) }

// Pop removes and returns the last entry.
func (h *entryHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// labelPair is one label, key and value.
type labelPair struct{ key, value string }

// index is a round's open sandboxes, arranged so that an agent's best one
// is found without looking at every sandbox.
type index struct {
	now     time.Time
	entries []entry
	classes []*class
	// byKey finds a class by its appendClassKey string.
	byKey map[string]*class
	// byPair lists, for each label, the classes that carry it.
	byPair map[labelPair][]*class
	// byName finds the entries of a name, built for the round's first
	// agent that names its sandbox.
	byName map[string]*entry
	// groups holds the groups built so far, by their selector's String.
	groups map[string][]*group
	// left counts the sandboxes not yet taken.
	left int
	// keyBuf and keysBuf are appendClassKey's scratch space.
	keyBuf  []byte
	keysBuf []string
}

// newIndex indexes the sandboxes that can take an agent, scoring them as of
// now.
func newIndex(sandboxes []Sandbox, now time.Time) *index {
	ix := &index{now: now, byKey: map[string]*class{}, byPair: map[labelPair][]*class{}, groups: map[string][]*group{}}
	ix.entries = make([]entry, 0, len(sandboxes))
	for i := range sandboxes {
		if sb := &sandboxes[i]; open(*sb) {
			ix.entries = append(ix.entries, entry{name: sb.Name, sb: sb, base: Score(Agent{}, *sb, now)})
		}
	}
	for i := range ix.entries {
		c := ix.classOf(ix.entries[i].sb)
		c.members = append(c.members, &ix.entries[i])
	}
	for _, c := range ix.classes {
		heap.Init(&c.members)
	}
	ix.left = len(ix.entries)
	return ix
}

// classOf returns sb's class, adding it when it is the first of its kind.
func (ix *index) classOf(sb *Sandbox) *class {
	ix.keyBuf = ix.appendClassKey(ix.keyBuf[:0], sb.Labels, sb.GPU)
	if c, ok := ix.byKey[string(ix.keyBuf)]; ok {
		return c
	}
	c := &class{labels: sb.Labels, gpu: sb.GPU}
	ix.byKey[string(ix.keyBuf)] = c
	ix.classes = append(ix.classes, c)
	for k, v := range sb.Labels {
		p := labelPair{k, v}
		ix.byPair[p] = append(ix.byPair[p], c)
	}
	return c
}

// appendClassKey appends to b a string for a label set and GPU that no
// other label set shares: keys in order, each key and value with its
// length before it.
func (ix *index) appendClassKey(b []byte, labels map[string]string, gpu bool) []byte {
	keys := ix.keysBuf[:0]
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	ix.keysBuf = keys
	b = strconv.AppendBool(b, gpu)
	for _, k := range keys {
		b = appendField(b, k)
		b = appendField(b, labels[k])
	}
	return b
}

// appendField appends s to b with its length before it.
func appendField(b []byte, s string) []byte {
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}

// take binds a to the best sandbox it can take, if any, and returns the
// sandbox's name.
func (ix *index) take(a Agent) (string, bool) {
	var e *entry
	if a.SandboxName != "" {
		e = ix.named(a)
	} else {
		g := ix.groupOf(a)
		e = g.best()
		if e != nil && e.name == a.Avoid {
			e = g.bestBut(a, e, ix.now)
		}
	}
	// A sandbox idle since a time after now scores below zero; such a
	// sandbox takes no agent.
	if e == nil || Score(a, *e.sb, ix.now) < 0 {
		return "", false
	}
	e.taken = true
	ix.left--
	return e.sb.Name, true
}

// named returns the best sandbox not yet taken that a, which names its
// sandbox, can take, or nil.
func (ix *index) named(a Agent) *entry {
	if ix.byName == nil {
		ix.indexNames()
	}
	var best *entry
	bestScore := 0
	for e := ix.byName[a.SandboxName]; e != nil; e = e.sameName {
		if e.taken || !Feasible(a, *e.sb) {
			continue
		}
		if s := Score(a, *e.sb, ix.now); best == nil || s > bestScore {
			best, bestScore = e, s
		}
	}
	return best
}

// indexNames fills byName, each name's entries in the order of the
// sandboxes.
func (ix *index) indexNames() {
	ix.byName = make(map[string]*entry, len(ix.entries))
	for i := len(ix.entries) - 1; i >= 0; i-- {
		e := &ix.entries[i]
		e.sameName = ix.byName[e.name]
		ix.byName[e.name] = e
	}
}

// group is the classes open to agents of one selector and GPU need, as a
// heap on their best members. It is built for the round's first such agent
// and shared by the rest.
type group struct {
	sel api.Selector
	gpu bool
	h   classHeap
}

// groupOf returns the group of a's selector and GPU need, building it the
// first time.
func (ix *index) groupOf(a Agent) *group {
	k := a.Selector.String()
	for _, g := range ix.groups[k] {
		// Selectors built from unchecked labels may share a String.
		if g.gpu == a.RequiresGPU && reflect.DeepEqual(g.sel, a.Selector) {
			return g
		}
	}
	g := ix.newGroup(a.Selector, a.RequiresGPU)
	ix.groups[k] = append(ix.groups[k], g)
	return g
}

// newGroup collects the classes that sel matches, only those with a GPU if
// gpu, and that have a member left.
func (ix *index) newGroup(sel api.Selector, gpu bool) *group {
	g := &group{sel: sel, gpu: gpu}
	for _, c := range ix.candidates(sel) {
		if gpu && !c.gpu || !sel.Matches(c.labels) {
			continue
		}
		if e := c.head(); e != nil {
			g.h = append(g.h, heapItem{c: c, head: e})
		}
	}
	heap.Init(&g.h)
	return g
}

// candidates returns the classes that may match sel: those carrying the
// least common of its key=value labels, or all when it has none.
func (ix *index) candidates(sel api.Selector) []*class {
	eq := sel.Equalities()
	if len(eq) == 0 {
		return ix.classes
	}
	var out []*class
	first := true
	for k, v := range eq {
		cs := ix.byPair[labelPair{k, v}]
		if first || len(cs) < len(out) {
			out, first = cs, false
		}
	}
	return out
}

// best returns the group's best member not yet taken, or nil. A class's
// head only gets worse as its members are taken (here or through another
// group), so the heap's top, checked against its class's head now, is the
// best.
func (g *group) best() *entry {
	for len(g.h) > 0 {
		top := &g.h[0]
		switch e := top.c.head(); {
		case e == nil:
			heap.Pop(&g.h)
		case e != top.head:
			top.head = e
			heap.Fix(&g.h, 0)
		default:
			return e
		}
	}
	return nil
}

// bestBut returns the best member not yet taken, other than avoid, that
// a can take as of now, or avoid when there is none. It looks at every
// member of the group's classes: it serves only an agent whose best
// sandbox is the one its last attempt failed on, which is rare.
func (g *group) bestBut(a Agent, avoid *entry, now time.Time) *entry {
	var best *entry
	for _, it := range g.h {
		for _, e := range it.c.members {
			if e.taken || e == avoid || Score(a, *e.sb, now) < 0 {
				continue
			}
			if best == nil || compareEntries(e, best) < 0 {
				best = e
			}
		}
	}
	if best == nil {
		return avoid
	}
	return best
}

// heapItem is a class in a group's heap, with the head it had when last
// looked at.
type heapItem struct {
	c    *class
	head *entry
}

// classHeap is a heap of classes, the one with the best head first.
type classHeap []heapItem

func (h classHeap) Len() int           { return len(h) }
func (h classHeap) Less(i, j int) bool { return compareEntries(h[i].head, h[j].head) < 0 }
func (h classHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }

// Push adds x, a heapItem.
func (h *classHeap) Push(x any) { *h = append(*h, x.(heapItem)) }

// Pop removes and returns the last item.
func (h *classHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
