package node

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// An attempt's log is a file of its own, agents/NAME.ATTEMPT.log, beside
// (not in) the attempt's directory agents/NAME/ATTEMPT, which is made only
// when the attempt keeps a screenshot, a recording or an artifact. Two
// directories cost the node more than the file does (up to half a
// millisecond of system CPU an attempt on ext4), and most short attempts
// keep nothing but their log. Agent names are DNS labels, without dots,
// so NAME.ATTEMPT.log names one attempt. Logs written before this layout
// (agents/NAME/ATTEMPT/agent.log) are still read.

// attemptLogName is the name of an attempt's log in the agents directory.
func attemptLogName(agent string, attempt int) string {
	return agent + "." + strconv.Itoa(attempt) + ".log"
}

// parseAttemptLog is the agent and attempt of a file named by
// attemptLogName; ok is false for any other name.
func parseAttemptLog(name string) (agent string, attempt int, ok bool) {
	base, found := strings.CutSuffix(name, ".log")
	if !found {
		return "", 0, false
	}
	agent, num, found := strings.Cut(base, ".")
	if !found || agent == "" {
		return "", 0, false
	}
	attempt, err := strconv.Atoi(num)
	if err != nil || attempt < 1 || strconv.Itoa(attempt) != num {
		return "", 0, false
	}
	return agent, attempt, true
}

// attemptLogs knows which attempts' logs the node keeps of each agent, so
// that an agent's removal removes its logs without reading the whole
// agents directory each time. What the node kept before it started is
// learnt by reading the directory once, at the first removal.
type attemptLogs struct {
	scanned sync.Once
	mu      sync.Mutex
	by      map[string]map[int]struct{} // by agent: its attempts' logs
}

// create creates (or opens again, to append) the log of attempt in dir,
// the agents directory, making dir when it is missing.
func (l *attemptLogs) create(dir, agent string, attempt int) (*os.File, error) {
	l.add(agent, attempt)
	path := filepath.Join(dir, attemptLogName(agent, attempt))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if os.IsNotExist(err) {
		if err = os.MkdirAll(dir, 0o700); err == nil {
			f, err = os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		}
	}
	return f, err
}

func (l *attemptLogs) add(agent string, attempt int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.by == nil {
		l.by = map[string]map[int]struct{}{}
	}
	if l.by[agent] == nil {
		l.by[agent] = map[int]struct{}{}
	}
	l.by[agent][attempt] = struct{}{}
}

// remove removes the logs of agent's attempts from dir, the agents
// directory.
func (l *attemptLogs) remove(dir, agent string) {
	l.scan(dir)
	l.mu.Lock()
	attempts := l.by[agent]
	delete(l.by, agent)
	l.mu.Unlock()
	for attempt := range attempts {
		os.Remove(filepath.Join(dir, attemptLogName(agent, attempt)))
	}
}

// scan learns, once, the logs dir held when the node started.
func (l *attemptLogs) scan(dir string) {
	l.scanned.Do(func() { l.read(dir) })
}

func (l *attemptLogs) read(dir string) {
	f, err := os.Open(dir)
	if err != nil {
		return
	}
	defer f.Close()
	for {
		names, err := f.Readdirnames(1024)
		for _, name := range names {
			if agent, attempt, ok := parseAttemptLog(name); ok {
				l.add(agent, attempt)
			}
		}
		if err != nil {
			return
		}
	}
}
