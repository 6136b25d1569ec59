// Package api holds hvkube's resource types, their defaults, validation and
// decoding, and the error categories shared by the store, server and CLI. It
// does no I/O.
//
// The CRDs in deploy/crds are generated from these types and their
// markers by controller-tools' CRD generator (make crds).
//
// +groupName=hvkube.io
// +versionName=v1
// +kubebuilder:validation:Optional
package api

import (
	"encoding/json"
	"time"
)

// Group versions. Version is what hvkube writes; LegacyVersion is accepted on
// input so that the original HCS-Kube YAML applies unchanged.
const (
	Version       = "hvkube/v1"
	LegacyVersion = "hcskube/v1"
	// KubeVersion is the group version of the CustomResourceDefinitions
	// on Kubernetes; manifests may name it in either mode.
	KubeVersion = "hvkube.io/v1"
)

// Kinds.
const (
	KindTemplate       = "Template"
	KindSandbox        = "Sandbox"
	KindSandboxPool    = "SandboxPool"
	KindAgent          = "Agent"
	KindDisplayService = "DisplayService"
	KindNode           = "Node"
	KindEvent          = "Event"
)

// TypeMeta names an object's schema.
type TypeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// ObjectMeta is the metadata every stored object carries. The server owns
// uid, resourceVersion, generation and the timestamps; values sent by clients
// for them are ignored (resourceVersion excepted: when set on an update it is
// a precondition).
type ObjectMeta struct {
	Name              string            `json:"name"`
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
	UID               string            `json:"uid,omitempty"`
	ResourceVersion   string            `json:"resourceVersion,omitempty"`
	Generation        int64             `json:"generation,omitempty"`
	CreationTimestamp time.Time         `json:"creationTimestamp,omitzero"`
	DeletionTimestamp *time.Time        `json:"deletionTimestamp,omitempty"`
	// Finalizers hold deletion back until the controllers that own outside
	// state (a VM, a disk) have cleaned it up and removed their entry.
	Finalizers []string `json:"finalizers,omitempty"`
	// OwnerReferences name the object that created this one (a pool owns its
	// sandboxes).
	OwnerReferences []OwnerReference `json:"ownerReferences,omitempty"`
}

// OwnerReference points at the object that owns another.
type OwnerReference struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	UID  string `json:"uid,omitempty"`
}

// Resources is what a desktop VM asks of the host.
type Resources struct {
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=256
	CPU int `json:"cpu,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4194304
	MemoryMB int  `json:"memoryMB,omitempty"`
	GPU      bool `json:"gpu,omitempty"`
}

// ---- Template ----

// Template is a desktop image: the thing sandboxes are cloned from.
//
// +kubebuilder:object:root=true
// +kubebuilder:object:generate=false
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=templates,singular=template,scope=Namespaced,categories=hvkube,shortName=tpl
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Resolution",type=string,JSONPath=`.spec.display.resolution`
// +kubebuilder:printcolumn:name="CPU",type=integer,JSONPath=`.spec.resources.cpu`
// +kubebuilder:printcolumn:name="Memory",type=integer,JSONPath=`.spec.resources.memoryMB`
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.qemu.image`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name: not a DNS label: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit"
type Template struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta     `json:"metadata"`
	Spec     TemplateSpec   `json:"spec"`
	Status   TemplateStatus `json:"status,omitzero"`
}

// TemplateSpec describes a template image.
type TemplateSpec struct {
	// QEMU names the image for the qemu backend.
	QEMU *QEMUImage `json:"qemu,omitempty"`
	// HyperV names the image for the hyperv backend.
	HyperV *HyperVImage `json:"hyperv,omitempty"`
	// VHDXPath is seed 001's top-level form of hyperv.vhdxPath.
	VHDXPath          string          `json:"vhdxPath,omitempty"`
	Resources         Resources       `json:"resources,omitzero"`
	Display           TemplateDisplay `json:"display,omitzero"`
	Guest             GuestInfo       `json:"guest,omitzero"`
	InstalledSoftware []string        `json:"installedSoftware,omitempty"`
	// Network is the desktops' network (default nat): whether the
	// snapshot has a network device, and the default egress rules.
	Network Network `json:"network,omitzero"`
}

// QEMUImage locates a qemu template image: either Image, the name of an image
// built by `make image` under the server's image directory, or explicit
// absolute paths.
type QEMUImage struct {
	Image      string `json:"image,omitempty"`
	Kernel     string `json:"kernel,omitempty"`
	Initrd     string `json:"initrd,omitempty"`
	Disk       string `json:"disk,omitempty"`
	KernelArgs string `json:"kernelArgs,omitempty"`
}

// HyperVImage locates a Hyper-V template image.
type HyperVImage struct {
	VHDXPath   string `json:"vhdxPath"`
	Generation int    `json:"generation,omitempty"`
}

// TemplateDisplay is the template's screen.
type TemplateDisplay struct {
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self == '' || (self.lowerAscii().matches('^[+]?[0-9]{1,9}x[+]?[0-9]{1,9}$') && int(self.lowerAscii().replace('+', '').split('x')[0]) >= 320 && int(self.lowerAscii().replace('+', '').split('x')[0]) <= 7680 && int(self.lowerAscii().replace('+', '').split('x')[1]) >= 200 && int(self.lowerAscii().replace('+', '').split('x')[1]) <= 4320)",message="not WIDTHxHEIGHT within width 320..7680 and height 200..4320, e.g. 1280x800"
	Resolution string `json:"resolution,omitempty"`
}

