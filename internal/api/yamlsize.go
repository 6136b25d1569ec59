package api

import (
	yamlv3 "go.yaml.in/yaml/v3"
)

// YAML aliases (*name) repeat the node their anchor (&name) marks, so a
// small document can stand for a very large object: ten aliases of a list
// of ten aliases of … ("billion laughs"), or one long string repeated many
// times. The input may expand to at most MaxYAMLExpansion times its size
// plus YAMLExpansionAllowance; a document without aliases always fits.
const (
	MaxYAMLExpansion       = 4
	YAMLExpansionAllowance = 1 << 20
)

// yamlSizer measures YAML documents as they would be once their aliases
// are expanded, without expanding them: a scalar counts its text plus one
// byte, a list or mapping one byte plus its elements. That is no more than
// the JSON the document becomes, and, for a document without aliases, at
// most one and a half times its text (the flow mapping {a, b, c}).
type yamlSizer struct {
	limit, total int64
	sizes        map[*yamlv3.Node]int64 // nodes measured, by their expanded size
	open         map[*yamlv3.Node]bool  // nodes being measured: an alias to one is a cycle
}

func newYAMLSizer(inputLen int) *yamlSizer {
	return &yamlSizer{
		limit: MaxYAMLExpansion*int64(inputLen) + YAMLExpansionAllowance,
		sizes: map[*yamlv3.Node]int64{},
		open:  map[*yamlv3.Node]bool{},
	}
}

// add measures one more document of the input and reports an error when
// the input so far expands beyond the limit.
func (s *yamlSizer) add(n *yamlv3.Node) error {
	size, err := s.size(n, 0)
	if err != nil {
		return err
	}
	s.total += size
	if s.total > s.limit {
		return Invalid("", "invalid YAML: its aliases expand the input beyond %d bytes (%d times its size plus %d KiB): repeat less through anchors and aliases", s.limit, MaxYAMLExpansion, YAMLExpansionAllowance>>10)
	}
	return nil
}

// size is n's expanded size, capped just above the limit so that the sums
// cannot overflow. depth bounds the recursion as parseJSON bounds nesting.
func (s *yamlSizer) size(n *yamlv3.Node, depth int) (int64, error) {
	if n == nil {
		return 0, nil
	}
	if depth > maxJSONDepth+1 {
		return 0, Invalid("", "nested more than %d levels deep", maxJSONDepth)
	}
	if v, ok := s.sizes[n]; ok {
		return v, nil
	}
	s.open[n] = true
	defer delete(s.open, n)
	var total int64 = 1
	switch n.Kind {
	case yamlv3.AliasNode:
		if s.open[n.Alias] {
			return 0, Invalid("", "invalid YAML: the alias *%s at line %d refers to a node that contains it", n.Value, n.Line)
		}
		v, err := s.size(n.Alias, depth)
		if err != nil {
			return 0, err
		}
		total = v
	case yamlv3.ScalarNode:
		total += int64(len(n.Value))
	default: // documents, lists, mappings
		for _, c := range n.Content {
			v, err := s.size(c, depth+1)
			if err != nil {
				return 0, err
			}
			total = min(total+v, s.limit+1)
		}
	}
	s.sizes[n] = total
	return total, nil
}
