package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/store"
)

// DisplayConfig is what the DisplayService controller knows of the server
// that serves the displays.
type DisplayConfig struct {
	// ServerURL is the server's own base URL as reached on this host
	// (http://127.0.0.1:8080): the gateway of a service without ports is
	// /display/{sandbox} on it. Empty: endpoint URLs are paths.
	ServerURL string
	// HostAddress is the host's address that NodePort and LoadBalancer
	// services listen on, as put in their URLs.
	HostAddress string
	// TokenSet reports whether the server requires an API token; services
	// on the host address are refused without one.
	TokenSet bool
}

// DisplayServices keeps each DisplayService's status: the displays of the
// running or paused sandboxes its selector matches, as gateway URLs, and
// whether it can be served as specified (condition Ready). The listeners
// themselves are the node's (internal/gateway); this controller only reads
// and writes objects.
type DisplayServices struct {
	st        store.Interface
	log       *slog.Logger
	now       func() time.Time
	cfg       DisplayConfig
	sandboxes *reconcile.Cache
	services  *reconcile.Cache
}

// NewDisplayServices registers the DisplayService controller with m.
func NewDisplayServices(m *reconcile.Manager, st store.Interface, log *slog.Logger, now func() time.Time, cfg DisplayConfig) *DisplayServices {
	if now == nil {
		now = time.Now
	}
	d := &DisplayServices{st: st, log: log, now: now, cfg: cfg, sandboxes: m.Cache(api.KindSandbox), services: m.Cache(api.KindDisplayService)}
	m.Register(reconcile.Controller{Name: "displayservice", For: api.KindDisplayService, Reconciler: d,
		Watches: []reconcile.Watch{{Kind: api.KindSandbox, Map: d.servicesFor}}})
	return d
}

// servicesFor maps a sandbox to the services that select it.
func (d *DisplayServices) servicesFor(o api.Object) []string {
	var keys []string
	labels := o.GetMeta().Labels
	d.services.Range(func(so api.Object) bool {
		if so.(*api.DisplayService).Spec.Selects(labels) {
			keys = append(keys, so.GetMeta().Name)
		}
		return true
	})
	return keys
}

// Reconcile implements Reconciler.
func (d *DisplayServices) Reconcile(ctx context.Context, name string) (reconcile.Result, error) {
	o, err := d.st.Get(ctx, api.KindDisplayService, name)
	if errors.Is(err, api.ErrNotFound) {
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	ds := o.(*api.DisplayService)
	if ds.Metadata.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	reason, msg := ds.Spec.GatewayProblem(d.cfg.TokenSet)
	var endpoints []api.Endpoint
	if reason == "" {
		for _, so := range d.sandboxes.List(api.Selector{}) {
			sb := so.(*api.Sandbox)
			if !ds.Spec.Selects(sb.Metadata.Labels) || sb.Metadata.DeletionTimestamp != nil {
				continue
			}
			if sb.Status.Phase != api.SandboxRunning && sb.Status.Phase != api.SandboxPaused {
				continue // no process, no display
			}
			for _, u := range d.urls(&ds.Spec, sb.Metadata.Name) {
				endpoints = append(endpoints, api.Endpoint{Sandbox: sb.Metadata.Name, URL: u})
			}
		}
		if len(endpoints) == 0 {
			reason, msg = "NoSandboxes", "no running or paused sandbox matches the selector"
			if len(ds.Spec.Selector) == 0 {
				msg = "spec.selector is empty: it selects no sandbox"
			}
		}
	}
	now := d.now()
	_, err = reconcile.UpdateStatus(ctx, d.st, api.KindDisplayService, name, func(cur *api.DisplayService) bool {
		before := api.DeepCopy(cur).Status
		st := &cur.Status
		gen := cur.Metadata.Generation
		st.ObservedGeneration = gen
		st.Endpoints = endpoints
		c := api.Condition{Type: "Ready", Status: api.ConditionTrue, Reason: "EndpointsReady",
			Message: fmt.Sprintf("%d display endpoints", len(endpoints)), ObservedGeneration: gen}
		if reason != "" {
			c.Status, c.Reason, c.Message = api.ConditionFalse, reason, msg
		}
		api.SetCondition(&st.Conditions, c, now)
		return !reflect.DeepEqual(before, *st)
	})
	if errors.Is(err, api.ErrNotFound) {
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, err
}

// urls are the gateway URLs of sandbox in a service: one per port, on
// loopback (ClusterIP) or the host address (NodePort, LoadBalancer), or
// the server's own when the service names no port.
func (d *DisplayServices) urls(s *api.DisplayServiceSpec, sandbox string) []string {
	path := "/display/" + sandbox
	if len(s.Ports) == 0 {
		return []string{wsURL(d.cfg.ServerURL) + path}
	}
	host := "127.0.0.1"
	if s.HostWide() {
		host = d.cfg.HostAddress
	}
	var out []string
	for _, p := range s.Ports {
		out = append(out, "ws://"+net.JoinHostPort(host, strconv.Itoa(p.Port))+path)
	}
	return out
}

// wsURL turns an http(s) base URL into its ws(s) form.
func wsURL(base string) string {
	base = strings.TrimSuffix(base, "/")
	if rest, ok := strings.CutPrefix(base, "http"); ok {
		return "ws" + rest
	}
	return base
}
