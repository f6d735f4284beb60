package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// FileName is the file Find looks for, so that running toolmux in a project
// directory picks up that project's configuration without a flag.
const FileName = "toolmux.yaml"

// Defaults, exported so that callers building a Config by hand (tests, the
// no-file case) agree with what a file that omits a key would give.
const (
	DefaultConnectTimeout = 15 * time.Second
	DefaultTimeout        = 20 * time.Minute
	DefaultMaxAttempts    = 3
	DefaultInitialBackoff = 200 * time.Millisecond
	DefaultMaxBackoff     = 5 * time.Second
	DefaultFailures       = 5
	DefaultCooldown       = 30 * time.Second
	DefaultPingAfter      = 15 * time.Second
	DefaultPingTimeout    = 10 * time.Second
	DefaultMinBackoff     = 250 * time.Millisecond
	DefaultRestartBackoff = 30 * time.Second
)

// Transport names, the same strings mcpsource uses, so a Server's Transport
// can be handed over unchanged.
const (
	Stdio = "stdio"
	SSE   = "sse"
	HTTP  = "http"
	// Command is a command-discovered server (package cmdsource): its
	// tools are listed by running a discovery command and called by
	// running a call command, the protocol of Gemini CLI's
	// toolDiscoveryCommand and toolCallCommand.
	Command = "command"
)

// Search providers of the built-in web_search, the names package web's
// NewSearcher takes.
const (
	Serper  = "serper"
	SearXNG = "searxng"
)

// Config is the whole configuration: global policy plus the servers it
// applies to. Every field is filled in (defaults applied, variables
// expanded, paths made absolute when loaded from a file), so consumers never
// need to know which keys the file actually spelled out.
type Config struct {
	// Path is the file the configuration came from, as given to Load or
	// Parse, so later messages can point back at it; "" for Default.
	Path string
	// Workspace roots the built-in file tools. Relative values in a file are
	// resolved against the file's directory, so the same file means the same
	// thing wherever toolmux is started.
	Workspace string
	// DataDir holds toolmux's state; "" leaves the choice to the caller
	// (conventionally ~/.local/share/toolmux).
	DataDir string
	// Builtin controls toolmux's own tools.
	Builtin Builtin
	// ConnectTimeout bounds starting a server and the MCP handshake, for
	// every server that does not set its own.
	ConnectTimeout time.Duration
	// Timeout bounds one tool call, for every server that does not set its
	// own.
	Timeout time.Duration
	// Allow and Deny are tool patterns over every server: "server/tool"
	// globs, or a bare "tool" glob meaning that tool in any server. Deny
	// wins over Allow; an empty Allow allows everything not denied.
	Allow, Deny []string
	// Retry is the retry policy of servers that do not set their own.
	Retry Retry
	// CircuitBreaker is the breaker of servers that do not set their own.
	CircuitBreaker Breaker
	// HealthCheck is how servers that do not set their own are watched and
	// brought back.
	HealthCheck HealthCheck
	// Servers are the MCP servers, in file order, names unique.
	Servers []Server
	// NoServers says the file declares, on purpose, that it has no server:
	// `servers: {}` (or `mcpServers: {}`), an empty mapping, and no other
	// server. An empty file, one of comments only, and `servers:` with
	// nothing under it (null) do not set it: they are what a file read
	// while it was being written looks like, and a reload refuses them
	// where they would remove every server (toolmux.Runtime.Reload). Set
	// it in a Config made in code to mean the same.
	NoServers bool
	// OpenAPI are the REST APIs described by OpenAPI 3 documents whose
	// operations are tools (`openapi:`, docs/openapi.md), in file order;
	// their names are server names, unique among them and Servers.
	OpenAPI []OpenAPI
	// Pipeline configures the governance chain around every call.
	Pipeline Pipeline
	// Policy is the approval mode and the rules that allow, deny or ask
	// before a call (docs/policy.md).
	Policy Policy
	// Groups are the settings of callers' groups (`groups:`): the
	// approval mode of their calls and the tools they may see and call,
	// by group name. Nil when the file has none.
	Groups map[string]Group
	// TaskLog controls the task log kept in DataDir (docs/tasklog.md).
	TaskLog TaskLog
	// Pinning says what happens when a server changes a tool's definition
	// after it was pinned (`pinning:`, docs/operations.md).
	Pinning Pinning
	// Passthrough bounds the client sessions of toolmux serve's
	// passthrough routes, for every server that does not set its own.
	Passthrough Passthrough
	// Reissue bounds how toolmux serve answers re-issued tools/call
	// requests (`reissue:`, docs/gateway.md "Re-issued requests").
	Reissue Reissue
	// Hooks are Claude Code's hooks run around the calls (`hooks:`,
	// docs/hooks.md).
	Hooks Hooks
	// Guardrails are webhooks asked the hooks' question (`guardrails:`,
	// docs/hooks.md).
	Guardrails []Guardrail
	// Subscriptions bounds the subscriptions/listen streams of toolmux
	// serve's MCP routes (`subscriptions:`, docs/gateway.md "Listen
	// streams").
	Subscriptions Subscriptions
	// Auth says who may call toolmux serve (`auth:`, docs/identity.md).
	Auth Auth
	// ToolSearch is tool search on toolmux serve's /mcp (`tool_search:`):
	// only pinned tools and the meta-tools find_tools and call_tool are
	// listed. The zero value is off.
	ToolSearch ToolSearch
	// CodeMode is the meta-tool run_code of toolmux serve (`code_mode:`,
	// parse_codemode.go). The zero value is off.
	CodeMode CodeMode
	// VirtualServers are toolmux serve's virtual servers
	// (`virtual_servers:`), each a subset of the tools at
	// /virtual/NAME/mcp.
	VirtualServers []VirtualServer
	// MCPTasks configure MCP tasks on toolmux serve's /mcp and virtual
	// servers (`mcp_tasks:`, docs/gateway.md "Tasks").
	MCPTasks MCPTasks
	// RateLimits are the calls per minute and at once of each caller and
	// group on toolmux serve (`rate_limits:`, docs/operations.md "Limits
	// per caller").
	RateLimits RateLimits
	// Limits bound what one call may cost in memory and storage
	// (`limits:`).
	Limits Limits
	// Vault says where the key of the vault of users' credentials is
	// (`vault:`, docs/vault.md): never the key itself.
	Vault Vault
	// UpstreamOAuth are the gateway's settings as the OAuth client of the
	// servers whose auth kind is oauth (`upstream_oauth:`,
	// docs/identity.md "Per-user OAuth").
	UpstreamOAuth UpstreamOAuth
	// Model is the language model of the agents (`model:`); not Set when
	// the file names none.
	Model Model
	// Agent is the main agent of `toolmux run` (`agent:`), defaults
	// applied.
	Agent Agent
	// Agents are the sub-agents (`agents:`), in file order, names unique;
	// each is offered as the tool agent-NAME__TOOL.
	Agents []Agent
	// Telemetry turns OpenTelemetry traces on (`telemetry:`); the
	// standard OTEL_* environment variables can too (docs/operations.md).
	Telemetry Telemetry
}

