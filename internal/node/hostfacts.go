package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/hostpath"
)

// Host facts are what a sandbox needs of the host that runs it and that
// admission cannot know: the API server may run on another host, even one
// of another kind, so it checks only what is true on every host. The node
// that would run a sandbox checks the rest and, when this host lacks
// something, leaves the sandbox Pending with the reason, as the kubelet
// does with a pod.

// reasonHostPath is the Pending reason of a sandbox that names a host path
// this node cannot use.
const reasonHostPath = "HostPathUnavailable"

// hostPathProblem returns why this node cannot use a host path that o
// names, naming the field and the path, or "" when it can use them all. A
// path is unusable when it is not absolute in this host's syntax (a Windows
// path on Linux), lies outside the node's allowed roots once its symbolic
// links are resolved, or does not exist. It reads the file system and
// changes nothing.
func (n *Node) hostPathProblem(o api.Object) string {
	for _, hp := range api.HostPaths(o) {
		if !hostpath.Native(hp.Path) {
			return fmt.Sprintf("%s: %q is not an absolute path on this node (%s): it is written for a host of another kind", hp.Field, hp.Path, runtime.GOOS)
		}
		if err := n.opt.AllowedRoots.Check(hp.Field, hp.Path); err != nil {
			return err.Error()
		}
		if _, err := os.Stat(hp.Path); errors.Is(err, fs.ErrNotExist) {
			return fmt.Sprintf("%s: %q does not exist on this node", hp.Field, hp.Path)
		} else if err != nil {
			return fmt.Sprintf("%s: %v", hp.Field, err)
		}
	}
	return ""
}
