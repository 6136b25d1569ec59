package api

import (
	"fmt"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

var (
	dnsLabel   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	labelName  = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	labelValue = regexp.MustCompile(`^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$`)
	dnsPrefix  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)
	winAbs     = regexp.MustCompile(`^([A-Za-z]:[\\/]|\\\\[^\\/]+[\\/][^\\/]+)`)
	winDevice  = regexp.MustCompile(`^[\\/][\\/][.?][\\/]`)
)

// Size limits.
const (
	MaxNameLength   = 63
	MinScreenWidth  = 320
	MaxScreenWidth  = 7680
	MinScreenHeight = 200
	MaxScreenHeight = 4320
	MaxCPU          = 256
	MaxMemoryMB     = 4 << 20
	MaxRetries      = 100
)

// Bounds on the durations and counts an object carries. Each keeps its
// value far from where time.Duration arithmetic overflows (about 292
// years), and bounds what one object may ask of the hosts; 0 keeps its
// documented meaning (the default, or no limit).
const (
	// MaxAgentTimeoutMinutes bounds completion.timeoutMinutes (7 days):
	// the longest one attempt of an agent runs, and so the longest a
	// token minted for it stays valid.
	MaxAgentTimeoutMinutes = 7 * 24 * 60
	// MaxAgentTimeout is MaxAgentTimeoutMinutes as a duration.
	MaxAgentTimeout = MaxAgentTimeoutMinutes * time.Minute
	// MaxTaskTimeoutSeconds bounds task.timeoutSeconds (7 days).
	MaxTaskTimeoutSeconds = MaxAgentTimeoutMinutes * 60
	// MaxCheckpointMinutes bounds checkpoint.everyMinutes (a day), and
	// MaxCheckpointSteps the workflow of an agent with checkpoints (its
	// done steps' results are kept with the checkpoint).
	MaxCheckpointMinutes = 1440
	MaxCheckpointSteps   = 1000
	// MaxTTLSeconds bounds ttlSecondsAfterFinished (30 days).
	MaxTTLSeconds = 30 * 24 * 60 * 60
	// MaxArtifactPatterns bounds output.artifacts: each pattern is a
	// search in the guest.
	MaxArtifactPatterns = 100
	// MinHeartbeatSeconds and MaxHeartbeatSeconds bound
	// completion.heartbeatSeconds (10 s to a day).
	MinHeartbeatSeconds = 10
	MaxHeartbeatSeconds = 24 * 60 * 60
	// MaxLifetimeMinutes bounds a sandbox's lifecycle.timeoutMinutes and
	// idleTimeoutMinutes (365 days; 0 is no limit).
	MaxLifetimeMinutes = 365 * 24 * 60
	// MaxIdlePauseSeconds and MaxIdleSaveSeconds bound a sandbox's
	// lifecycle.idlePauseSeconds and idleSaveSeconds.
	MaxIdlePauseSeconds = 24 * 60 * 60
	MaxIdleSaveSeconds  = 7 * 24 * 60 * 60
	// MaxHealthIntervalSeconds bounds healthCheck.intervalSeconds (1 hour).
	MaxHealthIntervalSeconds = 3600
	// MaxPoolSize bounds a pool's replicas, minReady, maxPerHost,
	// scaling.scaleUpThreshold and scaling.maxReplicas.
	MaxPoolSize = 10000
	// MaxPoolAge bounds a pool's maxAge (365 days).
	MaxPoolAge = MaxLifetimeMinutes * time.Minute
	// MaxScaleDownDelaySeconds bounds scaling.scaleDownDelay (7 days).
	MaxScaleDownDelaySeconds = 7 * 24 * 60 * 60
	// MaxRefillRate bounds a pool's refillRate (sandboxes per second).
	MaxRefillRate = 1000
	// MaxServicePorts bounds a DisplayService's ports: each one is a
	// listener on the host.
	MaxServicePorts = 32
)