// Pinning policies, the values of Pinning.Policy and Pinning.Servers.
const (
	PinHold = "hold"
	PinAsk  = "ask"
	PinWarn = "warn"
	PinOff  = "off"
)

// Pinning is the `pinning:` section: the policy for tools whose definition
// changed since it was pinned. Empty values mean the pipeline's defaults
// (hold).
type Pinning struct {
	// Policy is hold, ask, warn or off; "" means hold.
	Policy string
	// Servers overrides Policy for the servers named.
	Servers map[string]string
}

// Telemetry is the `telemetry:` section: where traces go. Off by default;
// the OTEL_* environment variables override what it says (package
// telemetry decides).
type Telemetry struct {
	// Enabled turns traces on.
	Enabled bool
	// Endpoint is the OTLP endpoint's base URL (as
	// OTEL_EXPORTER_OTLP_ENDPOINT); "" means the exporter's default
	// (localhost:4318 over HTTP, localhost:4317 over gRPC).
	Endpoint string
	// Protocol is TelemetryHTTP (default) or TelemetryGRPC.
	Protocol string
	// ServiceName is the service.name of the spans; "" means toolmux.
	ServiceName string
	// Headers are sent with every export (an API key, say).
	Headers map[string]string
}

// OTLP protocols, the values of Telemetry.Protocol (and of
// OTEL_EXPORTER_OTLP_PROTOCOL).
const (
	TelemetryHTTP = "http/protobuf"
	TelemetryGRPC = "grpc"
)

// Task-log durabilities, the values of TaskLog.Durability.
const (
	// DurabilityProcess: a recorded call survives the crash or kill of
	// toolmux (the operating system holds the write), not a power cut.
	DurabilityProcess = "process"
	// DurabilityFull: every record is synced to disk before the call
	// returns, surviving a power cut too, at ≈ 0.2 ms more per call.
	DurabilityFull = "full"
)

