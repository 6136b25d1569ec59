package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/store"
)

// ListenerOptions configure Listeners.
type ListenerOptions struct {
	Store store.Interface
	// Handler serves one service's listener: GET /display/{sandbox} for
	// the sandboxes it selects, behind the server's guard and token rules.
	Handler func(service string) http.Handler
	// TokenSet reports whether the server requires an API token; services
	// on the host address get no listener without one.
	TokenSet bool
	Logger   *slog.Logger
}

// Listeners keeps the display listeners of DisplayServices with ports: a
// ClusterIP service's ports listen on 127.0.0.1, a NodePort or
// LoadBalancer service's on every address of the host. Each listener
// serves only its service's gateway. It runs as a controller of the
// node, beside the DisplayService controller that writes the endpoints.
type Listeners struct {
	o   ListenerOptions
	log *slog.Logger

	mu   sync.Mutex // guards open and closed
	open map[string]*serviceListener
	// closed is set by Close: nothing opens afterwards.
	closed bool
}

// serviceListener is the listeners of one service.
type serviceListener struct {
	addrs   []string
	servers []*http.Server
	cancel  context.CancelFunc // ends the sessions they carry
}

// NewListeners returns the listener keeper; Register starts it.
func NewListeners(o ListenerOptions) *Listeners {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Listeners{o: o, log: o.Logger, open: map[string]*serviceListener{}}
}

// Register adds the keeper to m, as a controller of DisplayServices.
func (l *Listeners) Register(m *reconcile.Manager) {
	m.Register(reconcile.Controller{Name: "display-listeners", For: api.KindDisplayService, Reconciler: l})
}

// ListenAddrs are the addresses a service's gateway listens on; none when
// it has no ports or cannot be served.
func ListenAddrs(ds *api.DisplayService, tokenSet bool) []string {
	if ds.Metadata.DeletionTimestamp != nil {
		return nil
	}
	if reason, _ := ds.Spec.GatewayProblem(tokenSet); reason != "" {
		return nil
	}
	host := "127.0.0.1"
	if ds.Spec.HostWide() {
		host = ""
	}
	var addrs []string
	for _, p := range ds.Spec.Ports {
		a := net.JoinHostPort(host, strconv.Itoa(p.Port))
		if !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	return addrs
}

// Reconcile opens and closes the listeners of the service name to match
// its spec. A port that cannot be listened on (taken) is reported as a
// Warning event on the service and tried again later.
func (l *Listeners) Reconcile(ctx context.Context, name string) (reconcile.Result, error) {
	o, err := l.o.Store.Get(ctx, api.KindDisplayService, name)
	var want []string
	var ds *api.DisplayService
	switch {
	case errors.Is(err, api.ErrNotFound):
	case err != nil:
		return reconcile.Result{}, err
	default:
		ds = o.(*api.DisplayService)
		want = ListenAddrs(ds, l.o.TokenSet)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	cur := l.open[name]
	if cur != nil && slices.Equal(cur.addrs, want) {
		return reconcile.Result{}, nil
	}
	if cur != nil {
		cur.close()
		delete(l.open, name)
		l.log.Info("display listeners closed", "displayservice", name, "addrs", cur.addrs)
	}
	if len(want) == 0 || l.closed {
		return reconcile.Result{}, nil
	}
	sl, err := l.listen(name, want)
	if err != nil {
		reconcile.Event(ctx, l.o.Store, l.log, ds, api.EventWarning, "ListenFailed", err.Error())
		l.log.Warn("display listener", "displayservice", name, "err", err)
		return reconcile.Result{RequeueAfter: 10 * time.Second}, nil
	}
	l.open[name] = sl
	l.log.Info("display listeners open", "displayservice", name, "addrs", want)
	reconcile.Event(ctx, l.o.Store, l.log, ds, api.EventNormal, "Listening", fmt.Sprintf("gateway listening on %v", want))
	return reconcile.Result{}, nil
}

// listen opens every address of a service, or none.
func (l *Listeners) listen(name string, addrs []string) (*serviceListener, error) {
	base, cancel := context.WithCancel(context.Background())
	sl := &serviceListener{addrs: addrs, cancel: cancel}
	for _, a := range addrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			sl.close()
			return nil, fmt.Errorf("listen on %s: %w", a, err)
		}
		hs := &http.Server{
			Handler:           l.o.Handler(name),
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       60 * time.Second,
			MaxHeaderBytes:    64 << 10,
			BaseContext:       func(net.Listener) context.Context { return base },
		}
		sl.servers = append(sl.servers, hs)
		go func() {
			if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				l.log.Warn("display listener stopped", "displayservice", name, "addr", a, "err", err)
			}
		}()
	}
	return sl, nil
}

// close stops the listeners and ends the sessions they carry (hijacked
// WebSocket connections outlive http.Server.Close otherwise).
func (sl *serviceListener) close() {
	sl.cancel()
	for _, hs := range sl.servers {
		hs.Close()
	}
}

// Addrs returns the addresses the service name listens on now.
func (l *Listeners) Addrs(name string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if sl := l.open[name]; sl != nil {
		return slices.Clone(sl.addrs)
	}
	return nil
}

// Close closes every listener; nothing opens afterwards.
func (l *Listeners) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for name, sl := range l.open {
		sl.close()
		delete(l.open, name)
	}
}

// HostAddress is the address of this host that NodePort and LoadBalancer
// URLs name: the host of listen when it is a specific address, else the
// first global unicast address of an interface, else the host name.
func HostAddress(listen string) string {
	if host, _, err := net.SplitHostPort(listen); err == nil {
		if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() && !ip.IsLoopback() {
			return ip.String()
		}
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.IsGlobalUnicast() && n.IP.To4() != nil {
				return n.IP.String()
			}
		}
	}
	if hn, err := os.Hostname(); err == nil && hn != "" {
		return hn
	}
	return "127.0.0.1"
}

// LoopbackURL is the base URL by which this host reaches a server
// listening on addr: loopback unless it listens on one address only.
func LoopbackURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}
