package node

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// The attempts' logs of a node are records appended to journal segments,
// agents/logs-NNNNNNNN.journal, not a file each: creating a file costs
// ext4 a quarter to half a millisecond of system CPU, more than all of a
// short attempt's lines, and at a thousand attempts a second it was the
// node's largest cost. A record is one write of one attempt's log:
//
//	crc32 (IEEE) of what follows: 4 bytes, big-endian
//	length of the agent's key:    2 bytes
//	the attempt:                  4 bytes
//	length of the data:           4 bytes
//	the agent's key, the data
//
// An agent's key is its name and UID, NAME/UID: an agent created again
// under the name of one removed never reads the older one's logs.
//
// The node keeps where each attempt's records are (logJournal.idx),
// learnt at its first use by reading the segments, and appends to a
// segment of its own from each start on, so that a record torn by a
// crash ends only an old segment's reading. A segment is removed once
// every agent with records in it is gone, and a new one begun past
// journalSegmentBytes. A removal writes nothing: the records of a removed
// agent in a segment kept for others are indexed again by a node started
// again, under that agent's UID, until that name's next removal. Logs of
// the layouts before (attemptlog.go) are still read and removed.

// journalSegmentBytes is the size past which the node begins a new
// segment.
var journalSegmentBytes int64 = 64 << 20

const (
	journalPrefix   = "logs-"
	journalSuffix   = ".journal"
	journalHeader   = 4 + 2 + 4 + 4
	maxJournalData  = 16 << 20 // a record's data, as read back: more is a torn record
	maxJournalAgent = 512      // an agent's key
)

// journalName is the file name of segment seg.
func journalName(seg int) string {
	return fmt.Sprintf("%s%08d%s", journalPrefix, seg, journalSuffix)
}

// parseJournalName is the segment a file named by journalName holds.
func parseJournalName(name string) (int, bool) {
	num, ok := strings.CutPrefix(name, journalPrefix)
	if !ok {
		return 0, false
	}
	if num, ok = strings.CutSuffix(num, journalSuffix); !ok {
		return 0, false
	}
	seg, err := strconv.Atoi(num)
	return seg, err == nil && seg >= 0 && journalName(seg) == name
}

// logExtent is where one record's data is.
type logExtent struct {
	seg int
	off int64
	n   int
}

// attemptRecords are the records of one attempt, in the order written;
// only appended to, under the journal's lock.
type attemptRecords struct {
	ext []logExtent
}

type attemptKey struct {
	agent   string // NAME/UID
	attempt int
}

// journalKey is the key of the agent name of UID uid.
func journalKey(name, uid string) string { return name + "/" + uid }

// logJournal is a node's journal of attempts' logs in dir.
type logJournal struct {
	dir    string
	loaded sync.Once

	mu      sync.Mutex // guards all below
	idx     map[attemptKey]*attemptRecords
	byAgent map[string][]attemptKey // by agent name: what idx holds of it
	live    map[int]int64           // by segment: the bytes of records idx still holds
	cur     *os.File                // the segment appended to; nil until the first record
	curSeg  int
	curSize int64
}

// load reads the segments dir holds, once.
func (j *logJournal) load() {
	j.loaded.Do(func() {
		j.mu.Lock()
		defer j.mu.Unlock()
		j.idx, j.byAgent, j.live = map[attemptKey]*attemptRecords{}, map[string][]attemptKey{}, map[int]int64{}
		if j.dir == "" {
			return // a node without a data directory
		}
		entries, _ := os.ReadDir(j.dir)
		var segs []int
		for _, e := range entries {
			if seg, ok := parseJournalName(e.Name()); ok && e.Type().IsRegular() {
				segs = append(segs, seg)
			}
		}
		slices.Sort(segs)
		for _, seg := range segs {
			j.scan(seg)
			if j.live[seg] == 0 {
				delete(j.live, seg)
				os.Remove(filepath.Join(j.dir, journalName(seg)))
			}
			j.curSeg = seg + 1
		}
	})
}

// scan indexes the records of segment seg up to its end or its first
// torn record.
func (j *logJournal) scan(seg int) {
	f, err := os.Open(filepath.Join(j.dir, journalName(seg)))
	if err != nil {
		return
	}
	defer f.Close()
	r := &countingReader{r: bufio.NewReaderSize(f, 64<<10)}
	var hdr [journalHeader]byte
	for {
		start := r.n
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		sum := binary.BigEndian.Uint32(hdr[0:])
		nameLen := int(binary.BigEndian.Uint16(hdr[4:]))
		attempt := int(binary.BigEndian.Uint32(hdr[6:]))
		dataLen := int(binary.BigEndian.Uint32(hdr[10:]))
		if nameLen == 0 || nameLen > maxJournalAgent || dataLen > maxJournalData {
			return
		}
		body := make([]byte, nameLen+dataLen)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		crc := crc32.NewIEEE()
		crc.Write(hdr[4:])
		crc.Write(body)
		if crc.Sum32() != sum {
			return
		}
		j.index(string(body[:nameLen]), attempt, logExtent{seg: seg, off: start + journalHeader + int64(nameLen), n: dataLen})
	}
}