// Validate checks o and returns the first problem as a FieldError naming its
// path. Call Default first: Validate expects defaulted objects.
func Validate(o Object) error {
	if err := ValidateName("metadata.name", o.GetMeta().Name); err != nil {
		return err
	}
	if err := validateLabels("metadata.labels", o.GetMeta().Labels); err != nil {
		return err
	}
	if err := validateAnnotations("metadata.annotations", o.GetMeta().Annotations); err != nil {
		return err
	}
	switch o := o.(type) {
	case *Template:
		if err := validateNetwork("spec.network", o.Spec.Network); err != nil {
			return err
		}
		return validateTemplate(&o.Spec)
	case *Sandbox:
		return validateSandboxSpec("spec", &o.Spec)
	case *SandboxPool:
		return validatePool(&o.Spec)
	case *Agent:
		return validateAgent(&o.Spec)
	case *DisplayService:
		return validateDisplayService(&o.Spec)
	case *Node:
		return Invalid("kind", "a Node is written by the node that runs it: the API serves it read-only")
	case *Secret:
		return validateSecret(&o.Spec)
	}
	return Invalid("kind", "unknown kind %q", o.GetTypeMeta().Kind)
}

// ValidateName checks a DNS-label object name.
func ValidateName(field, name string) error {
	switch {
	case name == "":
		return Invalid(field, "required")
	case len(name) > MaxNameLength:
		return Invalid(field, "%q is %d characters long: at most %d", name, len(name), MaxNameLength)
	case !dnsLabel.MatchString(name):
		return Invalid(field, "%q is not a DNS label: lower-case letters, digits and '-', starting and ending with a letter or digit", name)
	}
	return nil
}

func validateLabels(field string, labels map[string]string) error {
	for _, k := range sortedStringKeys(labels) {
		if err := validateLabelKey(field, k); err != nil {
			return err
		}
		v := labels[k]
		if len(v) > MaxNameLength || !labelValue.MatchString(v) {
			return Invalid(field+"."+k, "invalid label value %q: at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit", v)
		}
	}
	return nil
}

func validateAnnotations(field string, ann map[string]string) error {
	total := 0
	for _, k := range sortedStringKeys(ann) {
		if err := validateLabelKey(field, k); err != nil {
			return err
		}
		total += len(k) + len(ann[k])
	}
	if total > 256<<10 {
		return Invalid(field, "annotations are %d bytes: at most 256 KiB", total)
	}
	return nil
}

func validateLabelKey(field, k string) error {
	prefix, name, hasPrefix := strings.Cut(k, "/")
	if !hasPrefix {
		name, prefix = prefix, ""
	}
	if hasPrefix && (prefix == "" || len(prefix) > 253 || !dnsPrefix.MatchString(prefix)) {
		return Invalid(field+"."+k, "invalid key prefix %q: want a DNS subdomain", prefix)
	}
	if name == "" || len(name) > MaxNameLength || !labelName.MatchString(name) {
		return Invalid(field+"."+k, "invalid key %q: at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit", k)
	}
	return nil
}

// ParseResolution parses "WIDTHxHEIGHT".
func ParseResolution(s string) (w, h int, err error) {
	ws, hs, ok := strings.Cut(strings.ToLower(s), "x")
	if ok {
		w, err = strconv.Atoi(ws)
		if err == nil {
			h, err = strconv.Atoi(hs)
		}
	}
	if !ok || err != nil {
		return 0, 0, fmt.Errorf("%q is not WIDTHxHEIGHT, e.g. 1280x800", s)
	}
	if w < MinScreenWidth || w > MaxScreenWidth || h < MinScreenHeight || h > MaxScreenHeight {
		return 0, 0, fmt.Errorf("%q is out of range: width %d..%d, height %d..%d", s, MinScreenWidth, MaxScreenWidth, MinScreenHeight, MaxScreenHeight)
	}
	return w, h, nil
}

func validateResolution(field, s string, required bool) error {
	if s == "" {
		if required {
			return Invalid(field, "required")
		}
		return nil
	}
	if _, _, err := ParseResolution(s); err != nil {
		return Invalid(field, "%v", err)
	}
	return nil
}

func validateResources(field string, r Resources) error {
	if r.CPU < 0 || r.CPU > MaxCPU {
		return Invalid(field+".cpu", "%d is out of range 0..%d", r.CPU, MaxCPU)
	}
	if r.MemoryMB < 0 || r.MemoryMB > MaxMemoryMB {
		return Invalid(field+".memoryMB", "%d is out of range 0..%d", r.MemoryMB, MaxMemoryMB)
	}
	if r.MemoryMB > 0 && r.MemoryMB < 64 {
		return Invalid(field+".memoryMB", "%d MB is too small: at least 64", r.MemoryMB)
	}
	return nil
}

