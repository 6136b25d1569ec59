package node

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// attemptLogOf is what node n logged of agent's attempt, of any UID the
// agent had.
func attemptLogOf(n *Node, agent string, attempt int) ([]byte, error) {
	n.journal.load()
	n.journal.mu.Lock()
	keys := slices.Clone(n.journal.byAgent[agent])
	n.journal.mu.Unlock()
	for _, k := range keys {
		if k.attempt == attempt {
			rc, _ := n.journal.open(k.agent, attempt)
			defer rc.Close()
			return io.ReadAll(rc)
		}
	}
	return nil, fmt.Errorf("no log of agent %s attempt %d: %w", agent, attempt, os.ErrNotExist)
}

// TestJournalFollows: a reader at the end of an attempt's log reads on
// once more is written, as a file's does, and only that attempt's.
func TestJournalFollows(t *testing.T) {
	j := &logJournal{dir: t.TempDir()}
	j.append("a/1", 1, []byte("one\n"))
	j.append("b/1", 1, []byte("other\n"))
	rc, ok := j.open("a/1", 1)
	if !ok {
		t.Fatal("no log of a")
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil || string(b) != "one\n" {
		t.Fatalf("a's log: %q, %v", b, err)
	}
	j.append("a/1", 2, []byte("attempt two\n"))
	j.append("a/1", 1, []byte("two\n"))
	if b, err = io.ReadAll(rc); err != nil || string(b) != "two\n" {
		t.Errorf("a's log read on: %q, %v; want what was added", b, err)
	}
	buf := make([]byte, 2)
	j.append("a/1", 1, []byte("three\n"))
	var got []byte
	for {
		n, err := rc.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			break
		}
	}
	if string(got) != "three\n" {
		t.Errorf("read two bytes at a time: %q", got)
	}
	if _, ok := j.open("c/1", 1); ok {
		t.Error("a log of an agent that wrote none")
	}
	if _, ok := j.open("a/2", 1); ok {
		t.Error("an agent created again under a's name reads the older a's log")
	}
}

// TestJournalTornRecord: a node that crashed mid-record loses that record
// only; the node started again reads the ones before it and appends to a
// segment of its own.
func TestJournalTornRecord(t *testing.T) {
	src := t.TempDir()
	j := &logJournal{dir: src}
	for i := range 3 {
		j.append("a/1", 1, fmt.Appendf(nil, "line %d\n", i))
	}
	j.close()
	whole, err := os.ReadFile(filepath.Join(src, journalName(0)))
	if err != nil {
		t.Fatal(err)
	}
	for _, cut := range []int{1, journalHeader + 2, 5} {
		t.Run(fmt.Sprint("cut ", cut), func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, journalName(0)), whole[:len(whole)-cut], 0o600)
			j2 := &logJournal{dir: dir}
			got, err := readAll(j2, "a/1", 1)
			if err != nil || got != "line 0\nline 1\n" {
				t.Errorf("the log after a torn record: %q, %v", got, err)
			}
			j2.append("a/1", 1, []byte("after\n"))
			if got, _ := readAll(j2, "a/1", 1); got != "line 0\nline 1\nafter\n" {
				t.Errorf("the log after a line more: %q", got)
			}
			if _, err := os.Stat(filepath.Join(dir, journalName(1))); err != nil {
				t.Errorf("the node started again appended to the old segment: %v", err)
			}
		})
	}
	// A record whose bytes changed ends the reading too.
	j3 := &logJournal{dir: t.TempDir()}
	j3.append("a/1", 1, []byte("kept\n"))
	j3.append("a/1", 1, []byte("changed\n"))
	j3.close()
	p := filepath.Join(j3.dir, journalName(0))
	b, _ := os.ReadFile(p)
	b[len(b)-2] = 'X'
	os.WriteFile(p, b, 0o600)
	if got, _ := readAll(&logJournal{dir: j3.dir}, "a/1", 1); got != "kept\n" {
		t.Errorf("a record whose checksum fails is read: %q", got)
	}
}

