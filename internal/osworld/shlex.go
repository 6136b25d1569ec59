package osworld

import (
	"errors"
	"strings"
)

// splitWords splits s into words as Python's shlex.split does (POSIX
// mode, no comments): blanks separate words; single quotes keep what they
// hold; within double quotes a backslash escapes only " and \; outside
// quotes a backslash escapes any character. OSWorld's guest server splits
// a command given as a string this way when no shell is asked for.
func splitWords(s string) ([]string, error) {
	var (
		words []string
		cur   strings.Builder
		in    bool // a word has started (even an empty quoted one)
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		case c == '\'':
			in = true
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("no closing quotation")
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
		case c == '"':
			in = true
			i++
			for ; ; i++ {
				if i >= len(s) {
					return nil, errors.New("no closing quotation")
				}
				if s[i] == '"' {
					break
				}
				if s[i] == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\') {
					i++
				}
				cur.WriteByte(s[i])
			}
		case c == '\\':
			in = true
			if i+1 >= len(s) {
				return nil, errors.New("no escaped character")
			}
			i++
			cur.WriteByte(s[i])
		default:
			in = true
			cur.WriteByte(c)
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words, nil
}