// MaxHostPathLength bounds a host path, in bytes (Linux's PATH_MAX).
const MaxHostPathLength = 4096

// ValidateHostPath checks what is true of a host path on every host: it is
// absolute in some host's syntax, POSIX (/srv/x) or Windows (C:\x,
// \\server\share\x), valid UTF-8 without control characters, with no ".."
// segment, and at most MaxHostPathLength bytes. Windows device and verbatim
// paths (\\.\x, \\?\x) are refused: they skip the checks Windows makes on
// a path. Whether the path may be used is for the host that would use it:
// the server checks a path in its own syntax against its allowed roots, and
// a node checks every path it would use against its own.
func ValidateHostPath(field, p string) error {
	switch {
	case p == "":
		return Invalid(field, "required")
	case len(p) > MaxHostPathLength:
		return Invalid(field, "%d bytes long: at most %d", len(p), MaxHostPathLength)
	case !utf8.ValidString(p):
		return Invalid(field, "%q is not valid UTF-8", p)
	case strings.ContainsFunc(p, unicode.IsControl):
		return Invalid(field, "%q contains a control character", p)
	case winDevice.MatchString(p):
		return Invalid(field, "%q is a Windows device or verbatim path: name a drive (C:\\x) or a share (\\\\server\\share\\x)", p)
	case !strings.HasPrefix(p, "/") && !winAbs.MatchString(p):
		return Invalid(field, "%q is not an absolute path (/srv/x, C:\\x or \\\\server\\share\\x)", p)
	}
	for _, seg := range strings.FieldsFunc(p, func(r rune) bool { return r == '/' || r == '\\' }) {
		if seg == ".." {
			return Invalid(field, "%q contains '..'", p)
		}
	}
	return nil
}

// ValidateRelPath checks p, a file's path inside a directory the server
// keeps (an agent's attempt files): relative, slash-separated and clean
// (no "..", "." or empty segment), valid UTF-8 without control characters
// (NUL among them) or backslashes.
func ValidateRelPath(field, p string) error {
	switch {
	case p == "":
		return Invalid(field, "required")
	case !utf8.ValidString(p):
		return Invalid(field, "%q is not valid UTF-8", p)
	case strings.ContainsFunc(p, unicode.IsControl):
		return Invalid(field, "%q contains a control character", p)
	case strings.ContainsRune(p, '\\'):
		return Invalid(field, "%q contains a backslash: separate names with /", p)
	case path.IsAbs(p) || path.Clean(p) != p || p == "." || p == ".." || strings.HasPrefix(p, "../"):
		return Invalid(field, "%q is not a clean relative path (no leading /, no . or .. segment)", p)
	}
	return nil
}

func oneOf(field, v string, allowed ...string) error {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return Invalid(field, "unsupported value %q: want one of %s", v, strings.Join(allowed, ", "))
}

// inRange checks 0 <= v <= max; unit, when set, says what max is in
// words ("7 days").
func inRange(field string, v, max int, unit string) error {
	if v >= 0 && v <= max {
		return nil
	}
	if unit != "" {
		return Invalid(field, "%d is out of range 0..%d (%s)", v, max, unit)
	}
	return Invalid(field, "%d is out of range 0..%d", v, max)
}

func validatePort(field string, p int, allowZero bool) error {
	if (p == 0 && allowZero) || (p >= 1 && p <= 65535) {
		return nil
	}
	return Invalid(field, "%d is not a port number (1..65535)", p)
}