// GuestInfo describes the guest operating system.
type GuestInfo struct {
	OS   string `json:"os,omitempty"`
	User string `json:"user,omitempty"`
}

// Template phases.
const (
	TemplatePending  = "Pending"
	TemplateBuilding = "Building"
	TemplateReady    = "Ready"
	TemplateFailed   = "Failed"
)

// TemplateStatus reports whether the template's snapshot is built.
type TemplateStatus struct {
	Phase              string            `json:"phase,omitempty"`
	Reason             string            `json:"reason,omitempty"`
	Message            string            `json:"message,omitempty"`
	ObservedGeneration int64             `json:"observedGeneration,omitempty"`
	Conditions         []Condition       `json:"conditions,omitempty"`
	Snapshot           *TemplateSnapshot `json:"snapshot,omitempty"`
	// Shapes are the snapshots of other shapes (memory, resolution) built
	// for sandboxes that ask for them, per node.
	Shapes []TemplateShape `json:"shapes,omitempty"`
	// Retired are the snapshots of earlier generations (and their shapes),
	// kept for the sandboxes cloned from them until the template is
	// deleted.
	Retired []string `json:"retired,omitempty"`
}

// TemplateShape is a snapshot of the template at another memory size or
// resolution than its spec's, built on a node the first time a sandbox
// there asks for that shape.
type TemplateShape struct {
	Node       string    `json:"node"`
	MemoryMB   int       `json:"memoryMB"`
	Resolution string    `json:"resolution"`
	ID         string    `json:"id"`
	Phase      string    `json:"phase"`
	Message    string    `json:"message,omitempty"`
	CreatedAt  time.Time `json:"createdAt,omitzero"`
}

// TemplateSnapshot describes a built template snapshot.
type TemplateSnapshot struct {
	ID              string    `json:"id,omitempty"`
	CreatedAt       time.Time `json:"createdAt,omitzero"`
	BootSeconds     float64   `json:"bootSeconds,omitempty"`
	MemoryBytes     int64     `json:"memoryBytes,omitempty"`
	DiskBytes       int64     `json:"diskBytes,omitempty"`
	Resolution      string    `json:"resolution,omitempty"`
	BackendSnapshot string    `json:"backendSnapshot,omitempty"`
	// Automation is what the snapshot's guest offers automation clients,
	// as its image declares it.
	Automation *Automation `json:"automation,omitempty"`
}

// Automation is the browser endpoints a guest offers automation clients:
// ports inside the guest (reached through the API's port forwards), 0 for
// none.
type Automation struct {
	// CDP is the port of Chromium's DevTools (Playwright's connectOverCDP,
	// Puppeteer, the MCP browser tools).
	CDP int `json:"cdp,omitempty"`
	// WebDriver is the port of a WebDriver server (chromedriver).
	WebDriver int `json:"webdriver,omitempty"`
}

// ---- Sandbox ----

// Sandbox is one isolated desktop VM.
//
// +kubebuilder:object:root=true
// +kubebuilder:object:generate=false
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=sandboxes,singular=sandbox,scope=Namespaced,categories=hvkube,shortName=sb;vm;vms
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.metadata.ownerReferences[?(@.kind=="SandboxPool")].name`
// +kubebuilder:printcolumn:name="Agent",type=string,JSONPath=`.status.currentAgent`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.node`
// +kubebuilder:selectablefield:JSONPath=`.status.node`
// +kubebuilder:printcolumn:name="Template",type=string,JSONPath=`.spec.templateRef`,priority=1
// +kubebuilder:printcolumn:name="PID",type=integer,JSONPath=`.status.pid`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name: not a DNS label: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit"
type Sandbox struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta    `json:"metadata"`
	Spec     SandboxSpec   `json:"spec"`
	Status   SandboxStatus `json:"status,omitzero"`
}

// SandboxSpec is what a sandbox should be.
type SandboxSpec struct {
	// TemplateRef names the Template; empty means the server's default.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$`
	TemplateRef string    `json:"templateRef,omitempty"`
	Resources   Resources `json:"resources,omitzero"`
	Display     Display   `json:"display,omitzero"`
	// +listType=map
	// +listMapKey=name
	Volumes     []Volume    `json:"volumes,omitempty"`
	Startup     []Command   `json:"startup,omitempty"`
	HealthCheck HealthCheck `json:"healthCheck,omitzero"`
	Lifecycle   Lifecycle   `json:"lifecycle,omitzero"`
	// Network replaces the template's mode and egress rules where set.
	Network Network `json:"network,omitzero"`
}

// Display is a sandbox's screen and how it is served.
type Display struct {
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self == '' || (self.lowerAscii().matches('^[+]?[0-9]{1,9}x[+]?[0-9]{1,9}$') && int(self.lowerAscii().replace('+', '').split('x')[0]) >= 320 && int(self.lowerAscii().replace('+', '').split('x')[0]) <= 7680 && int(self.lowerAscii().replace('+', '').split('x')[1]) >= 200 && int(self.lowerAscii().replace('+', '').split('x')[1]) <= 4320)",message="not WIDTHxHEIGHT within width 320..7680 and height 200..4320, e.g. 1280x800"
	Resolution string `json:"resolution,omitempty"`
	// +kubebuilder:validation:Enum=0;8;16;24;32
	ColorDepth int `json:"colorDepth,omitempty"`
	// Protocol is vnc, rdp or enhanced-mode.
	// +kubebuilder:validation:Enum="";vnc;rdp;enhanced-mode
	Protocol string `json:"protocol,omitempty"`
	// Port is the display port on the host; 0 means assigned automatically.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	Port int `json:"port,omitempty"`
}