// TaskLog controls the task log.
type TaskLog struct {
	// Enabled records tasks, calls and events (default true). Off, nothing
	// is recorded: `toolmux logs` has nothing new to show and the event
	// stream cannot be resumed after a restart.
	Enabled bool
	// Durability is DurabilityProcess (the default) or DurabilityFull.
	Durability string
	// Retention bounds what the task log keeps (task_log.retention).
	Retention Retention
}

// Retention bounds the task log: the oldest journal segments (and the
// tasks that ended in them) and spilled results go once they are older
// than MaxAge, or while the journal, its index and the spill files
// together take more than MaxBytes. Running tasks are never dropped.
type Retention struct {
	// MaxAge is how long records and spill files are kept.
	MaxAge time.Duration
	// MaxBytes bounds the journal, its index and DATA_DIR/spill together.
	MaxBytes int64
}

// The defaults of task_log.retention: a gateway that runs for months
// never fills its disk.
const (
	DefaultRetentionMaxAge   = 30 * 24 * time.Hour
	DefaultRetentionMaxBytes = 1 << 30
)

// Limits bound what one call may cost, whatever its caller or its tool
// sends: how deeply its arguments may nest, how much of a tool's result is
// held in memory, how much a record, an answer or an event keeps. Zero
// values mean the defaults of the packages that apply them (tool,
// mcpsource, pipeline, stream), so that the numbers live in one place.
type Limits struct {
	// MaxDepth is the deepest nesting of a call's arguments accepted on
	// any route (HTTP API, MCP, CLI, agents, library).
	MaxDepth int
	// MaxResultBytes bounds the text of an MCP server's result held in
	// memory: longer text is streamed to a spill file as it arrives.
	MaxResultBytes int64
	// MaxRecordBytes bounds a call's record: what the task log stores and
	// what the HTTP API and MCP clients are answered.
	MaxRecordBytes int64
	// MaxEventBytes bounds the arguments and the result text one event
	// carries.
	MaxEventBytes int64
}

// Vault is the `vault:` section: where the keys of the vault (users'
// OAuth tokens and secrets for upstream servers, encrypted at rest) are,
// and its bounds. Zero values mean the defaults of package vault. The
// keys themselves are never in the configuration: a file or an
// environment variable holds each.
type Vault struct {
	// KeyFile is a file holding the current key (base64 of 32 bytes, mode
	// 0600); KeyEnv an environment variable holding it. At most one is
	// set; neither means the default variable, TOOLMUX_VAULT_KEY.
	KeyFile, KeyEnv string
	// PreviousKeyFiles and PreviousKeyEnvs hold the keys that only open
	// what they sealed, until a rotation re-seals it with the current one.
	PreviousKeyFiles, PreviousKeyEnvs []string
	// MaxValueBytes bounds one value.
	MaxValueBytes int64
	// MaxEntriesPerOwner bounds the entries of one owner.
	MaxEntriesPerOwner int
}

// OpenAPI is one REST API whose operations are tools (docs/openapi.md).
// Zero values are the defaults of package openapisource.
type OpenAPI struct {
	// Name is the server name of its tools (the "server" of server__tool).
	Name string
	// Spec is the OpenAPI 3 document: an absolute file path (a relative
	// one in the file is resolved against the file's directory) or an
	// http(s) URL.
	Spec string
	// BaseURL is where requests go; "" means the spec's first server.
	BaseURL string
	// Headers and BearerToken are sent with every request to the API and
	// with the request that fetches a spec URL (${VAR} expanded).
	Headers     map[string]string
	BearerToken string
	// Include and Exclude are globs over operation names and
	// "METHOD /path" that select the operations made tools.
	Include, Exclude []string
	// Timeout bounds a call; SpecTimeout reading the spec from a URL.
	Timeout, SpecTimeout time.Duration
	// MaxSpecBytes bounds the spec; MaxResponseBytes how much of a
	// response is read.
	MaxSpecBytes, MaxResponseBytes int64
	// MaxSchemaNodes bounds the schema objects of one tool's input
	// schema, references inlined.
	MaxSchemaNodes int
	// Auth, when set, is the callers' own credential (kind user_secrets:
	// secrets sent as headers); nil: none.
	Auth *ServerAuth
	// Line is where the entry starts in the file.
	Line int
}

