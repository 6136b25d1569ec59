// Package api holds hvkube's resource types, their defaults, validation and
// decoding, and the error categories shared by the store, server and CLI. It
// does no I/O.
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
	CPU      int  `json:"cpu,omitempty"`
	MemoryMB int  `json:"memoryMB,omitempty"`
	GPU      bool `json:"gpu,omitempty"`
}

// ---- Template ----

// Template is a desktop image: the thing sandboxes are cloned from.
type Template struct {
	TypeMeta
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
type Sandbox struct {
	TypeMeta
	Metadata ObjectMeta    `json:"metadata"`
	Spec     SandboxSpec   `json:"spec"`
	Status   SandboxStatus `json:"status,omitzero"`
}

// SandboxSpec is what a sandbox should be.
type SandboxSpec struct {
	// TemplateRef names the Template; empty means the server's default.
	TemplateRef string      `json:"templateRef,omitempty"`
	Resources   Resources   `json:"resources,omitzero"`
	Display     Display     `json:"display,omitzero"`
	Volumes     []Volume    `json:"volumes,omitempty"`
	Startup     []Command   `json:"startup,omitempty"`
	HealthCheck HealthCheck `json:"healthCheck,omitzero"`
	Lifecycle   Lifecycle   `json:"lifecycle,omitzero"`
	// Network replaces the template's mode and egress rules where set.
	Network Network `json:"network,omitzero"`
}

// Display is a sandbox's screen and how it is served.
type Display struct {
	Resolution string `json:"resolution,omitempty"`
	ColorDepth int    `json:"colorDepth,omitempty"`
	// Protocol is vnc, rdp or enhanced-mode.
	Protocol string `json:"protocol,omitempty"`
	// Port is the display port on the host; 0 means assigned automatically.
	Port int `json:"port,omitempty"`
}

// Volume maps a host folder into the sandbox.
type Volume struct {
	Name        string `json:"name"`
	HostPath    string `json:"hostPath"`
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
type HealthCheck struct {
	// Type is guest (the guest agent answers), process or tcp.
	Type            string `json:"type,omitempty"`
	ProcessName     string `json:"processName,omitempty"`
	Port            int    `json:"port,omitempty"`
	IntervalSeconds int    `json:"intervalSeconds,omitempty"`
}

// Lifecycle bounds a sandbox's life.
type Lifecycle struct {
	Ephemeral          bool `json:"ephemeral,omitempty"`
	TimeoutMinutes     int  `json:"timeoutMinutes,omitempty"`
	IdleTimeoutMinutes int  `json:"idleTimeoutMinutes,omitempty"`
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
	ClaimedAt     *time.Time `json:"claimedAt,omitempty"`
	ReleasedAt    *time.Time `json:"releasedAt,omitempty"`
	Template      string     `json:"template,omitempty"`
	BackendID     string     `json:"backendID,omitempty"`
	DisplayPort   int        `json:"displayPort,omitempty"`
	Display       string     `json:"display,omitempty"`
	Resolution    string     `json:"resolution,omitempty"`
	IPAddress     string     `json:"ipAddress,omitempty"`
	CurrentAgent  string     `json:"currentAgent,omitempty"`
	LastHeartbeat *time.Time `json:"lastHeartbeat,omitempty"`
	StartedAt     *time.Time `json:"startedAt,omitempty"`
	ReadyAt       *time.Time `json:"readyAt,omitempty"`
	TerminatedAt  *time.Time `json:"terminatedAt,omitempty"`
	LastResumedAt *time.Time `json:"lastResumedAt,omitempty"`
	PID           int        `json:"pid,omitempty"`
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
type SandboxPool struct {
	TypeMeta
	Metadata ObjectMeta        `json:"metadata"`
	Spec     SandboxPoolSpec   `json:"spec"`
	Status   SandboxPoolStatus `json:"status,omitzero"`
}

// SandboxPoolSpec is what a pool should hold.
type SandboxPoolSpec struct {
	Replicas   int             `json:"replicas"`
	MinReady   int             `json:"minReady,omitempty"`
	MaxPerHost int             `json:"maxPerHost,omitempty"`
	Template   SandboxTemplate `json:"template"`
	Scaling    Scaling         `json:"scaling,omitzero"`
	// WarmTier is where idle sandboxes wait: paused (in RAM) or saved (on disk).
	WarmTier string `json:"warmTier,omitempty"`
	// MaxAge replaces idle sandboxes older than this (a Go duration, "1h").
	MaxAge string `json:"maxAge,omitempty"`
	// RefillRate caps how many sandboxes the pool starts per second; 0 is no cap.
	RefillRate int `json:"refillRate,omitempty"`
	// ReleasePolicy is what happens to a sandbox when its agent is done:
	// reset (back to clean), save (keep state) or destroy.
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
	Type             string `json:"type,omitempty"`
	Metric           string `json:"metric,omitempty"`
	ScaleUpThreshold int    `json:"scaleUpThreshold,omitempty"`
	// ScaleDownDelay is in seconds.
	ScaleDownDelay int `json:"scaleDownDelay,omitempty"`
	MaxReplicas    int `json:"maxReplicas,omitempty"`
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
type Agent struct {
	TypeMeta
	Metadata ObjectMeta  `json:"metadata"`
	Spec     AgentSpec   `json:"spec"`
	Status   AgentStatus `json:"status,omitzero"`
}

// AgentSpec is the task and where it may run.
type AgentSpec struct {
	SandboxSelector *SandboxSelector `json:"sandboxSelector,omitempty"`
	SandboxName     string           `json:"sandboxName,omitempty"`
	// Type is mcp-agent, workflow, custom, playwright or selenium.
	Type        string     `json:"type,omitempty"`
	Task        Task       `json:"task,omitzero"`
	MCP         *MCPConfig `json:"mcp,omitempty"`
	Completion  Completion `json:"completion,omitzero"`
	Output      Output     `json:"output,omitzero"`
	RequiresGPU bool       `json:"requiresGpu,omitempty"`
	// TTLSecondsAfterFinished deletes the agent this long after it
	// completed or failed, as a Kubernetes Job's does; unset keeps it.
	TTLSecondsAfterFinished *int `json:"ttlSecondsAfterFinished,omitempty"`
}

// SandboxSelector picks sandboxes by label. Pool is shorthand for
// matchLabels {pool: NAME}.
type SandboxSelector struct {
	MatchLabels map[string]string `json:"matchLabels,omitempty"`
	Pool        string            `json:"pool,omitempty"`
}

// Task is what the agent is asked to do.
type Task struct {
	Workflow string          `json:"workflow,omitempty"`
	Input    json.RawMessage `json:"input,omitempty"`
	Steps    []Action        `json:"steps,omitempty"`
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
	Actions             []Action        `json:"actions,omitempty"`
	CallID              string          `json:"call_id,omitempty"`
	ID                  string          `json:"id,omitempty"`
	Status              string          `json:"status,omitempty"`
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
	Type           string `json:"type,omitempty"`
	MaxRetries     int    `json:"maxRetries,omitempty"`
	TimeoutMinutes int    `json:"timeoutMinutes,omitempty"`
	// HeartbeatSeconds (mcp-agent only; 0: none) ends a running attempt
	// whose external agent has not sent a heartbeat (POST
	// /agents/NAME/heartbeat) for that long: a lease held by a process
	// lives as long as the process, and its sandbox goes back when the
	// process dies.
	HeartbeatSeconds int `json:"heartbeatSeconds,omitempty"`
}

// Output says what to keep from a run.
type Output struct {
	Screenshots     bool     `json:"screenshots,omitempty"`
	ScreenRecording bool     `json:"screenRecording,omitempty"`
	Logs            bool     `json:"logs,omitempty"`
	Artifacts       []string `json:"artifacts,omitempty"`
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
	Attempts    int        `json:"attempts,omitempty"`
	Failures    int        `json:"failures,omitempty"`
	ScheduledAt *time.Time `json:"scheduledAt,omitempty"`
	StartedAt   *time.Time `json:"startedAt,omitempty"`
	CompletedAt *time.Time `json:"completedAt,omitempty"`
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
	Success         bool            `json:"success"`
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
type DisplayService struct {
	TypeMeta
	Metadata ObjectMeta           `json:"metadata"`
	Spec     DisplayServiceSpec   `json:"spec"`
	Status   DisplayServiceStatus `json:"status,omitzero"`
}

// DisplayServiceSpec selects sandboxes and says how to reach their screens.
type DisplayServiceSpec struct {
	Selector map[string]string `json:"selector,omitempty"`
	Ports    []ServicePort     `json:"ports,omitempty"`
	// Type is ClusterIP (loopback only), NodePort or LoadBalancer (host address).
	Type    string  `json:"type,omitempty"`
	Gateway Gateway `json:"gateway,omitzero"`
}

// ServicePort is one exposed display port.
type ServicePort struct {
	Name       string      `json:"name,omitempty"`
	Protocol   string      `json:"protocol,omitempty"`
	Port       int         `json:"port,omitempty"`
	TargetPort IntOrString `json:"targetPort,omitzero"`
}

// Gateway is the WebSocket display gateway for browsers.
type Gateway struct {
	Enabled bool   `json:"enabled,omitempty"`
	Path    string `json:"path,omitempty"`
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
type Node struct {
	TypeMeta
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