// Volume maps a host folder into the sandbox.
type Volume struct {
	// +required
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// +kubebuilder:validation:MaxLength=4096
	HostPath string `json:"hostPath"`
	// +kubebuilder:validation:MaxLength=4096
	SandboxPath string `json:"sandboxPath"`
	ReadOnly    bool   `json:"readOnly,omitempty"`
}

// Command is a program and its arguments; arguments are passed as a list,
// never joined into a shell line.
type Command struct {
	Command string   `json:"command"`
	Args    []string `json:"args,omitempty"`
}

// HealthCheck says how to tell a sandbox is healthy.
// +kubebuilder:validation:XValidation:rule="!has(self.type) || self.type != 'process' || has(self.processName)",message="required when type is process",fieldPath=".processName"
type HealthCheck struct {
	// Type is guest (the guest agent answers), process or tcp.
	// +kubebuilder:validation:Enum="";guest;process;tcp
	Type        string `json:"type,omitempty"`
	ProcessName string `json:"processName,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	Port int `json:"port,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	IntervalSeconds int `json:"intervalSeconds,omitempty"`
}

// Lifecycle bounds a sandbox's life.
type Lifecycle struct {
	Ephemeral bool `json:"ephemeral,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=525600
	TimeoutMinutes int `json:"timeoutMinutes,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=525600
	IdleTimeoutMinutes int `json:"idleTimeoutMinutes,omitempty"`
}

// Unsatisfiable reports whether a sandbox that waits for reason waits for
// something more sandboxes would not fix (host memory, a template, a GPU,
// a host path).
func Unsatisfiable(reason string) bool {
	switch reason {
	case "InsufficientMemory", "NoGPU", "TemplateNotFound", "NoTemplate", "HostPathUnavailable":
		return true
	}
	return false
}

// Healthy reports whether a sandbox that has started can serve: its guest
// answers its health check (reason Unhealthy otherwise) and its VM is not
// stopped on a disk error (reason IOError).
func (s SandboxStatus) Healthy() bool {
	return s.Reason != "Unhealthy" && s.Reason != "IOError"
}

// ReadyCondition is a sandbox's Ready condition as its status says: True
// when its VM runs or waits warm (paused or saved) and it is Healthy.
func (sb *Sandbox) ReadyCondition() Condition {
	c := Condition{Type: "Ready", Status: ConditionFalse, Reason: sb.Status.Reason, Message: sb.Status.Message, ObservedGeneration: sb.Metadata.Generation}
	switch sb.Status.Phase {
	case SandboxRunning, SandboxPaused, SandboxSaved:
		if sb.Status.Healthy() {
			c.Status, c.Reason, c.Message = ConditionTrue, sb.Status.Phase, ""
		}
	}
	if c.Reason == "" {
		c.Reason = sb.Status.Phase
		if c.Reason == "" {
			c.Reason = SandboxPending
		}
	}
	return c
}

// Sandbox phases.
const (
	SandboxPending     = "Pending"
	SandboxCreating    = "Creating"
	SandboxRunning     = "Running"
	SandboxPaused      = "Paused"
	SandboxSaved       = "Saved"
	SandboxTerminating = "Terminating"
	SandboxTerminated  = "Terminated"
	SandboxError       = "Error"
)

// SandboxStatus is what a sandbox is.
type SandboxStatus struct {
	Phase              string      `json:"phase,omitempty"`
	Reason             string      `json:"reason,omitempty"`
	Message            string      `json:"message,omitempty"`
	ObservedGeneration int64       `json:"observedGeneration,omitempty"`
	Conditions         []Condition `json:"conditions,omitempty"`
	// Node is the host whose node agent owns the sandbox's VM.
	Node string `json:"node,omitempty"`
	// ClaimedAt is when CurrentAgent took the sandbox; ReleasedAt when the
	// last agent gave it back (idle time counts from it).
	ClaimedAt    *time.Time `json:"claimedAt,omitempty"`
	ReleasedAt   *time.Time `json:"releasedAt,omitempty"`
	Template     string     `json:"template,omitempty"`
	BackendID    string     `json:"backendID,omitempty"`
	DisplayPort  int        `json:"displayPort,omitempty"`
	Display      string     `json:"display,omitempty"`
	Resolution   string     `json:"resolution,omitempty"`
	IPAddress    string     `json:"ipAddress,omitempty"`
	CurrentAgent string     `json:"currentAgent,omitempty"`
	// Claim is the agent CurrentAgent names as the scheduler read it when
	// it claimed the sandbox, so that the sandbox's node starts the
	// agent's attempt with one write conditioned on that version, without
	// reading the agent; nil on claims written before it existed.
	Claim         *AgentClaim `json:"claim,omitempty"`
	LastHeartbeat *time.Time  `json:"lastHeartbeat,omitempty"`
	StartedAt     *time.Time  `json:"startedAt,omitempty"`
	ReadyAt       *time.Time  `json:"readyAt,omitempty"`
	TerminatedAt  *time.Time  `json:"terminatedAt,omitempty"`
	LastResumedAt *time.Time  `json:"lastResumedAt,omitempty"`
	PID           int         `json:"pid,omitempty"`
	// Control is set while a person holds the sandbox's input (taken in
	// the live view); meanwhile input from agents and the API is refused
	// with 409.
	Control *SandboxControl `json:"control,omitempty"`
	// Network is the sandbox's network as the node runs it.
	Network *SandboxNetworkStatus `json:"network,omitempty"`
	// Automation is what the sandbox's guest offers automation clients,
	// from its template's snapshot; nil for none.
	Automation *Automation `json:"automation,omitempty"`
}