// Server is one MCP server and the policy that applies only to it.
type Server struct {
	// Name identifies the server in tool names and patterns; never contains
	// "/" so that "server/tool" patterns stay unambiguous.
	Name string
	// Transport is Stdio, SSE, HTTP (streamable HTTP) or Command.
	Transport string

	// Command, Args, Env and Cwd start a stdio server. Env adds to the
	// environment toolmux itself runs with; Cwd is absolute when loaded from
	// a file, "" meaning toolmux's own working directory.
	Command string
	Args    []string
	Env     map[string]string
	Cwd     string

	// Discover and Call are the argument vectors of a Command server, run
	// without a shell in Cwd with Env added: Discover prints the tools'
	// declarations, Call (with the tool's name appended) runs one. A
	// relative program ("./tools.sh") is relative to Cwd, which for these
	// servers defaults to the config file's directory when loaded from a
	// toolmux.yaml, so that scripts kept beside the file are found.
	Discover []string
	Call     []string

	// URL, Headers and BearerToken reach an SSE or streamable HTTP server;
	// BearerToken is kept apart from Headers so it can be redacted in logs.
	URL         string
	Headers     map[string]string
	BearerToken string

	// Allow and Deny are bare tool-name globs for this server only; they
	// combine with the global patterns, and deny wins.
	Allow, Deny []string

	// Timeout bounds one call; 0 means use Config.Timeout.
	Timeout time.Duration
	// ToolTimeouts overrides Timeout for individual tools, keyed by exact
	// tool name, because one slow tool should not loosen the bound on all.
	ToolTimeouts map[string]time.Duration
	// ConnectTimeout bounds connecting (for a Command server, one run of
	// the discovery command); 0 means use Config.ConnectTimeout.
	ConnectTimeout time.Duration
	// Retry, when non-nil, replaces Config.Retry for this server. Keys the
	// file left out are already filled in from the global policy.
	Retry *Retry
	// CircuitBreaker, when non-nil, replaces Config.CircuitBreaker for this
	// server, filled in from the global policy like Retry.
	CircuitBreaker *Breaker
	// Passthrough, when non-nil, replaces Config.Passthrough for this
	// server's passthrough route, filled in from the global section like
	// Retry. Command servers have no route, so they cannot set it.
	Passthrough *Passthrough
	// Auth, when non-nil, makes every call to the server go over a
	// connection of the caller's own, opened with the caller's credential
	// (docs/identity.md, "On whose behalf"); nil: one connection for
	// everyone, with the credential configured here.
	Auth *ServerAuth
	// HealthCheck, when non-nil, replaces Config.HealthCheck for this
	// server, filled in from the global one like Retry.
	HealthCheck *HealthCheck

	// Disabled servers are kept (so tooling can list them) but not started.
	Disabled bool
	// Trust allows every call to this server without approval, except in
	// plan mode, as Gemini CLI's trust does: it is the policy rule
	// {server: NAME, action: allow}, placed after the user's own rules.
	Trust bool
	// Line is where the server's name appears in the file, so errors found
	// later (a failed start, say) can point at the right entry.
	Line int
}

// Retry says when a failed call is tried again. Only failures that cannot
// have reached the tool (transport errors before the request was sent) are
// retried by default; Tools names tools whose calls are safe to repeat even
// after that.
type Retry struct {
	// MaxAttempts counts the first attempt too; 1 disables retrying.
	MaxAttempts int
	// InitialBackoff is the wait before the first retry; each later wait
	// doubles, capped at MaxBackoff.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// Tools are globs of tools considered idempotent. At the top level they
	// have the syntax of Config.Allow ("server/tool" or bare "tool"); in a
	// server they are bare tool globs. A server's retry block that omits
	// tools inherits the top-level ones that can match that server,
	// rewritten as bare globs.
	Tools []string
}

// Breaker stops calling a server that keeps failing, so a dead server costs
// one fast error instead of a timeout per call.
type Breaker struct {
	// Failures is how many consecutive transport failures open the breaker.
	Failures int
	// Cooldown is how long the breaker stays open before a trial call.
	Cooldown time.Duration
}