func validateTemplate(s *TemplateSpec) error {
	if src := s.Source; src != nil {
		if err := ValidateName("spec.source.sandbox", src.Sandbox); err != nil {
			return err
		}
		if err := ValidateName("spec.source.node", src.Node); err != nil {
			return err
		}
	}
	if s.QEMU == nil && s.HyperV == nil && s.VHDXPath == "" {
		return Invalid("spec.qemu", "a template needs an image: spec.qemu (image, or disk with kernel and initrd) or spec.hyperv.vhdxPath")
	}
	if q := s.QEMU; q != nil {
		if q.Image == "" && q.Disk == "" {
			return Invalid("spec.qemu.image", "required unless spec.qemu.disk is set")
		}
		if q.Image != "" {
			if q.Disk != "" || q.Kernel != "" || q.Initrd != "" {
				return Invalid("spec.qemu.image", "set either image or disk/kernel/initrd, not both")
			}
			if err := ValidateName("spec.qemu.image", q.Image); err != nil {
				return err
			}
		}
		for _, f := range []struct{ name, v string }{{"disk", q.Disk}, {"kernel", q.Kernel}, {"initrd", q.Initrd}} {
			if f.v == "" {
				continue
			}
			if err := ValidateHostPath("spec.qemu."+f.name, f.v); err != nil {
				return err
			}
		}
		if q.Initrd != "" && q.Kernel == "" {
			return Invalid("spec.qemu.kernel", "required when spec.qemu.initrd is set")
		}
	}
	if s.HyperV != nil {
		if err := ValidateHostPath("spec.hyperv.vhdxPath", s.HyperV.VHDXPath); err != nil {
			return err
		}
		if g := s.HyperV.Generation; g != 0 && g != 1 && g != 2 {
			return Invalid("spec.hyperv.generation", "%d: want 1 or 2", g)
		}
	}
	if s.VHDXPath != "" {
		if err := ValidateHostPath("spec.vhdxPath", s.VHDXPath); err != nil {
			return err
		}
	}
	if err := validateResources("spec.resources", s.Resources); err != nil {
		return err
	}
	if err := validateResolution("spec.display.resolution", s.Display.Resolution, true); err != nil {
		return err
	}
	if err := oneOf("spec.guest.os", s.Guest.OS, "linux", "windows"); err != nil {
		return err
	}
	for i, sw := range s.InstalledSoftware {
		if strings.TrimSpace(sw) == "" {
			return Invalid(fmt.Sprintf("spec.installedSoftware[%d]", i), "empty")
		}
	}
	return nil
}

func validateSandboxSpec(p string, s *SandboxSpec) error {
	if err := validateNetwork(p+".network", s.Network); err != nil {
		return err
	}
	if s.TemplateRef != "" {
		if err := ValidateName(p+".templateRef", s.TemplateRef); err != nil {
			return err
		}
	}
	if err := validateResources(p+".resources", s.Resources); err != nil {
		return err
	}
	d := s.Display
	if err := validateResolution(p+".display.resolution", d.Resolution, false); err != nil {
		return err
	}
	switch d.ColorDepth {
	case 0, 8, 16, 24, 32:
	default:
		return Invalid(p+".display.colorDepth", "%d: want 8, 16, 24 or 32", d.ColorDepth)
	}
	if err := oneOf(p+".display.protocol", d.Protocol, "vnc", "rdp", "enhanced-mode"); err != nil {
		return err
	}
	if err := validatePort(p+".display.port", d.Port, true); err != nil {
		return err
	}
	seen := map[string]bool{}
	for i, v := range s.Volumes {
		vp := fmt.Sprintf("%s.volumes[%d]", p, i)
		if err := ValidateName(vp+".name", v.Name); err != nil {
			return err
		}
		if seen[v.Name] {
			return Invalid(vp+".name", "duplicate volume name %q", v.Name)
		}
		seen[v.Name] = true
		if err := ValidateHostPath(vp+".hostPath", v.HostPath); err != nil {
			return err
		}
		if err := ValidateHostPath(vp+".sandboxPath", v.SandboxPath); err != nil {
			return err
		}
	}
	for i, c := range s.Startup {
		if strings.TrimSpace(c.Command) == "" {
			return Invalid(fmt.Sprintf("%s.startup[%d].command", p, i), "required")
		}
	}
	h := s.HealthCheck
	if err := oneOf(p+".healthCheck.type", h.Type, "guest", "process", "tcp"); err != nil {
		return err
	}
	if h.Type == "process" && h.ProcessName == "" {
		return Invalid(p+".healthCheck.processName", "required when type is process")
	}
	if h.Type == "tcp" {
		if err := validatePort(p+".healthCheck.port", h.Port, false); err != nil {
			return err
		}
	}
	if h.IntervalSeconds < 1 || h.IntervalSeconds > MaxHealthIntervalSeconds {
		return Invalid(p+".healthCheck.intervalSeconds", "%d is out of range 1..%d", h.IntervalSeconds, MaxHealthIntervalSeconds)
	}
	l := s.Lifecycle
	if err := inRange(p+".lifecycle.timeoutMinutes", l.TimeoutMinutes, MaxLifetimeMinutes, "365 days"); err != nil {
		return err
	}
	if err := inRange(p+".lifecycle.idleTimeoutMinutes", l.IdleTimeoutMinutes, MaxLifetimeMinutes, "365 days"); err != nil {
		return err
	}
	if err := inRange(p+".lifecycle.idlePauseSeconds", l.IdlePauseSeconds, MaxIdlePauseSeconds, "a day"); err != nil {
		return err
	}
	if err := inRange(p+".lifecycle.idleSaveSeconds", l.IdleSaveSeconds, MaxIdleSaveSeconds, "a week"); err != nil {
		return err
	}
	return validateEnv(p, s.Env, s.EnvFrom)
}

