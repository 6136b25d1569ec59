package node

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Before the journal (logjournal.go), an attempt's log was a file of its
// own, agents/NAME.ATTEMPT.log, beside (not in) the attempt's directory
// agents/NAME/ATTEMPT, which is made only when the attempt keeps a
// screenshot, a recording or an artifact; and before that, the file
// agents/NAME/ATTEMPT/agent.log. Logs of both layouts are still read, and
// removed with their agents. Agent names are DNS labels, without dots, so
// NAME.ATTEMPT.log names one attempt.

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

// attemptLogs knows which attempts' logs of the layout before the journal
// the node keeps of each agent, so that an agent's removal removes them
// without reading the whole agents directory each time. It learns them by
// reading the directory once, at the first removal.
type attemptLogs struct {
	scanned sync.Once
	mu      sync.Mutex
	by      map[string]map[int]struct{} // by agent: its attempts' logs
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