// Passthrough bounds the sessions of a passthrough route
// (/servers/NAME/mcp of toolmux serve), each of which holds a session of its
// own with the server: for a stdio server, a process. Zero values mean the
// defaults of package gateway, so that the defaults live in one place.
type Passthrough struct {
	// MaxSessions is how many client sessions the route serves at once;
	// one more is refused until a session ends.
	MaxSessions int
	// IdleTimeout ends a client session that has made no request for this
	// long, and with it the server's session (and process).
	IdleTimeout time.Duration
	// MaxParked bounds the tool calls of 2026-07-28 clients waiting at
	// once, upstream, for their client's answer to a question of the
	// server's (put to the client as input_required); one more is
	// cancelled.
	MaxParked int
	// ParkTimeout is how long such a call waits for the client's retry
	// before it is withdrawn and cancelled upstream.
	ParkTimeout time.Duration
	// Groups, when set, are the only groups whose members may use the
	// route (others are answered as for a route that does not exist);
	// nil lets every caller use it.
	Groups []string
}

// Group is the settings of one group of callers (`groups.NAME`,
// docs/identity.md "Governance per caller"). Package policy gives them
// their meaning.
type Group struct {
	// ApprovalMode is the approval mode of the group's members' calls
	// ("plan", "default", "auto_edit" or "yolo"); "" leaves them in the
	// policy's mode.
	ApprovalMode string
	// Tools are the tool patterns (server/tool globs) of the tools the
	// group's members may see and call; nil when the group does not say
	// (it grants no tool). An empty list grants none on purpose.
	Tools []string
	// Line is where the group starts in the file.
	Line int
}

// ToolSearch is tool search on an MCP endpoint of toolmux serve
// (docs/operations.md, "Tool search"). Zero values mean the defaults of
// package gateway.
type ToolSearch struct {
	// Enabled turns it on whatever the number of tools.
	Enabled bool
	// Above turns it on while the endpoint has more tools than this; 0
	// never does.
	Above int
	// Pinned are tool patterns (server/tool) listed even with tool search
	// on.
	Pinned []string
	// Limit is how many tools find_tools returns unless asked for another
	// number (1 to MaxFindLimit); 0 means the default.
	Limit int
}

// Reissue is the `reissue:` section: the window in which a tools/call
// re-issued by its client is answered from its first execution (tools
// neither read-only nor idempotent). Zero values mean the defaults of
// package gateway.
type Reissue struct {
	// Disabled (enabled: false) turns the window off.
	Disabled bool
	// Window is how long an ended execution answers re-issues.
	Window time.Duration
	// Grace is how long a call goes on after its client left, for a
	// re-issue to pick it up.
	Grace time.Duration
	// MaxEntries bounds the executions held at once.
	MaxEntries int
	// MaxResultBytes bounds a result kept.
	MaxResultBytes int64
}

// Subscriptions is the `subscriptions:` section: how many
// subscriptions/listen streams (a 2026-07-28 client's standing request for
// list changes) toolmux serve holds open at once. Zero values mean the
// defaults of package gateway.
type Subscriptions struct {
	// MaxListens bounds the streams of the whole gateway, every route
	// together; one more is refused until one ends.
	MaxListens int
	// MaxListensPerClient bounds the streams of one client: one route,
	// one credential (Authorization header) and one clientInfo.
	MaxListensPerClient int
}

// MaxFindLimit bounds tool_search.limit; it is gateway.MaxFindLimit (a test
// holds them equal).
const MaxFindLimit = 50

// VirtualServer is a named subset of the tools served at
// /virtual/NAME/mcp by toolmux serve (docs/operations.md, "Virtual
// servers").
type VirtualServer struct {
	// Name is the route's name: letters, digits, '-' and '_'.
	Name string
	// Description is told to the clients as the server's instructions.
	Description string
	// Tools are the tool patterns (server/tool) of the tools it serves.
	Tools []string
	// Rename maps tools (exact "server/tool") to the names they are
	// served under.
	Rename map[string]string
	// Descriptions maps tools (exact "server/tool") to the descriptions
	// served instead of theirs.
	Descriptions map[string]string
	// ToolSearch is tool search on the virtual server.
	ToolSearch ToolSearch
	// Groups, when set, are the only groups whose members may use the
	// virtual server (others are answered as for one that does not
	// exist); nil lets every caller use it.
	Groups []string
}

