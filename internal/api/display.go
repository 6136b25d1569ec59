package api

import "fmt"

// What a DisplayService means, shared by its controller (status) and the
// server and node (who serve it): pure rules, no I/O.

// Selects reports whether the service selects a sandbox carrying labels.
// An empty selector selects nothing, so that a service never exposes
// every display by accident.
func (s *DisplayServiceSpec) Selects(labels map[string]string) bool {
	return len(s.Selector) > 0 && MatchLabels(s.Selector, labels)
}

// HostWide reports whether the service listens on the host's address
// (NodePort, LoadBalancer) rather than on loopback (ClusterIP).
func (s *DisplayServiceSpec) HostWide() bool {
	return s.Type == "NodePort" || s.Type == "LoadBalancer"
}

// GatewayProblem says why the service's gateway cannot be served as
// specified: a stable reason and a message for people, or "" when it can.
// tokenSet reports whether the server requires an API token.
func (s *DisplayServiceSpec) GatewayProblem(tokenSet bool) (reason, message string) {
	switch {
	case !s.Gateway.Enabled:
		return "GatewayDisabled", "only the WebSocket gateway is served: set spec.gateway.enabled: true (raw VNC ports are not exposed)"
	case s.Gateway.Path != DefaultGatewayPath && s.Gateway.Path != "/display/{sandbox}":
		return "UnsupportedPath", fmt.Sprintf("spec.gateway.path %q: the gateway serves %s only", s.Gateway.Path, DefaultGatewayPath)
	}
	for i, p := range s.Ports {
		if p.Protocol != "vnc" {
			return "UnsupportedProtocol", fmt.Sprintf("spec.ports[%d].protocol %q: the gateway carries vnc only", i, p.Protocol)
		}
	}
	if s.HostWide() {
		switch {
		case len(s.Ports) == 0:
			return "NoPorts", fmt.Sprintf("type %s needs spec.ports[].port to listen on", s.Type)
		case !tokenSet:
			return "NoToken", fmt.Sprintf("type %s listens on the host address, which needs the server to run with a token (--token-file or HVKUBE_TOKEN)", s.Type)
		case s.Gateway.Auth != "jwt":
			return "TokenRequired", fmt.Sprintf("type %s listens on the host address, where a display token is required: set spec.gateway.auth: jwt (auth none is for ClusterIP, on loopback)", s.Type)
		}
	}
	return "", ""
}