func readAll(j *logJournal, agent string, attempt int) (string, error) {
	rc, ok := j.open(agent, attempt)
	if !ok {
		return "", os.ErrNotExist
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return string(b), err
}

// TestJournalSegments: past the segment size a new segment begins; a
// segment is removed once no agent's records are in it, and a reader
// that opened it reads on.
func TestJournalSegments(t *testing.T) {
	defer func(n int64) { journalSegmentBytes = n }(journalSegmentBytes)
	journalSegmentBytes = 100
	dir := t.TempDir()
	j := &logJournal{dir: dir}
	line := []byte(strings.Repeat("x", 60) + "\n") // a record of 76 bytes
	j.append("a/1", 1, line)
	j.append("b/1", 1, line) // segment 0 holds 152 bytes: the next record begins segment 1
	j.append("a/1", 1, line)
	j.append("a/1", 1, line)
	j.append("c/1", 1, line) // segment 2
	segs := func() []string {
		m, _ := filepath.Glob(filepath.Join(dir, "*"+journalSuffix))
		for i := range m {
			m[i] = filepath.Base(m[i])
		}
		return m
	}
	if got, want := segs(), []string{journalName(0), journalName(1), journalName(2)}; !slices.Equal(got, want) {
		t.Fatalf("segments %v, want %v", got, want)
	}
	rc, _ := j.open("a/1", 1)
	defer rc.Close()
	one := make([]byte, 1)
	rc.Read(one) // opens segment 0
	j.remove("a")
	if got, want := segs(), []string{journalName(0), journalName(2)}; !slices.Equal(got, want) {
		t.Errorf("after a's removal: %v, want %v (segment 0 holds b's record)", got, want)
	}
	j.remove("b")
	if got, want := segs(), []string{journalName(2)}; !slices.Equal(got, want) {
		t.Errorf("after b's removal: %v, want %v", got, want)
	}
	rest, err := io.ReadAll(rc)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a reader of a removed agent: %v", err)
	}
	if len(rest) != len(line)-1 {
		t.Errorf("a reader that had opened the removed segment read %d bytes of it, want the rest of its record", len(rest))
	}
	j.remove("c")
	if got := segs(); !slices.Equal(got, []string{journalName(2)}) {
		t.Errorf("the segment appended to was removed: %v", got)
	}
	j.close()
	if got := segs(); len(got) != 0 {
		t.Errorf("closed with no records left: %v", got)
	}
}

// TestJournalConcurrent: attempts logging at once each read back their own
// lines, in order (run it with -race).
func TestJournalConcurrent(t *testing.T) {
	j := &logJournal{dir: t.TempDir()}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 200 {
				if err := j.append(fmt.Sprint("agent-", w, "/1"), 1, fmt.Appendf(nil, "%d\n", i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for w := range 8 {
		got, err := readAll(j, fmt.Sprint("agent-", w, "/1"), 1)
		var want strings.Builder
		for i := range 200 {
			fmt.Fprintf(&want, "%d\n", i)
		}
		if err != nil || got != want.String() {
			t.Errorf("agent-%d's log: %d bytes, %v", w, len(got), err)
		}
	}
}

// TestJournalBounds: a record of no agent, of a name past a DNS name's
// length or of more than the largest record is refused; an empty one is
// nothing; a node without a data directory keeps nothing.
func TestJournalBounds(t *testing.T) {
	j := &logJournal{dir: t.TempDir()}
	for _, tt := range []struct {
		agent string
		data  []byte
	}{{"", []byte("x")}, {strings.Repeat("a", maxJournalAgent+1), []byte("x")}, {"a/1", make([]byte, maxJournalData+1)}} {
		if err := j.append(tt.agent, 1, tt.data); err == nil {
			t.Errorf("a record of %d bytes by an agent of %d: no error", len(tt.data), len(tt.agent))
		}
	}
	if err := j.append("a/1", 1, nil); err != nil {
		t.Errorf("an empty record: %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(j.dir, "*")); len(m) != 0 {
		t.Errorf("refused and empty records made %v", m)
	}
	none := &logJournal{}
	if err := none.append("a/1", 1, []byte("x")); err == nil {
		t.Error("a journal of no directory took a record")
	}
	if _, ok := none.open("a/1", 1); ok {
		t.Error("a journal of no directory has a log")
	}
}

// TestJournalSkipsATakenSegment: a segment made by someone else since the
// journal's load is not appended to.
func TestJournalSkipsATakenSegment(t *testing.T) {
	dir := t.TempDir()
	j := &logJournal{dir: dir}
	j.load()
	os.WriteFile(filepath.Join(dir, journalName(0)), []byte("not ours"), 0o600)
	if err := j.append("a/1", 1, []byte("line\n")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, journalName(0))); string(b) != "not ours" {
		t.Errorf("the taken segment holds %q", b)
	}
	if got, err := readAll(j, "a/1", 1); err != nil || got != "line\n" {
		t.Errorf("the log: %q, %v", got, err)
	}
}