// Bounds on a session's variables and on Secrets.
const (
	MaxEnvVars        = 100
	MaxEnvFrom        = 10
	MaxEnvNameLength  = 128
	MaxEnvValueBytes  = 32 << 10
	MaxSecretKeys     = 100
	MaxSecretValue    = 64 << 10
	MaxSecretBytes    = 256 << 10
	maxEnvPrefixBytes = 64
)

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidateEnvName checks the name of a session variable (or of a Secret's
// key, which envFrom makes one).
func ValidateEnvName(field, name string) error {
	switch {
	case name == "":
		return Invalid(field, "required")
	case len(name) > MaxEnvNameLength:
		return Invalid(field, "%.40q… is %d characters long: at most %d", name, len(name), MaxEnvNameLength)
	case !envName.MatchString(name):
		return Invalid(field, "%q is not a variable name: letters, digits and '_', not starting with a digit", name)
	}
	return nil
}

func validateEnv(p string, env []EnvVar, from []EnvFromSource) error {
	if len(env) > MaxEnvVars {
		return Invalid(p+".env", "%d variables: at most %d", len(env), MaxEnvVars)
	}
	seen := map[string]bool{}
	for i, e := range env {
		ep := fmt.Sprintf("%s.env[%d]", p, i)
		if err := ValidateEnvName(ep+".name", e.Name); err != nil {
			return err
		}
		if seen[e.Name] {
			return Invalid(ep+".name", "%q is set twice", e.Name)
		}
		seen[e.Name] = true
		if strings.HasPrefix(e.Name, "HVKUBE_") {
			return Invalid(ep+".name", "%q: HVKUBE_ names are hvkube's own (the agent, its sandbox and token)", e.Name)
		}
		if len(e.Value) > MaxEnvValueBytes {
			return Invalid(ep+".value", "%d bytes: at most %d", len(e.Value), MaxEnvValueBytes)
		}
		if strings.IndexByte(e.Value, 0) >= 0 {
			return Invalid(ep+".value", "holds a NUL byte, which no environment can carry")
		}
		if e.ValueFrom == nil {
			continue
		}
		if e.Value != "" {
			return Invalid(ep+".valueFrom", "set either value or valueFrom, not both")
		}
		ref := e.ValueFrom.SecretKeyRef
		if ref == nil {
			return Invalid(ep+".valueFrom.secretKeyRef", "required: the Secret and key the value comes from")
		}
		if err := ValidateName(ep+".valueFrom.secretKeyRef.name", ref.Name); err != nil {
			return err
		}
		if err := ValidateEnvName(ep+".valueFrom.secretKeyRef.key", ref.Key); err != nil {
			return err
		}
	}
	if len(from) > MaxEnvFrom {
		return Invalid(p+".envFrom", "%d sources: at most %d", len(from), MaxEnvFrom)
	}
	for i, f := range from {
		fp := fmt.Sprintf("%s.envFrom[%d]", p, i)
		if f.SecretRef == nil {
			return Invalid(fp+".secretRef", "required: the Secret whose keys become variables")
		}
		if err := ValidateName(fp+".secretRef.name", f.SecretRef.Name); err != nil {
			return err
		}
		if f.Prefix != "" {
			if len(f.Prefix) > maxEnvPrefixBytes || !envName.MatchString(f.Prefix) {
				return Invalid(fp+".prefix", "%.70q is not the start of a variable name of at most %d characters", f.Prefix, maxEnvPrefixBytes)
			}
			if strings.HasPrefix(f.Prefix, "HVKUBE_") {
				return Invalid(fp+".prefix", "%q: HVKUBE_ names are hvkube's own", f.Prefix)
			}
		}
	}
	return nil
}

// validateSecret checks a Secret's values as written. None is an update
// that keeps the values stored (internal/secrets says whether there are).
func validateSecret(s *SecretSpec) error {
	total := 0
	check := func(field, k string, v []byte) error {
		if err := ValidateEnvName(field+"."+k, k); err != nil {
			return err
		}
		if len(v) > MaxSecretValue {
			return Invalid(field+"."+k, "%d bytes: at most %d", len(v), MaxSecretValue)
		}
		if bytesHasNUL(v) {
			return Invalid(field+"."+k, "holds a NUL byte, which no environment can carry")
		}
		total += len(v)
		return nil
	}
	for _, k := range sortedStringKeys(s.Data) {
		if err := check("spec.data", k, s.Data[k]); err != nil {
			return err
		}
	}
	for _, k := range sortedStringKeys(s.StringData) {
		if err := check("spec.stringData", k, []byte(s.StringData[k])); err != nil {
			return err
		}
	}
	keys := map[string]bool{}
	for k := range s.Data {
		keys[k] = true
	}
	for k := range s.StringData {
		keys[k] = true
	}
	if len(keys) > MaxSecretKeys {
		return Invalid("spec.data", "%d keys: at most %d", len(keys), MaxSecretKeys)
	}
	if total > MaxSecretBytes {
		return Invalid("spec.data", "%d bytes in all: at most %d", total, MaxSecretBytes)
	}
	return nil
}

func bytesHasNUL(b []byte) bool {
	for _, c := range b {
		if c == 0 {
			return true
		}
	}
	return false
}

func validatePool(s *SandboxPoolSpec) error {
	if err := inRange("spec.replicas", s.Replicas, MaxPoolSize, ""); err != nil {
		return err
	}
	if err := inRange("spec.minReady", s.MinReady, MaxPoolSize, ""); err != nil {
		return err
	}
	if s.MinReady > s.Replicas {
		return Invalid("spec.minReady", "%d is greater than spec.replicas (%d)", s.MinReady, s.Replicas)
	}
	if err := inRange("spec.maxPerHost", s.MaxPerHost, MaxPoolSize, ""); err != nil {
		return err
	}
	if err := validateLabels("spec.template.metadata.labels", s.Template.Metadata.Labels); err != nil {
		return err
	}
	if err := validateAnnotations("spec.template.metadata.annotations", s.Template.Metadata.Annotations); err != nil {
		return err
	}
	if err := validateSandboxSpec("spec.template.spec", &s.Template.Spec); err != nil {
		return err
	}
	sc := s.Scaling
	if err := oneOf("spec.scaling.type", sc.Type, "queue-based", "none"); err != nil {
		return err
	}
	if err := oneOf("spec.scaling.metric", sc.Metric, "pending-agents"); err != nil {
		return err
	}
	if err := inRange("spec.scaling.scaleUpThreshold", sc.ScaleUpThreshold, MaxPoolSize, ""); err != nil {
		return err
	}
	if err := inRange("spec.scaling.scaleDownDelay", sc.ScaleDownDelay, MaxScaleDownDelaySeconds, "7 days"); err != nil {
		return err
	}
	if err := inRange("spec.scaling.maxReplicas", sc.MaxReplicas, MaxPoolSize, ""); err != nil {
		return err
	}
	if sc.MaxReplicas != 0 && sc.MaxReplicas < s.Replicas {
		return Invalid("spec.scaling.maxReplicas", "%d is less than spec.replicas (%d)", sc.MaxReplicas, s.Replicas)
	}
	if err := oneOf("spec.warmTier", s.WarmTier, "paused", "saved"); err != nil {
		return err
	}
	if s.MaxAge != "" {
		d, err := time.ParseDuration(s.MaxAge)
		if err != nil || d < 0 {
			return Invalid("spec.maxAge", "%q is not a duration such as 30m or 2h", s.MaxAge)
		}
		if d > MaxPoolAge {
			return Invalid("spec.maxAge", "%q is longer than %s (365 days)", s.MaxAge, MaxPoolAge)
		}
	}
	if err := inRange("spec.refillRate", s.RefillRate, MaxRefillRate, "sandboxes per second"); err != nil {
		return err
	}
	return oneOf("spec.releasePolicy", s.ReleasePolicy, "reset", "save", "destroy")
}

func validateAgent(s *AgentSpec) error {
	switch {
	case s.SandboxSelector == nil && s.SandboxName == "":
		return Invalid("spec.sandboxSelector", "required: set sandboxSelector (matchLabels or pool) or sandboxName")
	case s.SandboxSelector != nil && s.SandboxName != "":
		return Invalid("spec.sandboxName", "set either sandboxName or sandboxSelector, not both")
	case s.SandboxName != "":
		if err := ValidateName("spec.sandboxName", s.SandboxName); err != nil {
			return err
		}
	default:
		sel := s.SandboxSelector
		if sel.Pool != "" {
			if err := ValidateName("spec.sandboxSelector.pool", sel.Pool); err != nil {
				return err
			}
		}
		if len(sel.MatchLabels) == 0 {
			return Invalid("spec.sandboxSelector.matchLabels", "required: at least one label")
		}
		if err := validateLabels("spec.sandboxSelector.matchLabels", sel.MatchLabels); err != nil {
			return err
		}
	}
	switch s.Type {
	case "mcp-agent", "workflow", "custom", "playwright", "selenium":
	default:
		return Invalid("spec.type", "unsupported value %q: want one of mcp-agent, workflow, custom, playwright, selenium", s.Type)
	}
	if s.Type == "workflow" && len(s.Task.Steps) == 0 {
		return Invalid("spec.task.steps", "a workflow agent needs at least one step")
	}
	for i, st := range s.Task.Steps {
		if err := ValidateAction(fmt.Sprintf("spec.task.steps[%d]", i), st, 0, 0, true); err != nil {
			return err
		}
	}
	if CommandAgent(s.Type) {
		if len(s.Task.Command) == 0 || strings.TrimSpace(s.Task.Command[0]) == "" {
			return Invalid("spec.task.command", "required for a %s agent: the program and its arguments, as a list", s.Type)
		}
		if err := oneOf("spec.task.in", s.Task.In, "", "host", "guest"); err != nil {
			return err
		}
	}
	if err := validateArgv("spec.task.command", s.Task.Command); err != nil {
		return err
	}
	if t := s.TTLSecondsAfterFinished; t != nil {
		if err := inRange("spec.ttlSecondsAfterFinished", *t, MaxTTLSeconds, "30 days"); err != nil {
			return err
		}
	}
	if err := inRange("spec.task.timeoutSeconds", s.Task.TimeoutSeconds, MaxTaskTimeoutSeconds, "7 days"); err != nil {
		return err
	}
	if c := s.Checkpoint; c != nil {
		if c.EveryMinutes < 1 || c.EveryMinutes > MaxCheckpointMinutes {
			return Invalid("spec.checkpoint.everyMinutes", "%d is out of range 1..%d (a day)", c.EveryMinutes, MaxCheckpointMinutes)
		}
		if s.Type == "mcp-agent" {
			return Invalid("spec.checkpoint", "an mcp-agent's attempt is its client's, which hvkube cannot take up again: checkpoints are for workflow, custom, playwright and selenium agents")
		}
		if len(s.Task.Steps) > MaxCheckpointSteps {
			return Invalid("spec.checkpoint", "a workflow of %d steps: checkpoints keep the results of at most %d", len(s.Task.Steps), MaxCheckpointSteps)
		}
	}
	if m := s.MCP; m != nil && m.Endpoint != "" {
		if !strings.HasPrefix(m.Endpoint, "http://") && !strings.HasPrefix(m.Endpoint, "https://") {
			return Invalid("spec.mcp.endpoint", "%q is not an http(s) URL", m.Endpoint)
		}
	}
	c := s.Completion
	if err := oneOf("spec.completion.type", c.Type, "mcp-done", "exit"); err != nil {
		return err
	}
	if c.MaxRetries < 0 || c.MaxRetries > MaxRetries {
		return Invalid("spec.completion.maxRetries", "%d is out of range 0..%d", c.MaxRetries, MaxRetries)
	}
	if err := inRange("spec.completion.timeoutMinutes", c.TimeoutMinutes, MaxAgentTimeoutMinutes, "7 days"); err != nil {
		return err
	}
	if h := c.HeartbeatSeconds; h != 0 {
		if s.Type != "mcp-agent" {
			return Invalid("spec.completion.heartbeatSeconds", "only an mcp-agent's external agent sends heartbeats (type is %s)", s.Type)
		}
		if h < MinHeartbeatSeconds || h > MaxHeartbeatSeconds {
			return Invalid("spec.completion.heartbeatSeconds", "%d is out of range %d..%d (0: none)", h, MinHeartbeatSeconds, MaxHeartbeatSeconds)
		}
	}
	if n := len(s.Output.Artifacts); n > MaxArtifactPatterns {
		return Invalid("spec.output.artifacts", "%d patterns: at most %d", n, MaxArtifactPatterns)
	}
	for i, a := range s.Output.Artifacts {
		if strings.TrimSpace(a) == "" {
			return Invalid(fmt.Sprintf("spec.output.artifacts[%d]", i), "empty")
		}
	}
	return validateEnv("spec", s.Env, s.EnvFrom)
}

func validateDisplayService(s *DisplayServiceSpec) error {
	if err := validateLabels("spec.selector", s.Selector); err != nil {
		return err
	}
	if err := oneOf("spec.type", s.Type, "ClusterIP", "NodePort", "LoadBalancer"); err != nil {
		return err
	}
	if n := len(s.Ports); n > MaxServicePorts {
		return Invalid("spec.ports", "%d ports: at most %d", n, MaxServicePorts)
	}
	for i, p := range s.Ports {
		pp := fmt.Sprintf("spec.ports[%d]", i)
		if err := oneOf(pp+".protocol", p.Protocol, "vnc", "rdp"); err != nil {
			return err
		}
		if err := validatePort(pp+".port", p.Port, true); err != nil {
			return err
		}
		if p.TargetPort.IsString {
			if p.TargetPort.StrVal != "auto" {
				return Invalid(pp+".targetPort", "%q: want a port number or auto", p.TargetPort.StrVal)
			}
		} else if err := validatePort(pp+".targetPort", p.TargetPort.IntVal, false); err != nil {
			return err
		}
	}
	g := s.Gateway
	if g.Enabled {
		if !strings.HasPrefix(g.Path, "/") {
			return Invalid("spec.gateway.path", "%q must start with /", g.Path)
		}
		if err := oneOf("spec.gateway.auth", g.Auth, "jwt", "none"); err != nil {
			return err
		}
	}
	return nil
}

func sortedStringKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// HostPath is a field of an object that names a file or folder on the host.
type HostPath struct {
	Field string
	Path  string
}

// HostPaths lists the host paths o names: template image files and volume
// host folders. The server allows those in its own syntax only under its
// allowed roots; the node that would use one checks it against its own.
func HostPaths(o Object) []HostPath {
	var out []HostPath
	add := func(field, p string) {
		if p != "" {
			out = append(out, HostPath{field, p})
		}
	}
	volumes := func(prefix string, vs []Volume) {
		for i, v := range vs {
			add(fmt.Sprintf("%s.volumes[%d].hostPath", prefix, i), v.HostPath)
		}
	}
	switch o := o.(type) {
	case *Template:
		if q := o.Spec.QEMU; q != nil {
			add("spec.qemu.disk", q.Disk)
			add("spec.qemu.kernel", q.Kernel)
			add("spec.qemu.initrd", q.Initrd)
		}
		if h := o.Spec.HyperV; h != nil {
			add("spec.hyperv.vhdxPath", h.VHDXPath)
		}
		add("spec.vhdxPath", o.Spec.VHDXPath)
	case *Sandbox:
		volumes("spec", o.Spec.Volumes)
	case *SandboxPool:
		volumes("spec.template.spec", o.Spec.Template.Spec.Volumes)
	}
	return out
}

// validateArgv checks a program and its arguments given as a list.
func validateArgv(field string, argv []string) error {
	for i, a := range argv {
		if strings.ContainsRune(a, 0) {
			return Invalid(fmt.Sprintf("%s[%d]", field, i), "contains a NUL byte")
		}
	}
	return nil
}
