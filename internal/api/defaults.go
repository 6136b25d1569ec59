package api

// Defaults the server applies to objects it stores.
const (
	DefaultResolution      = "1280x800"
	DefaultColorDepth      = 24
	DefaultProtocol        = "vnc"
	DefaultHealthType      = "guest"
	DefaultHealthInterval  = 10
	DefaultTemplateCPU     = 1
	DefaultTemplateMemory  = 512
	DefaultGuestOS         = "linux"
	DefaultGuestUser       = "agent"
	DefaultWarmTier        = "paused"
	DefaultReleasePolicy   = "reset"
	DefaultScalingType     = "queue-based"
	DefaultScalingMetric   = "pending-agents"
	DefaultScaleDownDelay  = 300
	DefaultAgentType       = "mcp-agent"
	DefaultAgentTimeout    = 30
	DefaultServiceType     = "ClusterIP"
	DefaultGatewayPath     = "/display/{sandbox-id}"
	DefaultGatewayAuth     = "jwt"
	DefaultServiceProtocol = "vnc"
)

// Default fills in the unset fields of o that have a documented default. It
// is idempotent.
func Default(o Object) {
	switch o := o.(type) {
	case *Template:
		defaultTemplate(&o.Spec)
	case *Sandbox:
		defaultSandboxSpec(&o.Spec)
	case *SandboxPool:
		defaultPool(o)
	case *Agent:
		defaultAgent(&o.Spec)
	case *DisplayService:
		defaultDisplayService(&o.Spec)
	}
}

func defaultTemplate(s *TemplateSpec) {
	if s.Display.Resolution == "" {
		s.Display.Resolution = DefaultResolution
	}
	if s.Resources.CPU == 0 {
		s.Resources.CPU = DefaultTemplateCPU
	}
	if s.Resources.MemoryMB == 0 {
		s.Resources.MemoryMB = DefaultTemplateMemory
	}
	if s.HyperV == nil && s.VHDXPath != "" {
		s.HyperV = &HyperVImage{VHDXPath: s.VHDXPath}
	}
	if s.Guest.OS == "" {
		if s.HyperV != nil || s.VHDXPath != "" {
			s.Guest.OS = "windows"
		} else {
			s.Guest.OS = DefaultGuestOS
		}
	}
	if s.Guest.User == "" {
		s.Guest.User = DefaultGuestUser
	}
}

// defaultSandboxSpec leaves resources and resolution empty: empty means "as
// the template says", resolved when the sandbox is created.
func defaultSandboxSpec(s *SandboxSpec) {
	if s.Display.Protocol == "" {
		s.Display.Protocol = DefaultProtocol
	}
	if s.Display.ColorDepth == 0 {
		s.Display.ColorDepth = DefaultColorDepth
	}
	if s.HealthCheck.Type == "" {
		s.HealthCheck.Type = DefaultHealthType
	}
	if s.HealthCheck.IntervalSeconds == 0 {
		s.HealthCheck.IntervalSeconds = DefaultHealthInterval
	}
}

func defaultPool(p *SandboxPool) {
	s := &p.Spec
	defaultSandboxSpec(&s.Template.Spec)
	if s.WarmTier == "" {
		s.WarmTier = DefaultWarmTier
	}
	if s.ReleasePolicy == "" {
		s.ReleasePolicy = DefaultReleasePolicy
	}
	if s.Scaling.Type == "" {
		s.Scaling.Type = DefaultScalingType
	}
	if s.Scaling.Metric == "" {
		s.Scaling.Metric = DefaultScalingMetric
	}
	if s.Scaling.ScaleDownDelay == 0 {
		s.Scaling.ScaleDownDelay = DefaultScaleDownDelay
	}
	// A pool's sandboxes carry pool=NAME so that agents can select them by
	// pool, as seed 000's short form does.
	if s.Template.Metadata.Labels == nil {
		s.Template.Metadata.Labels = map[string]string{}
	}
	if _, ok := s.Template.Metadata.Labels["pool"]; !ok && p.Metadata.Name != "" {
		s.Template.Metadata.Labels["pool"] = p.Metadata.Name
	}
}

// CommandAgent reports whether agents of type typ run spec.task.command
// (on the host or in the guest) and end with its exit code: custom, and
// the automation types playwright and selenium, whose command is also
// given the sandbox's browser endpoints.
func CommandAgent(typ string) bool {
	return typ == "custom" || typ == "playwright" || typ == "selenium"
}

func defaultAgent(s *AgentSpec) {
	if s.SandboxSelector != nil && s.SandboxSelector.Pool != "" {
		if s.SandboxSelector.MatchLabels == nil {
			s.SandboxSelector.MatchLabels = map[string]string{}
		}
		if _, ok := s.SandboxSelector.MatchLabels["pool"]; !ok {
			s.SandboxSelector.MatchLabels["pool"] = s.SandboxSelector.Pool
		}
	}
	if s.Type == "" {
		switch {
		case len(s.Task.Steps) > 0:
			s.Type = "workflow"
		case len(s.Task.Command) > 0:
			s.Type = "custom"
		default:
			s.Type = DefaultAgentType
		}
	}
	if CommandAgent(s.Type) && s.Task.In == "" {
		s.Task.In = "host"
	}
	if s.Completion.Type == "" {
		if s.Type == "mcp-agent" {
			s.Completion.Type = "mcp-done"
		} else {
			s.Completion.Type = "exit"
		}
	}
	if s.Completion.TimeoutMinutes == 0 {
		if s.Task.TimeoutSeconds > 0 {
			s.Completion.TimeoutMinutes = (s.Task.TimeoutSeconds + 59) / 60
		} else {
			s.Completion.TimeoutMinutes = DefaultAgentTimeout
		}
	}
}

func defaultDisplayService(s *DisplayServiceSpec) {
	if s.Type == "" {
		s.Type = DefaultServiceType
	}
	for i := range s.Ports {
		p := &s.Ports[i]
		if p.Protocol == "" {
			p.Protocol = DefaultServiceProtocol
		}
		if p.TargetPort.IsZero() {
			p.TargetPort = IntOrString{IsString: true, StrVal: "auto"}
		}
	}
	if s.Gateway.Enabled {
		if s.Gateway.Path == "" {
			s.Gateway.Path = DefaultGatewayPath
		}
		if s.Gateway.Auth == "" {
			s.Gateway.Auth = DefaultGatewayAuth
		}
	}
}
