package api

import (
	"fmt"
	"sort"
	"strings"
)

// Selector is a parsed label selector: equality (k=v, k==v, k!=v), set
// (k in (a,b), k notin (a,b)) and existence (k, !k) terms, all of which must
// hold. The zero Selector matches everything.
//
// +kubebuilder:object:generate=false
type Selector struct {
	terms []selTerm
}

type selTerm struct {
	key    string
	op     string // "=", "!=", "in", "notin", "exists", "!exists"
	values []string
}

// Bounds on a selector: a list or watch checks every term against every
// object, and a store may turn terms into query clauses.
const (
	MaxSelectorTerms  = 32
	MaxSelectorValues = 256 // in all the in/notin sets together
)

// ParseSelector parses a label selector such as "pool=web,tier!=gpu".
func ParseSelector(s string) (Selector, error) {
	var sel Selector
	s = strings.TrimSpace(s)
	if s == "" {
		return sel, nil
	}
	raws := splitTerms(s)
	if len(raws) > MaxSelectorTerms {
		return Selector{}, Invalid("labelSelector", "%d terms: a selector may have at most %d", len(raws), MaxSelectorTerms)
	}
	values := 0
	for _, raw := range raws {
		t, err := parseTerm(strings.TrimSpace(raw))
		if err != nil {
			return Selector{}, Invalid("labelSelector", "%v", err)
		}
		values += len(t.values)
		if values > MaxSelectorValues {
			return Selector{}, Invalid("labelSelector", "more than %d values: a selector may list at most %d", MaxSelectorValues, MaxSelectorValues)
		}
		sel.terms = append(sel.terms, t)
	}
	return sel, nil
}

// SelectorFromMap is the equality selector of a matchLabels map.
func SelectorFromMap(m map[string]string) Selector {
	var sel Selector
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		sel.terms = append(sel.terms, selTerm{key: k, op: "=", values: []string{m[k]}})
	}
	return sel
}

// MatchLabels reports whether labels carry every key of want with its
// value: a matchLabels selector (a pool's agents, a DisplayService's
// sandboxes), checked without building a Selector. An empty want matches
// everything; SelectorFromMap(want).Matches(labels) says the same.
func MatchLabels(want, labels map[string]string) bool {
	for k, v := range want {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Equalities returns the key=value terms; a store can use them to narrow a
// query before Matches checks the whole selector.
func (s Selector) Equalities() map[string]string {
	out := map[string]string{}
	for _, t := range s.terms {
		if t.op == "=" {
			out[t.key] = t.values[0]
		}
	}
	return out
}

// Empty reports whether the selector matches everything.
func (s Selector) Empty() bool { return len(s.terms) == 0 }

// Matches reports whether labels satisfy every term.
func (s Selector) Matches(labels map[string]string) bool {
	for _, t := range s.terms {
		v, has := labels[t.key]
		switch t.op {
		case "=":
			if !has || v != t.values[0] {
				return false
			}
		case "!=":
			if has && v == t.values[0] {
				return false
			}
		case "in":
			if !has || !contains(t.values, v) {
				return false
			}
		case "notin":
			if has && contains(t.values, v) {
				return false
			}
		case "exists":
			if !has {
				return false
			}
		case "!exists":
			if has {
				return false
			}
		}
	}
	return true
}

// String renders the selector in its canonical form.
func (s Selector) String() string {
	var parts []string
	for _, t := range s.terms {
		switch t.op {
		case "exists":
			parts = append(parts, t.key)
		case "!exists":
			parts = append(parts, "!"+t.key)
		case "in", "notin":
			parts = append(parts, fmt.Sprintf("%s %s (%s)", t.key, t.op, strings.Join(t.values, ",")))
		default:
			parts = append(parts, t.key+t.op+t.values[0])
		}
	}
	return strings.Join(parts, ",")
}

// splitTerms splits on commas outside parentheses.
func splitTerms(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

func parseTerm(t string) (selTerm, error) {
	if t == "" {
		return selTerm{}, fmt.Errorf("empty term")
	}
	if strings.HasPrefix(t, "!") {
		k := strings.TrimSpace(t[1:])
		return selTerm{key: k, op: "!exists"}, checkSelKey(k)
	}
	if i := strings.Index(t, "!="); i >= 0 {
		return eqTerm(t[:i], "!=", t[i+2:])
	}
	if i := strings.Index(t, "=="); i >= 0 {
		return eqTerm(t[:i], "=", t[i+2:])
	}
	if i := strings.Index(t, "="); i >= 0 {
		return eqTerm(t[:i], "=", t[i+1:])
	}
	fields := strings.Fields(t)
	if len(fields) == 1 {
		return selTerm{key: fields[0], op: "exists"}, checkSelKey(fields[0])
	}
	if len(fields) >= 2 && (fields[1] == "in" || fields[1] == "notin") {
		rest := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(t[len(fields[0]):]), fields[1]))
		if !strings.HasPrefix(rest, "(") || !strings.HasSuffix(rest, ")") {
			return selTerm{}, fmt.Errorf("%q: want %s %s (a,b)", t, fields[0], fields[1])
		}
		var vals []string
		for _, v := range strings.Split(rest[1:len(rest)-1], ",") {
			v = strings.TrimSpace(v)
			if err := checkSelValue(v); err != nil {
				return selTerm{}, err
			}
			vals = append(vals, v)
		}
		return selTerm{key: fields[0], op: fields[1], values: vals}, checkSelKey(fields[0])
	}
	return selTerm{}, fmt.Errorf("cannot parse %q: want key=value, key!=value, key in (a,b), key notin (a,b), key or !key", t)
}

func eqTerm(k, op, v string) (selTerm, error) {
	k, v = strings.TrimSpace(k), strings.TrimSpace(v)
	if err := checkSelKey(k); err != nil {
		return selTerm{}, err
	}
	if err := checkSelValue(v); err != nil {
		return selTerm{}, err
	}
	return selTerm{key: k, op: op, values: []string{v}}, nil
}

func checkSelKey(k string) error {
	if err := validateLabelKey("", k); err != nil {
		return fmt.Errorf("invalid label key %q", k)
	}
	return nil
}

func checkSelValue(v string) error {
	if len(v) > MaxNameLength || !labelValue.MatchString(v) {
		return fmt.Errorf("invalid label value %q", v)
	}
	return nil
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