// index notes a record's data, under mu.
func (j *logJournal) index(agent string, attempt int, e logExtent) {
	k := attemptKey{agent, attempt}
	rec := j.idx[k]
	if rec == nil {
		rec = &attemptRecords{}
		j.idx[k] = rec
		name, _, _ := strings.Cut(agent, "/")
		j.byAgent[name] = append(j.byAgent[name], k)
	}
	rec.ext = append(rec.ext, e)
	j.live[e.seg] += int64(e.n)
}

// append writes p as a record of agent's attempt; agent is its key
// (journalKey).
func (j *logJournal) append(agent string, attempt int, p []byte) error {
	if len(p) == 0 {
		return nil
	}
	if agent == "" || len(agent) > maxJournalAgent || len(p) > maxJournalData {
		return fmt.Errorf("log record of %q: out of bounds", agent)
	}
	j.load()
	if j.dir == "" {
		return errors.New("log record: the node keeps no logs")
	}
	rec := make([]byte, journalHeader+len(agent)+len(p))
	binary.BigEndian.PutUint16(rec[4:], uint16(len(agent)))
	binary.BigEndian.PutUint32(rec[6:], uint32(attempt))
	binary.BigEndian.PutUint32(rec[10:], uint32(len(p)))
	copy(rec[journalHeader:], agent)
	copy(rec[journalHeader+len(agent):], p)
	binary.BigEndian.PutUint32(rec[0:], crc32.ChecksumIEEE(rec[4:]))

	j.mu.Lock()
	defer j.mu.Unlock()
	if j.cur != nil && j.curSize >= journalSegmentBytes {
		j.cur.Close()
		if j.live[j.curSeg] == 0 {
			delete(j.live, j.curSeg)
			os.Remove(filepath.Join(j.dir, journalName(j.curSeg)))
		}
		j.cur, j.curSeg, j.curSize = nil, j.curSeg+1, 0
	}
	if j.cur == nil {
		if err := os.MkdirAll(j.dir, 0o700); err != nil {
			return err
		}
		// A segment of that number made since the load (by another
		// process on the same directory) is skipped, not appended to.
		for try := 0; ; try++ {
			f, err := os.OpenFile(filepath.Join(j.dir, journalName(j.curSeg)), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
			if err == nil {
				j.cur = f
				break
			}
			if !errors.Is(err, os.ErrExist) || try == 100 {
				return err
			}
			j.curSeg++
		}
	}
	n, err := j.cur.Write(rec)
	off := j.curSize
	j.curSize += int64(n)
	if err != nil {
		return err
	}
	j.index(agent, attempt, logExtent{seg: j.curSeg, off: off + journalHeader + int64(len(agent)), n: len(p)})
	return nil
}

// open reads the log of agent's attempt (agent: its key, journalKey), and
// follows it as it grows; ok is false when the journal holds none of it.
func (j *logJournal) open(agent string, attempt int) (rc io.ReadCloser, ok bool) {
	j.load()
	j.mu.Lock()
	defer j.mu.Unlock()
	rec := j.idx[attemptKey{agent, attempt}]
	if rec == nil {
		return nil, false
	}
	return &journalReader{j: j, rec: rec, files: map[int]*os.File{}}, true
}

// remove forgets the logs of agent name, of every UID it had, and removes
// the segments no one else's records are in.
func (j *logJournal) remove(name string) {
	j.load()
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, k := range j.byAgent[name] {
		for _, e := range j.idx[k].ext {
			j.live[e.seg] -= int64(e.n)
			if j.live[e.seg] == 0 && (e.seg != j.curSeg || j.cur == nil) {
				delete(j.live, e.seg)
				os.Remove(filepath.Join(j.dir, journalName(e.seg)))
			}
		}
		delete(j.idx, k)
	}
	delete(j.byAgent, name)
}

// close closes the segment appended to, and removes it if no agent's
// records are left in it.
func (j *logJournal) close() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.cur != nil {
		j.cur.Close()
		if j.live[j.curSeg] == 0 {
			delete(j.live, j.curSeg)
			os.Remove(filepath.Join(j.dir, journalName(j.curSeg)))
		}
		j.cur, j.curSeg, j.curSize = nil, j.curSeg+1, 0
	}
}

// journalReader reads one attempt's records in order. At their end it
// reports io.EOF, and reads on from there once more are written, as a
// file does.
type journalReader struct {
	j     *logJournal
	rec   *attemptRecords
	i     int // the record read
	off   int // read of it
	files map[int]*os.File
}

func (r *journalReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.j.mu.Lock()
	if r.i >= len(r.rec.ext) {
		r.j.mu.Unlock()
		return 0, io.EOF
	}
	e := r.rec.ext[r.i]
	r.j.mu.Unlock()
	f := r.files[e.seg]
	if f == nil {
		var err error
		if f, err = os.Open(filepath.Join(r.j.dir, journalName(e.seg))); err != nil {
			return 0, fmt.Errorf("agent log: %w", errors.Unwrap(err))
		}
		r.files[e.seg] = f
	}
	n, err := f.ReadAt(p[:min(len(p), e.n-r.off)], e.off+int64(r.off))
	r.off += n
	if r.off == e.n {
		r.i, r.off = r.i+1, 0
	}
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

func (r *journalReader) Close() error {
	for _, f := range r.files {
		f.Close()
	}
	clear(r.files)
	return nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
