package node

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/hvkube/hvkube/internal/agentstate"
	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
)

// Playwright and Selenium agents run a command, as custom agents do (on
// the host, or in the guest with spec.task.in: guest), that drives the
// browser already open in the sandbox: Playwright (or Puppeteer) over
// Chromium's DevTools protocol (CDP), Selenium through the WebDriver
// server in the guest (chromedriver), which attaches to that browser.
// Beside the custom agent's environment the command gets:
//
//   - HVKUBE_CDP_URL: the DevTools endpoint, for chromium.connectOverCDP;
//   - HVKUBE_WEBDRIVER_URL: the WebDriver endpoint, for a remote driver;
//   - HVKUBE_DEBUGGER_ADDRESS: the address chromedriver attaches to the
//     running browser by (goog:chromeOptions debuggerAddress), which is
//     the guest's, wherever the command runs.
//
// On the host the URLs are the API's port forwards of the sandbox
// (SERVER/api/v1/sandboxes/NAME/ports/PORT), reached with the attempt's
// token (HVKUBE_TOKEN, sent as Authorization: Bearer); in the guest they
// are the guest's own (http://127.0.0.1:PORT) and need no token.
//
// The ports are the image's, as the sandbox's status.automation gives
// them (from its template's snapshot; the browser-desktop image declares
// them in image.json). A sandbox without the endpoint its agent needs
// fails the agent for good with ReasonNoAutomationEndpoint: a retry on a
// sandbox of the same template would meet the same guest.

// ReasonNoAutomationEndpoint is the reason of a playwright or selenium
// agent whose sandbox offers no endpoint (or no way to it) for its client.
const ReasonNoAutomationEndpoint = "NoAutomationEndpoint"

// automation is the browser endpoints of a guest: ports in the guest, 0
// for none.
type automation api.Automation

// need is the endpoint an agent of type typ drives, by name and port.
func (au automation) need(typ string) (string, int) {
	if typ == "selenium" {
		return "a WebDriver endpoint (chromedriver)", au.WebDriver
	}
	return "a Chrome DevTools (CDP) endpoint", au.CDP
}

// errNoEndpoint says why an agent cannot reach its client's endpoint on
// its sandbox; a retry would meet it again.
type errNoEndpoint struct{ msg string }

func (e *errNoEndpoint) Error() string { return e.msg }

// runAutomation runs a playwright or selenium agent's command with the
// endpoints of its sandbox's browser in its environment.
func (n *Node) runAutomation(ctx context.Context, a *api.Agent, lg *runLog) (*api.AgentResult, error) {
	host := a.Spec.Task.In != "guest"
	if host && n.opt.HostCommands == nil {
		return nil, n.refuseHostCommand(ctx, a, lg)
	}
	env, err := n.automationEnv(ctx, a, host)
	var ne *errNoEndpoint
	if errors.As(err, &ne) {
		return nil, n.failFinally(ctx, a, lg, ReasonNoAutomationEndpoint, ne.msg)
	}
	if err != nil {
		return nil, err
	}
	for _, kv := range env {
		lg.printf("%s", kv)
	}
	return n.runCommand(ctx, a, env, lg)
}

// automationEnv is what an automation agent's command learns of its
// sandbox's browser, for a command on the host (host) or in the guest.
// An *errNoEndpoint says the sandbox has no such endpoint, or no way to it.
func (n *Node) automationEnv(ctx context.Context, a *api.Agent, host bool) ([]string, error) {
	sandbox := a.Status.Sandbox
	sb, err := n.sandboxFor(ctx, sandbox)
	if err != nil {
		return nil, err
	}
	var au automation
	if sb.Status.Automation != nil {
		au = automation(*sb.Status.Automation)
	}
	what, port := au.need(a.Spec.Type)
	if port == 0 {
		return nil, &errNoEndpoint{fmt.Sprintf("sandbox %s (template %s) has no %s for a %s agent: its image declares none (status.automation); use a template of an image with a browser for automation clients, such as browser-desktop",
			sandbox, sb.Status.Template, what, a.Spec.Type)}
	}
	var base string
	if host {
		if _, ok := n.be.(backend.PortDialer); !ok {
			return nil, &errNoEndpoint{fmt.Sprintf("this node's backend cannot reach guest ports, so a %s agent's command on the host cannot reach sandbox %s's browser: run it in the sandbox (spec.task.in: guest)", a.Spec.Type, sandbox)}
		}
		if nw := sb.Status.Network; nw != nil && nw.Mode == api.NetworkNone {
			return nil, &errNoEndpoint{fmt.Sprintf("sandbox %s has no network (status.network.mode none), so a %s agent's command on the host cannot reach its browser: give the sandbox a network (spec.network.mode nat; a template built without one needs a rebuild), or run the command in the sandbox (spec.task.in: guest)", sandbox, a.Spec.Type)}
		}
		if n.opt.ServerURL == "" {
			return nil, fmt.Errorf("node %s knows no address of the API to give a %s agent: %w", n.name, a.Spec.Type, api.ErrUnsupported)
		}
		base = strings.TrimSuffix(n.opt.ServerURL, "/") + "/api/v1/sandboxes/" + sandbox + "/ports/"
	} else {
		base = "http://127.0.0.1:"
	}
	var env []string
	if au.CDP != 0 {
		env = append(env, "HVKUBE_CDP_URL="+base+strconv.Itoa(au.CDP),
			"HVKUBE_DEBUGGER_ADDRESS=localhost:"+strconv.Itoa(au.CDP))
	}
	if au.WebDriver != 0 {
		env = append(env, "HVKUBE_WEBDRIVER_URL="+base+strconv.Itoa(au.WebDriver))
	}
	return env, nil
}

// failFinally fails the running attempt of a and the agent with it,
// whatever retries it has left, for reason: what the node refuses would
// be refused to every retry. The returned error tells attempt that the
// outcome is written.
func (n *Node) failFinally(ctx context.Context, a *api.Agent, lg *runLog, reason, msg string) error {
	lg.printf("%s", msg)
	attempt, now, wrote := a.Status.Attempts, n.now(), false
	out, err := n.updateAgent(ctx, a.Metadata.Name, func(cur *api.Agent) bool {
		if cur.Status.Phase != api.AgentRunning || cur.Status.Attempts != attempt {
			return false
		}
		cur.Status.Result = &api.AgentResult{}
		agentstate.FailFinally(cur, reason, msg, now)
		wrote = true
		return true
	})
	if err != nil {
		// Not written: the attempt fails the ordinary way.
		return fmt.Errorf("%s (%w)", msg, api.ErrUnsupported)
	}
	if wrote {
		n.event(ctx, out, api.EventWarning, reason, msg)
	}
	return fmt.Errorf("%w: %s", errEndedElsewhere, msg)
}