// HealthCheck says how a server that stopped answering is found out, and
// how fast a server that is down is tried again (docs/config.md, "Wedged
// and failed servers").
type HealthCheck struct {
	// Enabled pings an MCP server's session while a call waits PingAfter
	// for its answer and when a call times out; a ping unanswered within
	// PingTimeout means the server is wedged, and it is restarted.
	// Default true.
	Enabled bool
	// PingAfter defaults to 15 seconds, PingTimeout to 10.
	PingAfter   time.Duration
	PingTimeout time.Duration
	// PingInterval, when positive, also pings an idle session that often.
	PingInterval time.Duration
	// MinBackoff is the wait before the first restart of a server that
	// crashed, was wedged or failed to start; each later wait doubles, up
	// to MaxBackoff. Defaults 250ms and 30s.
	MinBackoff time.Duration
	MaxBackoff time.Duration
}

// Builtin configures toolmux's own tools (file access in Workspace, shell,
// memory, web_fetch and web_search), which are on unless a configuration
// turns them off. Zero values mean "the default of package builtin (or
// web)", so that the defaults live in one place.
type Builtin struct {
	Enabled bool
	// MaxReadBytes bounds the file read_file returns and grep searches;
	// MaxWriteBytes the content write_file writes and the file edit
	// produces.
	MaxReadBytes, MaxWriteBytes int64
	// Shell holds the limits of the shell tool.
	Shell BuiltinShell
	// MemoryDir keeps memory's facts on disk, one file per task; absolute
	// when loaded from a file. "" means DataDir/memory when the caller
	// knows a data directory, else facts live as long as the process.
	MemoryDir string
	// Web configures web_fetch and web_search.
	Web BuiltinWeb
}

// BuiltinShell holds the limits of the built-in shell tool.
type BuiltinShell struct {
	// Timeout is the time limit of a command whose call gives none;
	// MaxTimeout the largest a call may ask for. InactivityTimeout kills a
	// command that prints nothing for that long.
	Timeout, MaxTimeout, InactivityTimeout time.Duration
	// MaxOutputBytes is how much output a result holds; the whole output
	// of a longer command is saved to a file.
	MaxOutputBytes int
}

// BuiltinWeb configures the built-in web tools.
type BuiltinWeb struct {
	// Timeout bounds one fetch, redirects and conversion included.
	Timeout time.Duration
	// MaxBytes bounds the body a fetch reads.
	MaxBytes int64
	// DenyPrivate refuses connections to loopback, private and link-local
	// addresses, for when the model's choice of URLs is not trusted with
	// the network toolmux can reach.
	DenyPrivate bool
	// Search is the backend of web_search; web_search is offered only
	// when Search.Provider is set.
	Search BuiltinSearch
}

// BuiltinSearch is a web search backend.
type BuiltinSearch struct {
	// Provider is Serper or SearXNG; "" means no backend.
	Provider string
	// URL is the backend's base URL; "" means the provider's default
	// (Serper has one, SearXNG does not, so it is required there).
	URL string
	// Key is the API key: required by Serper itself, optional for
	// SearXNG (sent as a bearer token to a proxy in front of it).
	Key string
}

// Options tunes parsing. The zero value reads the process environment and
// resolves relative paths against the file's directory.
type Options struct {
	// LookupEnv resolves ${VAR} and the HOME used by "~"; nil means
	// os.LookupEnv. Tests inject a map so they do not depend on the
	// environment they run in.
	LookupEnv func(string) (string, bool)
	// Dir is the directory relative paths are resolved against; "" means
	// the directory of the name passed to Parse.
	Dir string
}

// Default returns the configuration used when there is no file: the
// built-in tools on the current directory and no MCP servers.
func Default() *Config {
	return &Config{
		Workspace:      ".",
		Builtin:        Builtin{Enabled: true},
		ConnectTimeout: DefaultConnectTimeout,
		Timeout:        DefaultTimeout,
		Retry:          defaultRetry(),
		CircuitBreaker: defaultBreaker(),
		HealthCheck:    DefaultHealthCheck(),
		TaskLog: TaskLog{Enabled: true, Durability: DurabilityProcess,
			Retention: Retention{MaxAge: DefaultRetentionMaxAge, MaxBytes: DefaultRetentionMaxBytes}},
		Agent: DefaultAgent("main"),
	}
}

func defaultRetry() Retry {
	return Retry{MaxAttempts: DefaultMaxAttempts, InitialBackoff: DefaultInitialBackoff, MaxBackoff: DefaultMaxBackoff}
}

// DefaultHealthCheck is the health check of a configuration that sets
// none.
func DefaultHealthCheck() HealthCheck {
	return HealthCheck{Enabled: true, PingAfter: DefaultPingAfter, PingTimeout: DefaultPingTimeout,
		MinBackoff: DefaultMinBackoff, MaxBackoff: DefaultRestartBackoff}
}

