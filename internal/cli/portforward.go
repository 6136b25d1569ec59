package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/cdp"
)

func newPortForwardCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "port-forward SANDBOX [LOCAL:]REMOTE",
		Short: "Forward a local port to an HTTP or WebSocket server inside a sandbox",
		Long: `Listen on 127.0.0.1:LOCAL and forward each request to port REMOTE inside the
sandbox's guest, through the API's port forward
(/api/v1/sandboxes/SANDBOX/ports/REMOTE/…) with the token added: local
programs reach the guest's server without a token of their own. LOCAL
defaults to REMOTE; 0 takes any free port, which is printed.

It carries HTTP and WebSocket, not raw TCP: enough for Chromium's DevTools
(connectOverCDP), chromedriver and Selenium, and web servers in the guest.
DevTools' target lists (/json/version, /json/list) are rewritten to name
the local address. Only requests that name the local address (Host) and
come from no web page of another origin are forwarded. It runs until
interrupted.`,
		Example: `  hvkube port-forward browser-agent-1 9222       # DevTools at http://127.0.0.1:9222
  hvkube port-forward browser-agent-1 4444:9515  # chromedriver at http://127.0.0.1:4444
  hvkube port-forward browser-agent-1 0:8080     # any free local port, printed`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			local, remote, err := parsePortSpec(args[1])
			if err != nil {
				return err
			}
			return e.portForward(cmd.Context(), args[0], local, remote)
		},
	}
}

// parsePortSpec reads [LOCAL:]REMOTE.
func parsePortSpec(s string) (local, remote int, err error) {
	l, r, pair := strings.Cut(s, ":")
	if !pair {
		r = l
	}
	num := func(v string, min int) (int, bool) {
		n, err := strconv.Atoi(v)
		return n, err == nil && v[0] >= '0' && v[0] <= '9' && n >= min && n <= 65535
	}
	var ok bool
	if remote, ok = num(r, 1); !ok {
		return 0, 0, fmt.Errorf("%q: the remote port is not a TCP port (1..65535): want [LOCAL:]REMOTE", s)
	}
	if local, ok = num(l, 0); !ok {
		return 0, 0, fmt.Errorf("%q: the local port is not a TCP port (0..65535): want [LOCAL:]REMOTE", s)
	}
	if !pair {
		local = remote
	}
	return local, remote, nil
}

// portForward serves the forward until ctx ends.
func (e *env) portForward(ctx context.Context, sandbox string, local, remote int) error {
	c, err := e.client()
	if err != nil {
		return err
	}
	if _, err := c.Get(ctx, api.KindSandbox, sandbox); err != nil {
		return err
	}
	base, err := url.Parse(c.Server())
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(local)))
	if err != nil {
		return err
	}
	defer ln.Close()
	f := &localForward{
		server: base,
		prefix: "/api/v1/sandboxes/" + url.PathEscape(sandbox) + "/ports/" + strconv.Itoa(remote),
		token:  e.token,
		port:   strconv.Itoa(ln.Addr().(*net.TCPAddr).Port),
		errOut: e.errOut,
	}
	fmt.Fprintf(e.out, "Forwarding from 127.0.0.1:%s -> %s:%d (HTTP and WebSocket)\n", f.port, sandbox, remote)
	srv := &http.Server{Handler: f.handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	return nil
}

// localForward is the local end of a port forward: a reverse proxy to the
// API's forward of one port.
type localForward struct {
	server *url.URL // the API
	prefix string   // the forward's path on it
	token  string
	port   string // the local port listened on
	errOut io.Writer
}