// AgentClaim is an agent as the scheduler read it when it claimed a
// sandbox for it.
type AgentClaim struct {
	UID             string `json:"uid"`
	ResourceVersion string `json:"resourceVersion"`
	Generation      int64  `json:"generation,omitempty"`
	// Attempt is the attempt the claim starts: the agent's attempts so
	// far, plus one.
	Attempt int `json:"attempt"`
}

// SandboxControl is a person's hold on a sandbox's input.
type SandboxControl struct {
	// ID names this take-over; input sent on its behalf (a display token
	// minted at the take-over, or the X-Hvkube-Control header) carries it.
	ID string `json:"id"`
	// Holder is who took control, as they named themselves.
	Holder string    `json:"holder"`
	Since  time.Time `json:"since"`
	// Agent is the agent whose human request the take-over answers, if any.
	Agent string `json:"agent,omitempty"`
}

// ControlHeader carries a take-over's ID on input sent by its holder.
const ControlHeader = "X-Hvkube-Control"

// ---- SandboxPool ----

// SandboxPool keeps a number of sandboxes from one template warm.
//
// +kubebuilder:object:root=true
// +kubebuilder:object:generate=false
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas
// +kubebuilder:resource:path=sandboxpools,singular=sandboxpool,scope=Namespaced,categories=hvkube,shortName=pools;pool;sp
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.ready`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.desired`
// +kubebuilder:printcolumn:name="Warm",type=integer,JSONPath=`.status.warm`
// +kubebuilder:printcolumn:name="Busy",type=integer,JSONPath=`.status.busy`
// +kubebuilder:printcolumn:name="Tier",type=string,JSONPath=`.spec.warmTier`,priority=1
// +kubebuilder:printcolumn:name="Template",type=string,JSONPath=`.spec.template.spec.templateRef`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name: not a DNS label: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit"
type SandboxPool struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta        `json:"metadata"`
	Spec     SandboxPoolSpec   `json:"spec"`
	Status   SandboxPoolStatus `json:"status,omitzero"`
}

// SandboxPoolSpec is what a pool should hold.
// +kubebuilder:validation:XValidation:rule="(has(self.minReady) ? self.minReady : 0) <= (has(self.replicas) ? self.replicas : 0)",message="is greater than spec.replicas",fieldPath=".minReady"
type SandboxPoolSpec struct {
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	Replicas int `json:"replicas"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	MinReady int `json:"minReady,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	MaxPerHost int             `json:"maxPerHost,omitempty"`
	Template   SandboxTemplate `json:"template"`
	Scaling    Scaling         `json:"scaling,omitzero"`
	// WarmTier is where idle sandboxes wait: paused (in RAM) or saved (on disk).
	// +kubebuilder:validation:Enum="";paused;saved
	WarmTier string `json:"warmTier,omitempty"`
	// MaxAge replaces idle sandboxes older than this (a Go duration, "1h").
	MaxAge string `json:"maxAge,omitempty"`
	// RefillRate caps how many sandboxes the pool starts per second; 0 is no cap.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	RefillRate int `json:"refillRate,omitempty"`
	// ReleasePolicy is what happens to a sandbox when its agent is done:
	// reset (back to clean), save (keep state) or destroy.
	// +kubebuilder:validation:Enum="";reset;save;destroy
	ReleasePolicy string `json:"releasePolicy,omitempty"`
}

// SandboxTemplate is the pod-template-like part of a pool.
type SandboxTemplate struct {
	Metadata TemplateMeta `json:"metadata,omitzero"`
	Spec     SandboxSpec  `json:"spec"`
}