func defaultBreaker() Breaker {
	return Breaker{Failures: DefaultFailures, Cooldown: DefaultCooldown}
}

// Load reads and parses the file at path with the process environment.
// Relative paths inside it are resolved against the file's absolute
// directory, so the result does not depend on later changes of directory.
func Load(path string) (*Config, error) {
	return LoadWith(path, Options{})
}

// LoadWith is Load with explicit options, for callers (and tests) that
// control the environment.
func LoadWith(path string, opts Options) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if opts.Dir == "" {
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, err
		}
		opts.Dir = filepath.Dir(abs)
	}
	return ParseWith(path, data, opts)
}

// Parse parses a configuration held in memory, with the process
// environment; name is used in error messages and as the base of relative
// paths.
func Parse(name string, data []byte) (*Config, error) {
	return ParseWith(name, data, Options{})
}

// ParseWith parses with explicit options. On failure it returns every
// problem found, joined with errors.Join, each one an *Error, so a user can
// fix a file in one pass rather than one error per run.
func ParseWith(name string, data []byte, opts Options) (*Config, error) {
	if opts.LookupEnv == nil {
		opts.LookupEnv = os.LookupEnv
	}
	if opts.Dir == "" {
		opts.Dir = filepath.Dir(name)
	}
	return parse(name, data, opts)
}

// Find picks the configuration file to use. An explicit path (a flag) must
// exist, since silently falling back would run with a policy the user did
// not ask for. Otherwise FileName in dir is used if present, and "" means no
// file: run with Default.
func Find(explicit, dir string) (string, error) {
	if explicit != "" {
		p := explicit
		if !filepath.IsAbs(p) && dir != "" {
			p = filepath.Join(dir, p)
		}
		fi, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("config file: %w", err)
		}
		if fi.IsDir() {
			return "", fmt.Errorf("config file %s: is a directory", p)
		}
		return p, nil
	}
	p := filepath.Join(dir, FileName)
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("config file: %w", err)
	case fi.IsDir():
		return "", fmt.Errorf("config file %s: is a directory", p)
	}
	return p, nil
}

// MCPTasks configure MCP tasks (the io.modelcontextprotocol/tasks
// extension) of toolmux serve: for a client that declared the extension,
// a call still running after Threshold, or of a tool Long matches, is
// answered with a task the client polls. The zero value is the default:
// on (when the task log is), a threshold of one second.
type MCPTasks struct {
	// Disabled turns tasks off (`enabled: false`).
	Disabled bool
	// Threshold is how long a call runs before it becomes a task; 0
	// means the default (1s).
	Threshold time.Duration
	// Thresholds override Threshold per tool pattern (server/tool
	// globs), in the order written: the first match wins.
	Thresholds []ToolThreshold
	// Long are tool patterns whose calls are tasks at once.
	Long []string
	// Required are tool patterns whose calls are tasks at once, refused
	// to clients that did not declare the extension.
	Required []string
	// MaxRunning bounds the tasks running at once; 0 means the default
	// (64).
	MaxRunning int
	// PollInterval is the pollIntervalMs clients are told; 0 means the
	// default (500ms).
	PollInterval time.Duration
}

// ToolThreshold is the task threshold of the tools a pattern matches.
type ToolThreshold struct {
	Tools string
	After time.Duration
}

// Auth is the `auth:` section: who may call toolmux serve
// (docs/identity.md): access tokens of identity providers (the issuers),
// checked as an OAuth resource server checks them, and the API keys. Zero
// values mean the defaults of package identity; without the section (and
// without --token) serve listens on loopback only, with no caller.
type Auth struct {
	// Resource is the gateway's canonical URL ("https://gw.example.com"):
	// the audience its tokens must name, and what its protected resource
	// metadata says; "" takes it from each request.
	Resource string
	// Issuers are the identity providers whose access tokens are
	// accepted, in file order.
	Issuers []Issuer
	// Claims name the claims a caller is read from.
	Claims Claims
	// ClockSkew is how far exp, nbf and iat may be off the gateway's
	// clock.
	ClockSkew time.Duration
	// Scopes must all be granted by a token (not by an API key).
	Scopes []string
	// AdminGroup is the group whose members see every caller's tasks,
	// approvals and listings; ApproversGroup the group whose members
	// answer approvals.
	AdminGroup, ApproversGroup string
	// SelfApproval, when false, refuses a caller's answer to the approval
	// of its own call (its client's elicitation, its page); nil means
	// true, the default.
	SelfApproval *bool
	// Keys is the file of the API keys; "" for the default in the data
	// directory.
	Keys string
	// TokenCache bounds the verified tokens (and introspection answers)
	// kept, so that a token sent on every request is checked once.
	TokenCache TokenCache
	// Timeout bounds one request to an issuer (discovery, its keys,
	// introspection).
	Timeout time.Duration
	// JWKSRefetchInterval is the least time between two fetches of an
	// issuer's keys, which a token signed by a key not held makes.
	JWKSRefetchInterval time.Duration
	// Page, when set, has the web page's users log in with an OpenID
	// Connect provider (`auth.page`).
	Page *Page
}