func (f *localForward) handler() http.Handler {
	target := *f.server
	target.Path = strings.TrimRight(target.Path, "/") + f.prefix
	target.RawPath = ""
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DisableCompression = true // what the guest sends passes unchanged
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&target)
			// Checked below; the API's guard would take the local page for
			// another site's.
			pr.Out.Header.Del("Origin")
			pr.Out.Header.Del("Authorization")
			if f.token != "" {
				pr.Out.Header.Set("Authorization", "Bearer "+f.token)
			}
		},
		Transport:      tr,
		FlushInterval:  -1,
		ModifyResponse: f.modifyResponse,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() == nil {
				fmt.Fprintf(f.errOut, "port-forward: %s %s: %v\n", r.Method, r.URL.Path, err)
				http.Error(w, err.Error(), http.StatusBadGateway)
			}
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A web page whose name was re-pointed at 127.0.0.1, or a page of
		// another origin, would otherwise use the token added here.
		if !f.isLocal(r.Host) {
			http.Error(w, fmt.Sprintf("Host %q is not this forward's address (127.0.0.1:%s)", r.Host, f.port), http.StatusMisdirectedRequest)
			return
		}
		if o := r.Header.Get("Origin"); o != "" && !f.isLocalOrigin(o) {
			http.Error(w, fmt.Sprintf("requests from the web page at %s are not forwarded", o), http.StatusForbidden)
			return
		}
		rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), localHostKey{}, r.Host)))
	})
}

func (f *localForward) isLocal(hostport string) bool {
	return hostport == "127.0.0.1:"+f.port || hostport == "localhost:"+f.port
}

func (f *localForward) isLocalOrigin(origin string) bool {
	u, err := url.Parse(origin)
	return err == nil && u.Scheme == "http" && f.isLocal(u.Host)
}

// apiForwardCSP is the Content-Security-Policy the API adds to what a
// port forward answers (docs/api.md, Port forwards), so that a guest's
// page never runs as the API's origin. This address serves nothing but the
// guest, so it is taken off again: the guest's pages work here as they do
// in the guest.
const apiForwardCSP = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"

// modifyResponse takes off the API's Content-Security-Policy and rewrites
// the URLs of DevTools' target lists, which the API made name its own
// forward, to name this one.
func (f *localForward) modifyResponse(resp *http.Response) error {
	if csp := resp.Header.Values("Content-Security-Policy"); len(csp) > 0 {
		kept := csp[:0:0]
		for _, v := range csp {
			if v != apiForwardCSP {
				kept = append(kept, v)
			}
		}
		resp.Header["Content-Security-Policy"] = kept
		if len(kept) == 0 {
			resp.Header.Del("Content-Security-Policy")
		}
	}
	local, ok := resp.Request.Context().Value(localHostKey{}).(string)
	if !ok {
		local = "127.0.0.1:" + f.port
	}
	p := strings.TrimPrefix(resp.Request.URL.Path, strings.TrimRight(f.server.Path, "/")+f.prefix)
	return cdp.RewriteTargetList(resp, p, f.wsURL(local), f.frontendURL(local))
}

// localHostKey carries the Host the client used (this forward's address)
// to modifyResponse.
type localHostKey struct{}

// remote is the API's forward without the scheme: HOST/…/ports/PORT.
func (f *localForward) remote() string {
	return f.server.Host + strings.TrimRight(f.server.Path, "/") + f.prefix
}

// wsURL maps a webSocketDebuggerUrl from the API's forward to local
// (HOST:PORT).
func (f *localForward) wsURL(local string) func(string) string {
	return func(s string) string {
		for _, scheme := range []string{"ws://", "wss://"} {
			if rest, ok := strings.CutPrefix(s, scheme+f.remote()+"/"); ok {
				return "ws://" + local + "/" + rest
			}
		}
		return s
	}
}

// frontendURL maps a devtoolsFrontendUrl's ws= (or wss=) from the API's
// forward to local, and a path on the API's forward to the same path here.
func (f *localForward) frontendURL(local string) func(string) string {
	return func(s string) string {
		u, err := url.Parse(s)
		if err != nil {
			return s
		}
		q := u.Query()
		for _, key := range []string{"ws", "wss"} {
			if rest, ok := strings.CutPrefix(q.Get(key), f.remote()+"/"); ok {
				q.Del(key)
				q.Set("ws", local+"/"+rest)
				u.RawQuery = q.Encode()
			}
		}
		if u.Host == "" {
			u.Path = strings.TrimPrefix(u.Path, strings.TrimRight(f.server.Path, "/")+f.prefix)
			u.RawPath = ""
		}
		return u.String()
	}
}