// TemplateMeta is the metadata a pool stamps on its sandboxes.
type TemplateMeta struct {
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Scaling is a pool's autoscaling policy.
type Scaling struct {
	// +kubebuilder:validation:Enum="";queue-based;none
	Type string `json:"type,omitempty"`
	// +kubebuilder:validation:Enum="";pending-agents
	Metric string `json:"metric,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	ScaleUpThreshold int `json:"scaleUpThreshold,omitempty"`
	// ScaleDownDelay is in seconds.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=604800
	ScaleDownDelay int `json:"scaleDownDelay,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	MaxReplicas int `json:"maxReplicas,omitempty"`
}

// SandboxPoolStatus counts a pool's sandboxes.
type SandboxPoolStatus struct {
	Replicas int `json:"replicas"`
	// Desired is how many sandboxes the pool aims for now: spec.replicas,
	// raised to keep minReady idle and by the queue of pending agents.
	Desired int `json:"desired"`
	Ready   int `json:"ready"`
	Warm    int `json:"warm"`
	Busy    int `json:"busy"`
	// ExcessSince is when the pool first had more sandboxes than desired;
	// it scales down after scaling.scaleDownDelay.
	ExcessSince        *time.Time  `json:"excessSince,omitempty"`
	ObservedGeneration int64       `json:"observedGeneration,omitempty"`
	Conditions         []Condition `json:"conditions,omitempty"`
}

// Condition is one observed aspect of an object.
type Condition struct {
	Type   string `json:"type"`
	Status string `json:"status"` // True, False or Unknown
	// Reason is a stable CamelCase word; Message is for people.
	Reason             string    `json:"reason,omitempty"`
	Message            string    `json:"message,omitempty"`
	ObservedGeneration int64     `json:"observedGeneration,omitempty"`
	LastTransitionTime time.Time `json:"lastTransitionTime,omitzero"`
}

// ---- Agent ----

// Agent is one task run on a sandbox.
//
// +kubebuilder:object:root=true
// +kubebuilder:object:generate=false
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=agents,singular=agent,scope=Namespaced,categories=hvkube,shortName=ag
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Sandbox",type=string,JSONPath=`.status.sandbox`
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`,priority=1
// +kubebuilder:printcolumn:name="Attempts",type=integer,JSONPath=`.status.attempts`,priority=1
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.node`,priority=1
// +kubebuilder:selectablefield:JSONPath=`.status.node`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name: not a DNS label: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || ((!has(oldSelf.status.phase) || oldSelf.status.phase == 'Pending') && (!has(oldSelf.status.attempts) || oldSelf.status.attempts == 0)) || (has(self.spec.type) == has(oldSelf.spec.type) && (!has(self.spec.type) || self.spec.type == oldSelf.spec.type))",message="the agent has started: what it runs cannot change; delete it and create a new agent",fieldPath=".spec.type"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || ((!has(oldSelf.status.phase) || oldSelf.status.phase == 'Pending') && (!has(oldSelf.status.attempts) || oldSelf.status.attempts == 0)) || (has(self.spec.task) == has(oldSelf.spec.task) && (!has(self.spec.task) || self.spec.task == oldSelf.spec.task))",message="the agent has started: what it runs cannot change; delete it and create a new agent",fieldPath=".spec.task"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || ((!has(oldSelf.status.phase) || oldSelf.status.phase == 'Pending') && (!has(oldSelf.status.attempts) || oldSelf.status.attempts == 0)) || (has(self.spec.completion) == has(oldSelf.spec.completion) && (!has(self.spec.completion) || self.spec.completion == oldSelf.spec.completion))",message="the agent has started: what it runs cannot change; delete it and create a new agent",fieldPath=".spec.completion"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || ((!has(oldSelf.status.phase) || oldSelf.status.phase == 'Pending') && (!has(oldSelf.status.attempts) || oldSelf.status.attempts == 0)) || (has(self.spec.sandboxSelector) == has(oldSelf.spec.sandboxSelector) && (!has(self.spec.sandboxSelector) || self.spec.sandboxSelector == oldSelf.spec.sandboxSelector))",message="the agent has started: what it runs cannot change; delete it and create a new agent",fieldPath=".spec.sandboxSelector"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || ((!has(oldSelf.status.phase) || oldSelf.status.phase == 'Pending') && (!has(oldSelf.status.attempts) || oldSelf.status.attempts == 0)) || (has(self.spec.sandboxName) == has(oldSelf.spec.sandboxName) && (!has(self.spec.sandboxName) || self.spec.sandboxName == oldSelf.spec.sandboxName))",message="the agent has started: what it runs cannot change; delete it and create a new agent",fieldPath=".spec.sandboxName"
type Agent struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta  `json:"metadata"`
	Spec     AgentSpec   `json:"spec"`
	Status   AgentStatus `json:"status,omitzero"`
}

// AgentSpec is the task and where it may run.
// +kubebuilder:validation:XValidation:rule="has(self.sandboxName) || has(self.sandboxSelector)",message="required: set sandboxSelector (matchLabels or pool) or sandboxName",fieldPath=".sandboxSelector"
// +kubebuilder:validation:XValidation:rule="!(has(self.sandboxName) && has(self.sandboxSelector))",message="set either sandboxName or sandboxSelector, not both",fieldPath=".sandboxName"
type AgentSpec struct {
	SandboxSelector *SandboxSelector `json:"sandboxSelector,omitempty"`
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$`
	SandboxName string `json:"sandboxName,omitempty"`
	// Type is mcp-agent, workflow, custom, playwright or selenium.
	// +kubebuilder:validation:Enum="";mcp-agent;workflow;custom;playwright;selenium
	Type        string     `json:"type,omitempty"`
	Task        Task       `json:"task,omitzero"`
	MCP         *MCPConfig `json:"mcp,omitempty"`
	Completion  Completion `json:"completion,omitzero"`
	Output      Output     `json:"output,omitzero"`
	RequiresGPU bool       `json:"requiresGpu,omitempty"`
	// TTLSecondsAfterFinished deletes the agent this long after it
	// completed or failed, as a Kubernetes Job's does; unset keeps it.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2592000
	TTLSecondsAfterFinished *int `json:"ttlSecondsAfterFinished,omitempty"`
}

// SandboxSelector picks sandboxes by label. Pool is shorthand for
// matchLabels {pool: NAME}.
type SandboxSelector struct {
	MatchLabels map[string]string `json:"matchLabels,omitempty"`
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$`
	Pool string `json:"pool,omitempty"`
}