// Page is `auth.page`: the web page logs in with an OpenID Connect
// provider (the authorization code flow with PKCE; the gateway is a
// confidential client, its redirect URI RESOURCE/auth/callback), and its
// requests are then authenticated by a session cookie.
type Page struct {
	// Issuer is the provider's issuer identifier (its discovery document
	// is found from it).
	Issuer string
	// ClientID and ClientSecretEnv are the gateway's client at the
	// provider; the secret is read from the environment variable named,
	// never from the file.
	ClientID, ClientSecretEnv string
	// Scopes are asked besides openid; nil means the default of package
	// identity.
	Scopes []string
	// Claims name the ID token's claims the caller is read from; a field
	// left "" is auth.claims's.
	Claims Claims
	// SessionMaxAge is how long a session lasts after its login.
	SessionMaxAge time.Duration
	// MaxSessions bounds the sessions kept; one more ends the oldest.
	MaxSessions int
	// LoginTimeout is how long a login may take at the provider.
	LoginTimeout time.Duration
}

// Issuer is one identity provider of `auth.issuers`.
type Issuer struct {
	// Issuer is its issuer identifier, the iss of its tokens and the base
	// of its discovery documents.
	Issuer string
	// JWKSURL is where its keys are; "" finds them by discovery.
	JWKSURL string
	// Audiences are further audiences its tokens may name instead of the
	// gateway's resource.
	Audiences []string
	// Introspection, when set, checks its opaque tokens at its
	// introspection endpoint (RFC 7662).
	Introspection *Introspection
}

// Introspection is how an issuer's opaque tokens are introspected.
type Introspection struct {
	// URL is the introspection endpoint; "" finds it by discovery.
	URL string
	// ClientID and ClientSecretEnv authenticate the gateway there
	// (client_secret_basic); the secret is read from the environment
	// variable named, never from the file. Both empty: no client
	// authentication.
	ClientID, ClientSecretEnv string
}

// Claims names the claims of a token a caller is read from; "" means the
// default of package identity.
type Claims struct {
	Subject, Name, Groups string
}

// TokenCache is `auth.token_cache`.
type TokenCache struct {
	// MaxAge is the longest a verified token (or an introspection's
	// answer) is kept, however long the token lives.
	MaxAge time.Duration
	// MaxEntries bounds the tokens kept; the oldest goes first.
	MaxEntries int
}

// Hooks is the `hooks:` section: Claude Code's hooks object, plus
// toolmux's bounds (docs/hooks.md). Zero values mean the hooks package's
// defaults.
type Hooks struct {
	PreToolUse  []HookMatcher
	PostToolUse []HookMatcher
	// MaxTimeout bounds each hook's timeout (`max_timeout`).
	MaxTimeout time.Duration
	// MaxOutputBytes bounds what is read of a hook's stdout and stderr
	// (`max_output_bytes`).
	MaxOutputBytes int64
	// OnError is what a failing hook does: "continue" or "block".
	OnError string
}

// HookMatcher is one entry of an event's list: a matcher and its hooks.
type HookMatcher struct {
	Matcher string
	Hooks   []HookCommand
}

// HookCommand is one hook of type "command".
type HookCommand struct {
	Command string
	// Timeout is Claude Code's `timeout`, given in seconds.
	Timeout time.Duration
}

// Guardrail is one entry of `guardrails:`: a webhook asked the hooks'
// question.
type Guardrail struct {
	Name             string
	URL              string
	Events           []string
	Matcher          string
	Timeout          time.Duration
	MaxResponseBytes int64
	// Fail is "open" or "closed" ("" : the package's default, open).
	Fail string
	// Headers are sent with each request (expanded: a token from the
	// environment); never logged.
	Headers map[string]string
}
