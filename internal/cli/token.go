package cli

import (
	"net"
	"net/url"
	"strings"

	"github.com/hvkube/hvkube/internal/datadir"
)

// localToken is the token of a server on this machine, as kubectl reads
// its kubeconfig: when server is a loopback address, the token file
// hvkube serve keeps in its default data directory (HVKUBE_DATA_DIR, else
// $XDG_DATA_HOME/hvkube, else ~/.local/share/hvkube). It is "" when server
// is elsewhere or the file cannot be read (another user's server, one
// with another --data-dir): the server then answers 401 and the user sets
// HVKUBE_TOKEN.
func localToken(server string) string {
	if !loopbackURL(server) {
		return ""
	}
	t, err := datadir.ReadTokenFile(datadir.TokenPath(datadir.Default()))
	if err != nil {
		return ""
	}
	return t
}

// loopbackURL reports whether the server URL (with or without a scheme)
// names this machine's loopback interface.
func loopbackURL(server string) bool {
	if !strings.Contains(server, "://") {
		server = "http://" + server
	}
	u, err := url.Parse(server)
	if err != nil {
		return false
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