// Task is what the agent is asked to do.
type Task struct {
	Workflow string `json:"workflow,omitempty"`
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:pruning:PreserveUnknownFields
	Input json.RawMessage `json:"input,omitempty"`
	Steps []Action        `json:"steps,omitempty"`
	// TimeoutSeconds is seed 001's per-task timeout; completion.timeoutMinutes wins when both are set.
	TimeoutSeconds int `json:"timeoutSeconds,omitempty"`
	// Command is a custom, playwright or selenium agent's program and arguments, as a list (never
	// a shell line).
	Command []string `json:"command,omitempty"`
	// In is where a custom, playwright or selenium agent's command runs: host (default) or guest.
	In string `json:"in,omitempty"`
}

// Action is one computer-use action, or a batch of them, in the words of
// one of the agent vocabularies hvkube speaks (docs/actions.md). The input
// API, workflow steps and the MCP tools take the same, so a recorded run
// replays as a workflow. What names the action tells the vocabulary (see
// Form):
//
//   - Action: Anthropic's computer tool, and hvkube's workflow steps
//     ({"action": "left_click", "coordinate": [10, 20]}).
//   - Type: an action of OpenAI's computer tool ({"type": "click", "x":
//     10, "y": 20, "keys": ["CTRL"]}).
//   - Name: a function call of Gemini's computer use ({"name": "click",
//     "args": {"x": 500, "y": 500}}), or as the Interactions API gives it
//     ({"type": "function_call", "name": …, "arguments": {…}}).
//   - Actions: a batch, run in order: OpenAI's computer_call item
//     ({"type": "computer_call", "actions": […]}) or any list of the above.
type Action struct {
	Action          string  `json:"action,omitempty"`
	Coordinate      []int   `json:"coordinate,omitempty"`
	StartCoordinate []int   `json:"start_coordinate,omitempty"`
	Text            string  `json:"text,omitempty"`
	ScrollDirection string  `json:"scroll_direction,omitempty"`
	ScrollAmount    int     `json:"scroll_amount,omitempty"`
	Duration        float64 `json:"duration,omitempty"`
	Region          []int   `json:"region,omitempty"`
	// Command is the program and arguments of an exec step, or of a
	// command assert (workflow steps only).
	Command []string `json:"command,omitempty"`
	// Assert forms (action: assert): a file in the guest contains text, a
	// command exits with ExitCode (default 0), or the screen is not blank.
	FileContains   *FileContains `json:"fileContains,omitempty"`
	ExitCode       *int          `json:"exitCode,omitempty"`
	ScreenNotBlank bool          `json:"screenNotBlank,omitempty"`

	// Intent says why the action is taken. A workflow keeps it in the
	// step's result and the agent's log; Gemini's actions carry theirs in
	// their arguments.
	Intent string `json:"intent,omitempty"`
	// Keys are the modifier keys held around a pointer action (OpenAI's
	// click, double_click, drag, move and scroll, and the same actions of
	// Anthropic's), or the keys an OpenAI keypress presses together.
	Keys []string `json:"keys,omitempty"`

	// OpenAI's computer actions.
	Type    string      `json:"type,omitempty"`
	X       *int        `json:"x,omitempty"`
	Y       *int        `json:"y,omitempty"`
	Button  string      `json:"button,omitempty"`
	Path    []PathPoint `json:"path,omitempty"`
	ScrollX int         `json:"scroll_x,omitempty"`
	ScrollY int         `json:"scroll_y,omitempty"`
	// MS is how long an OpenAI wait lasts (hvkube's; a second without it).
	MS *int `json:"ms,omitempty"`

	// Actions is a batch. CallID, ID, Status and PendingSafetyChecks are
	// the rest of an OpenAI computer_call item, taken so that the item
	// can be sent as it came (ID is also a Gemini call's id); hvkube does
	// not act on them.
	// +kubebuilder:validation:items:XPreserveUnknownFields
	Actions []Action `json:"actions,omitempty"`
	CallID  string   `json:"call_id,omitempty"`
	ID      string   `json:"id,omitempty"`
	Status  string   `json:"status,omitempty"`
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:pruning:PreserveUnknownFields
	PendingSafetyChecks json.RawMessage `json:"pending_safety_checks,omitempty"`

	// Gemini's function calls: Args as generateContent gives them,
	// Arguments as the Interactions API does.
	Name      string      `json:"name,omitempty"`
	Args      *GeminiArgs `json:"args,omitempty"`
	Arguments *GeminiArgs `json:"arguments,omitempty"`
}

// FileContains asserts that the guest file Path contains Text.
type FileContains struct {
	Path string `json:"path"`
	Text string `json:"text"`
}

// MCPConfig points an mcp-agent at its tools.
type MCPConfig struct {
	Endpoint string   `json:"endpoint,omitempty"`
	Tools    []string `json:"tools,omitempty"`
}

// Completion says when an agent is done and how often it may be retried.
type Completion struct {
	// Type is mcp-done (the agent calls the completion tool) or exit.
	Type string `json:"type,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	MaxRetries int `json:"maxRetries,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10080
	TimeoutMinutes int `json:"timeoutMinutes,omitempty"`
	// HeartbeatSeconds (mcp-agent only; 0: none) ends a running attempt
	// whose external agent has not sent a heartbeat (POST
	// /agents/NAME/heartbeat) for that long: a lease held by a process
	// lives as long as the process, and its sandbox goes back when the
	// process dies.
	// +kubebuilder:validation:XValidation:rule="self == 0 || (self >= 10 && self <= 86400)",message="out of range 10..86400 (0: none)"
	HeartbeatSeconds int `json:"heartbeatSeconds,omitempty"`
}

// Output says what to keep from a run.
type Output struct {
	Screenshots     bool `json:"screenshots,omitempty"`
	ScreenRecording bool `json:"screenRecording,omitempty"`
	Logs            bool `json:"logs,omitempty"`
	// +kubebuilder:validation:MaxItems=100
	Artifacts []string `json:"artifacts,omitempty"`
}

// Agent phases.
const (
	AgentPending   = "Pending"
	AgentScheduled = "Scheduled"
	AgentRunning   = "Running"
	AgentCompleted = "Completed"
	AgentFailed    = "Failed"
	AgentCancelled = "Cancelled"
)

// AgentStatus is where an agent is in its run.
type AgentStatus struct {
	Phase              string      `json:"phase,omitempty"`
	Reason             string      `json:"reason,omitempty"`
	Message            string      `json:"message,omitempty"`
	ObservedGeneration int64       `json:"observedGeneration,omitempty"`
	Conditions         []Condition `json:"conditions,omitempty"`
	Sandbox            string      `json:"sandbox,omitempty"`
	// Node runs the agent: the node of its sandbox.
	Node string `json:"node,omitempty"`
	// Attempts counts the runs started; Failures the ones that failed (a
	// run cut short by a restart of its node is not a failure).
	Attempts int `json:"attempts,omitempty"`
	Failures int `json:"failures,omitempty"`
	// FailedSandbox is the sandbox its last failed attempt ran on. A retry
	// takes another sandbox when one is free, and this one only when it is
	// the only choice (it is restored to its clean snapshot first).
	FailedSandbox string     `json:"failedSandbox,omitempty"`
	ScheduledAt   *time.Time `json:"scheduledAt,omitempty"`
	StartedAt     *time.Time `json:"startedAt,omitempty"`
	CompletedAt   *time.Time `json:"completedAt,omitempty"`
	// HeartbeatAt is the running attempt's last heartbeat
	// (spec.completion.heartbeatSeconds).
	HeartbeatAt *time.Time   `json:"heartbeatAt,omitempty"`
	Result      *AgentResult `json:"result,omitempty"`
	// HumanRequest is the agent's latest question to a person (MCP
	// ask_human or POST /agents/NAME/hitl). While it has no answer the
	// agent's WaitingForHuman condition is True.
	HumanRequest *HumanRequest `json:"humanRequest,omitempty"`
}

// HumanRequest is a question an agent asked a person, and the answer.
type HumanRequest struct {
	ID         string     `json:"id"`
	Question   string     `json:"question"`
	AskedAt    time.Time  `json:"askedAt"`
	Answer     string     `json:"answer,omitempty"`
	AnsweredBy string     `json:"answeredBy,omitempty"`
	AnsweredAt *time.Time `json:"answeredAt,omitempty"`
}

// Pending reports whether the request still waits for its answer.
func (h *HumanRequest) Pending() bool { return h != nil && h.AnsweredAt == nil }

// ConditionWaitingForHuman is True while an agent waits for a person's answer.
const ConditionWaitingForHuman = "WaitingForHuman"

// AgentResult is what an agent produced.
type AgentResult struct {
	Success bool `json:"success"`
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:pruning:PreserveUnknownFields
	Output          json.RawMessage `json:"output,omitempty"`
	Artifacts       []string        `json:"artifacts,omitempty"`
	Screenshots     []string        `json:"screenshots,omitempty"`
	DurationSeconds float64         `json:"durationSeconds,omitempty"`
	// Steps are a workflow's steps as they ran.
	Steps []StepResult `json:"steps,omitempty"`
	// ExitCode is a custom agent's.
	ExitCode *int `json:"exitCode,omitempty"`
}

// StepResult is one workflow step as it ran.
type StepResult struct {
	Action string `json:"action"`
	OK     bool   `json:"ok"`
	// Output is what the step returned: exec output, cursor_position.
	Output string `json:"output,omitempty"`
	Error  string `json:"error,omitempty"`
	// Screenshot names the screenshot taken after the step (an artifact).
	Screenshot      string  `json:"screenshot,omitempty"`
	DurationSeconds float64 `json:"durationSeconds"`
}

// ---- DisplayService ----

// DisplayService exposes the displays of the sandboxes it selects.
//
// +kubebuilder:object:root=true
// +kubebuilder:object:generate=false
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=displayservices,singular=displayservice,scope=Namespaced,categories=hvkube
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Gateway",type=string,JSONPath=`.spec.gateway.path`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name: not a DNS label: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit"
type DisplayService struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta           `json:"metadata"`
	Spec     DisplayServiceSpec   `json:"spec"`
	Status   DisplayServiceStatus `json:"status,omitzero"`
}

// DisplayServiceSpec selects sandboxes and says how to reach their screens.
type DisplayServiceSpec struct {
	Selector map[string]string `json:"selector,omitempty"`
	// +kubebuilder:validation:MaxItems=32
	Ports []ServicePort `json:"ports,omitempty"`
	// Type is ClusterIP (loopback only), NodePort or LoadBalancer (host address).
	// +kubebuilder:validation:Enum="";ClusterIP;NodePort;LoadBalancer
	Type    string  `json:"type,omitempty"`
	Gateway Gateway `json:"gateway,omitzero"`
}

// ServicePort is one exposed display port.
type ServicePort struct {
	Name     string `json:"name,omitempty"`
	Protocol string `json:"protocol,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	Port       int         `json:"port,omitempty"`
	TargetPort IntOrString `json:"targetPort,omitzero"`
}

// Gateway is the WebSocket display gateway for browsers.
type Gateway struct {
	Enabled bool `json:"enabled,omitempty"`
	// +kubebuilder:validation:XValidation:rule="self == '' || self.startsWith('/')",message="must start with /"
	Path string `json:"path,omitempty"`
	// Auth is jwt or none.
	Auth string `json:"auth,omitempty"`
}

// DisplayServiceStatus lists the reachable displays.
type DisplayServiceStatus struct {
	ObservedGeneration int64       `json:"observedGeneration,omitempty"`
	Conditions         []Condition `json:"conditions,omitempty"`
	Endpoints          []Endpoint  `json:"endpoints,omitempty"`
}

// Endpoint is one sandbox display.
type Endpoint struct {
	Sandbox string `json:"sandbox"`
	URL     string `json:"url"`
}

// ---- Node ----

// Node is a host that runs sandboxes, as the node itself reports it. Only
// the node writes it: the API serves it read-only.
//
// +kubebuilder:object:root=true
// +kubebuilder:object:generate=false
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=nodes,singular=node,scope=Namespaced,categories=hvkube
// +kubebuilder:printcolumn:name="Backend",type=string,JSONPath=`.status.backend`
// +kubebuilder:printcolumn:name="Used MiB",type=integer,JSONPath=`.status.memory.usedMB`
// +kubebuilder:printcolumn:name="Free MiB",type=integer,JSONPath=`.status.memory.freeMB`
// +kubebuilder:printcolumn:name="Heartbeat",type=date,JSONPath=`.status.lastHeartbeat`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name: not a DNS label: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit"
type Node struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta `json:"metadata"`
	Spec     NodeSpec   `json:"spec,omitzero"`
	Status   NodeStatus `json:"status,omitzero"`
}

// NodeSpec is empty: a node is configured by its server's flags.
type NodeSpec struct{}

// NodeStatus is what a node has and holds.
type NodeStatus struct {
	// Backend runs its VMs: qemu, hyperv (or fake, in tests).
	Backend string `json:"backend,omitempty"`
	// Memory is the host's memory as admission counts it.
	Memory NodeMemory `json:"memory,omitzero"`
	// Sandboxes counts this node's sandboxes by phase.
	Sandboxes map[string]int `json:"sandboxes,omitempty"`
	// Templates are the templates whose clones it runs: what one takes
	// and how many more fit now.
	Templates []NodeTemplate `json:"templates,omitempty"`
	// Pressure is the memory pressure policy's record.
	Pressure   NodePressure `json:"pressure,omitzero"`
	Conditions []Condition  `json:"conditions,omitempty"`
	// LastHeartbeat is when the node last wrote its status.
	LastHeartbeat *time.Time `json:"lastHeartbeat,omitempty"`
	// Address is where the node's agent (hvkube node) answers the API
	// servers, host:port; empty for the node inside hvkube serve.
	Address string `json:"address,omitempty"`
}

// NodeMemory is the host's memory in MiB: what the desktops use (measured
// where the backend measures, else what they were given), what is held
// for desktops being made and running ones to grow, and what a new
// desktop may still take under the limit.
type NodeMemory struct {
	TotalMB     int `json:"totalMB"`
	AvailableMB int `json:"availableMB"`
	LimitMB     int `json:"limitMB"`
	UsedMB      int `json:"usedMB"`
	ReservedMB  int `json:"reservedMB"`
	FreeMB      int `json:"freeMB"`
}

// NodeTemplate is one template's share of a node.
type NodeTemplate struct {
	// Name is the Template object; Snapshot the build its clones come from.
	Name     string `json:"name"`
	Snapshot string `json:"snapshot"`
	// GuestMB is its guest memory; CloneMB what a fresh clone uses;
	// WorkingSetMB the most a running one was seen to use.
	GuestMB      int `json:"guestMB"`
	CloneMB      int `json:"cloneMB,omitempty"`
	WorkingSetMB int `json:"workingSetMB,omitempty"`
	// Fit is how many more clones fit now.
	Fit int `json:"fit"`
}

// NodePressure records what the node moved to disk to keep memory free.
type NodePressure struct {
	// Moved counts idle desktops moved from RAM to disk (paused to saved)
	// since the node started.
	Moved int `json:"moved,omitempty"`
	// LastMoved is when the latest one was moved; LastReason why.
	LastMoved  *time.Time `json:"lastMoved,omitempty"`
	LastReason string     `json:"lastReason,omitempty"`
}

// ---- Event ----

// Event is one entry in the audit log.
type Event struct {
	TypeMeta       `json:",inline"`
	Metadata       ObjectMeta      `json:"metadata"`
	InvolvedObject ObjectReference `json:"involvedObject"`
	// Type is Normal or Warning.
	Type      string    `json:"type"`
	Reason    string    `json:"reason"`
	Message   string    `json:"message"`
	Timestamp time.Time `json:"timestamp"`
	// Count is how many times the same event happened, when a store
	// aggregates them (the Kubernetes store does; Timestamp is then the
	// last time). Absent means once.
	Count int `json:"count,omitempty"`
}

// ObjectReference names an object.
type ObjectReference struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	UID  string `json:"uid,omitempty"`
}

// Event types.
const (
	EventNormal  = "Normal"
	EventWarning = "Warning"
)
