package config

import (
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/toolmux/toolmux/internal/toolglob"
)

// Servers, in toolmux's dialect (servers:) and in the mcpServers dialect
// other clients write, and the per-server sections (retry, circuit
// breaker, passthrough, health check) that complete the global ones.

// Keys of a server entry and of the sections a server may override, in the
// order the reference documents them.
var (
	serverKeys = []string{"command", "args", "env", "cwd", "url", "transport", "type",
		"headers", "bearer_token", "discover", "call", "allow", "deny", "timeout", "tool_timeouts",
		"connect_timeout", "retry", "circuit_breaker", "health_check", "passthrough", "auth", "disabled", "trust"}
	retryKeys       = []string{"max_attempts", "initial_backoff", "max_backoff", "tools"}
	breakerKeys     = []string{"failures", "cooldown"}
	healthCheckKeys = []string{"enabled", "ping_after", "ping_timeout", "ping_interval", "min_backoff", "max_backoff"}
	// passthroughKeys are the keys of a passthrough section, global or a
	// server's.
	passthroughKeys = []string{"max_sessions", "idle_timeout", "max_parked", "park_timeout", "groups"}

	// mcpServers entries as Claude Desktop, Cursor and Gemini CLI write them.
	commonKeys = []string{"command", "args", "env", "cwd", "url", "httpUrl", "type",
		"headers", "timeout", "includeTools", "excludeTools", "disabled", "enabled", "trust"}
	// Keys those clients define that toolmux has no use for: accepted so
	// their files load unchanged, and otherwise ignored.
	commonIgnored = []string{"description", "autoApprove", "alwaysAllow", "oauth",
		"authProviderType", "targetAudience", "targetServiceAccount", "transportType"}
	// Top-level keys of Gemini CLI's settings.json that toolmux reads: its
	// command-discovered tools, which become the server DiscoveredServer.
	geminiKeys = []string{"toolDiscoveryCommand", "toolCallCommand"}
)

// DiscoveredServer is the name of the server made from Gemini CLI's
// toolDiscoveryCommand and toolCallCommand, the name Gemini CLI's own
// documentation uses for such tools.
const DiscoveredServer = "discovered"

// geminiDiscovered turns Gemini CLI's toolDiscoveryCommand and
// toolCallCommand into the command server DiscoveredServer. Gemini CLI
// takes each as one string, so both are run by "sh -c", which reads a
// plain program path and a command line with arguments alike. The call
// command gets the tool's name as one more argument: the line is extended
// with "$@" and given a $0, so that the appended name becomes its $1 and
// reaches the program as its last argument, as in Gemini CLI. The strings
// are not expanded: the shell expands their variables itself, from the
// same environment, and a toolmux expansion would mangle shell syntax such
// as "${1}". They run in toolmux's working directory, the project
// directory Gemini CLI runs them in.
func (p *parser) geminiDiscovered(gemini []entry, cfg *Config, seen map[string]*yaml.Node) {
	lines := map[string]string{}
	keys := map[string]*yaml.Node{}
	for _, e := range gemini {
		keys[e.key] = e.k
		s, ok := p.str(e.v, e.key)
		if !ok {
			continue
		}
		if strings.TrimSpace(s) == "" {
			p.errAt(e.v, e.key, "must not be empty")
			continue
		}
		if strings.ContainsRune(s, 0) {
			p.errAt(e.v, e.key, "must not contain a NUL byte")
			continue
		}
		lines[e.key] = s
	}
	disc, call := keys["toolDiscoveryCommand"], keys["toolCallCommand"]
	switch {
	case disc == nil:
		p.errAt(call, "toolCallCommand", "needs toolDiscoveryCommand too (the command that lists the tools it runs)")
		return
	case call == nil:
		p.errAt(disc, "toolDiscoveryCommand", "needs toolCallCommand too (the command that runs the tools it lists)")
		return
	}
	if prev, dup := seen[DiscoveredServer]; dup {
		p.errAt(disc, "toolDiscoveryCommand", "makes a server named %q, but mcpServers already has one (line %d)", DiscoveredServer, prev.Line)
		return
	}
	seen[DiscoveredServer] = disc
	d, okD := lines["toolDiscoveryCommand"]
	c, okC := lines["toolCallCommand"]
	if !okD || !okC {
		return
	}
	cfg.Servers = append(cfg.Servers, Server{
		Name:      DiscoveredServer,
		Transport: Command,
		Discover:  []string{"sh", "-c", d},
		Call:      []string{"sh", "-c", c + ` "$@"`, "sh"},
		Line:      disc.Line,
	})
}

// servers reads a mapping of server name to server; common selects the
// mcpServers dialect of other clients.
func (p *parser) servers(n *yaml.Node, kp string, common bool, cfg *Config, seen map[string]*yaml.Node) {
	entries, _ := p.entries(n, kp)
	for _, e := range entries {
		sp := kp + "." + e.key
		if !p.serverName(e, sp, seen, "duplicate server name (first defined at line %d)") {
			continue
		}
		s := p.server(e, sp, common, cfg)
		cfg.Servers = append(cfg.Servers, s)
	}
}

// serverName checks the name of an entry that makes a server (servers,
// mcpServers, openapi) and records it in seen: a name must be unique
// among them all (dup, a format of the line of the first, says so), not
// empty, and free of "/", which patterns use to split server from tool.
func (p *parser) serverName(e entry, sp string, seen map[string]*yaml.Node, dup string) bool {
	if prev, taken := seen[e.key]; taken {
		p.errAt(e.k, sp, dup, prev.Line)
		return false
	}
	seen[e.key] = e.k
	switch {
	case strings.TrimSpace(e.key) == "":
		p.errAt(e.k, sp, "a server name must not be empty")
		return false
	case strings.Contains(e.key, "/"):
		p.errAt(e.k, sp, "a server name must not contain \"/\" (patterns use server/tool)")
		return false
	}
	return true
}

// server reads one server entry in either dialect.
func (p *parser) server(se entry, sp string, common bool, cfg *Config) Server {
	d := &serverDecl{s: Server{Name: se.key, Line: se.k.Line}, sp: sp, common: common, keyNode: map[string]*yaml.Node{}}
	known, ignored := serverKeys, []string(nil)
	if common {
		known, ignored = commonKeys, commonIgnored
	}
	if isNull(deref(se.v)) {
		p.errAt(se.v, sp, "expected a mapping with command or url, got null")
		return d.s
	}
	entries, ok := p.entries(se.v, sp)
	if !ok {
		return d.s
	}
	// Disabled is read first because a disabled server may refer to
	// variables that are not set: that is often why it is disabled.
	for _, e := range entries {
		if (e.key == "disabled" || e.key == "enabled") && slices.Contains(known, e.key) {
			if b, ok := p.boolean(e.v, sp+"."+e.key); ok && b == (e.key == "disabled") {
				d.s.Disabled = true
			}
		}
	}
	d.lax = d.s.Disabled
	for i, e := range entries {
		kp := sp + "." + e.key
		if !slices.Contains(known, e.key) {
			if !slices.Contains(ignored, e.key) {
				p.errAt(e.k, kp, "%s", unknownKeyMsg(e.key, known, ignored))
			}
			continue
		}
		d.keyNode[e.key] = e.k
		p.serverKey(d, &entries[i], kp)
	}
	p.serverKind(d, se)
	p.serverTransport(d)
	p.serverMisplaced(d)
	p.serverSections(d, cfg)
	return d.s
}

// serverDecl is what reading a server entry collects besides the Server
// itself: the keys that decide its kind, and the sections read once its
// kind is known.
type serverDecl struct {
	s      Server
	sp     string // the entry's key path
	common bool   // the mcpServers dialect of other clients
	lax    bool   // a disabled server: unset variables are no error
	// keyNode holds the key node of every known key the entry has.
	keyNode map[string]*yaml.Node

	urlKey             string // "url" or "httpUrl"
	urlKeyN, urlValue  *yaml.Node
	urlOK              bool // the URL was read (expanded)
	trKey, trVal       string
	trNode             *yaml.Node
	cmdNode            *yaml.Node
	discNode, callNode *yaml.Node

	retry, breaker, passthrough, health, auth *entry
}

func (d *serverDecl) hasCmd() bool  { return d.cmdNode != nil }
func (d *serverDecl) hasURL() bool  { return d.urlKeyN != nil }
func (d *serverDecl) hasDisc() bool { return d.discNode != nil || d.callNode != nil }

// commandServer reports a server with discover and call only.
func (d *serverDecl) commandServer() bool { return d.hasDisc() && !d.hasCmd() && !d.hasURL() }

// has names the key that gives the server its kind, for messages.
func (d *serverDecl) has() string {
	switch {
	case d.hasURL() && !d.hasCmd():
		return d.urlKey
	case d.commandServer():
		if d.discNode == nil {
			return "call"
		}
		return "discover"
	}
	return "command"
}

// serverKey reads one known key of a server entry.
func (p *parser) serverKey(d *serverDecl, e *entry, kp string) {
	s, lax := &d.s, d.lax
	switch e.key {
	case "command":
		d.cmdNode = e.k
		if v, ok := p.expandStr(e.v, kp, lax); ok {
			s.Command = v
			if strings.TrimSpace(v) == "" {
				p.errAt(e.v, kp, "must not be empty")
			}
		}
	case "args":
		s.Args = p.expandList(e.v, kp, lax)
	case "env":
		s.Env = p.stringMap(e.v, kp, lax, validEnvName, "an environment variable name")
	case "cwd":
		if v, ok := p.expandStr(e.v, kp, lax); ok && v != "" {
			if r, err := resolvePath(v, p.dir, p.lookup); err != nil {
				p.errAt(e.v, kp, "%v", err)
			} else {
				s.Cwd = r
			}
		}
	case "url", "httpUrl":
		if d.urlKeyN != nil {
			p.errAt(e.k, kp, "use either url or httpUrl, not both")
			return
		}
		d.urlKey, d.urlKeyN, d.urlValue = e.key, e.k, e.v
		s.URL, d.urlOK = p.expandStr(e.v, kp, lax)
	case "transport", "type":
		if d.trNode != nil {
			p.errAt(e.k, kp, "use either transport or type, not both")
			return
		}
		if v, ok := p.str(e.v, kp); ok {
			d.trKey, d.trVal, d.trNode = e.key, v, e.v
		}
	case "discover":
		d.discNode = e.k
		s.Discover = p.argv(e.v, kp, lax, "discover")
	case "call":
		d.callNode = e.k
		s.Call = p.argv(e.v, kp, lax, "call")
	case "headers":
		s.Headers = p.stringMap(e.v, kp, lax, validHeaderName, "an HTTP header name")
	case "bearer_token":
		s.BearerToken, _ = p.expandStr(e.v, kp, lax)
	case "allow":
		s.Allow = p.patterns(e.v, kp, false)
	case "deny":
		s.Deny = p.patterns(e.v, kp, false)
	case "includeTools":
		s.Allow = p.toolNames(e.v, kp)
	case "excludeTools":
		s.Deny = p.toolNames(e.v, kp)
	case "timeout":
		if d.common {
			s.Timeout, _ = p.millis(e.v, kp)
		} else {
			s.Timeout, _ = p.duration(e.v, kp)
		}
	case "tool_timeouts":
		s.ToolTimeouts = p.toolTimeouts(e.v, kp)
	case "connect_timeout":
		s.ConnectTimeout, _ = p.duration(e.v, kp)
	case "trust":
		s.Trust, _ = p.boolean(e.v, kp)
	case "retry":
		d.retry = e
	case "circuit_breaker":
		d.breaker = e
	case "passthrough":
		d.passthrough = e
	case "health_check":
		d.health = e
	case "auth":
		d.auth = e
	}
}

// toolTimeouts reads a server's tool_timeouts: tool name to duration; nil
// when none is valid.
func (p *parser) toolTimeouts(n *yaml.Node, kp string) map[string]time.Duration {
	var out map[string]time.Duration
	es, _ := p.entries(n, kp)
	for _, t := range es {
		if t.key == "" {
			p.errAt(t.k, kp, "a tool name must not be empty")
			continue
		}
		if d, ok := p.duration(t.v, kp+"."+t.key); ok {
			if out == nil {
				out = map[string]time.Duration{}
			}
			out[t.key] = d
		}
	}
	return out
}

// serverKind checks that a server is of exactly one kind, given by the
// keys it has: command (stdio), url (sse or http), or discover and call (a
// command server); and that its URL is one.
func (p *parser) serverKind(d *serverDecl, se entry) {
	sp := d.sp
	hasCmd, hasURL, hasDisc := d.hasCmd(), d.hasURL(), d.hasDisc()
	switch {
	case hasCmd && hasURL:
		p.errAt(d.urlKeyN, sp+"."+d.urlKey, "a server has either command (stdio) or %s (sse/http), not both", d.urlKey)
	case hasDisc && (hasCmd || hasURL):
		other, what := "command", "stdio"
		if !hasCmd {
			other, what = d.urlKey, "sse/http"
		}
		k, n := "discover", d.discNode
		if n == nil {
			k, n = "call", d.callNode
		}
		p.errAt(n, sp+"."+k, "a server has either %s (%s) or discover and call (tools found by a command), not both", other, what)
	case hasDisc && d.discNode == nil:
		p.errAt(d.callNode, sp+".call", "needs discover too (the command that lists the tools call runs)")
	case hasDisc && d.callNode == nil:
		p.errAt(d.discNode, sp+".discover", "needs call too (the command that runs the tools discover lists)")
	case !hasCmd && !hasURL && !hasDisc && d.common:
		p.errAt(se.k, sp, "needs command (to start a stdio server) or url (to reach an sse or http server)")
	case !hasCmd && !hasURL && !hasDisc:
		p.errAt(se.k, sp, "needs command (to start a stdio server), url (to reach an sse or http server), or discover and call (to run tools found by a command)")
	}
	if hasURL && d.urlOK && (d.s.URL != "" || !d.lax) {
		if msg := checkURL(d.s.URL); msg != "" {
			p.errAt(d.urlValue, sp+"."+d.urlKey, "%s", msg)
		}
	}
}

// serverTransport sets the server's transport: the one it names, checked
// against the keys it has, or the one its keys imply.
func (p *parser) serverTransport(d *serverDecl) {
	s, sp := &d.s, d.sp
	hasCmd, hasURL, hasDisc := d.hasCmd(), d.hasURL(), d.hasDisc()
	switch {
	case d.trNode != nil:
		t, ok := transports[d.trVal]
		if !ok || t == Command && d.common {
			expected := "stdio, sse, http, streamable-http, command"
			if d.common {
				// Other clients have no command servers.
				expected = "stdio, sse, http, streamable-http"
			}
			p.errAt(d.trNode, sp+"."+d.trKey, "unknown transport %s (expected one of: %s)", quote(d.trVal), expected)
			break
		}
		s.Transport = t
		switch {
		case t == Stdio && !hasCmd && (hasURL || hasDisc):
			p.errAt(d.trNode, sp+"."+d.trKey, "%s stdio needs command, but this server has %s", d.trKey, d.has())
		case (t == SSE || t == HTTP) && !hasURL && (hasCmd || hasDisc):
			p.errAt(d.trNode, sp+"."+d.trKey, "%s %s needs url, but this server has %s", d.trKey, d.trVal, d.has())
		case t == Command && !hasDisc && (hasCmd || hasURL):
			p.errAt(d.trNode, sp+"."+d.trKey, "%s command needs discover and call, but this server has %s", d.trKey, d.has())
		case t == SSE && d.urlKey == "httpUrl":
			p.errAt(d.trNode, sp+"."+d.trKey, "httpUrl is streamable HTTP, but %s says sse (use url for sse)", d.trKey)
		}
	case hasCmd:
		s.Transport = Stdio
	case d.urlKey == "httpUrl":
		s.Transport = HTTP
	case hasURL:
		s.Transport = inferTransport(s.URL)
	case hasDisc:
		s.Transport = Command
	}
}

// serverMisplaced reports settings that belong to another kind of server:
// they would be silently ignored, so they are mistakes unless they are
// empty. Only a server of one kind is checked: one with two has been
// reported already. A command server's directory defaults to the file's.
func (p *parser) serverMisplaced(d *serverDecl) {
	s, sp := &d.s, d.sp
	set := func(k string) bool {
		switch k {
		case "args":
			return len(s.Args) > 0
		case "env":
			return len(s.Env) > 0
		case "cwd":
			return s.Cwd != ""
		case "headers":
			return len(s.Headers) > 0
		case "bearer_token":
			return s.BearerToken != ""
		}
		return false
	}
	hasCmd, hasURL, hasDisc := d.hasCmd(), d.hasURL(), d.hasDisc()
	switch {
	case hasURL && !hasCmd && !hasDisc:
		for _, k := range []string{"args", "env", "cwd"} {
			if n := d.keyNode[k]; n != nil && set(k) {
				p.errAt(n, sp+"."+k, "applies only to stdio servers, but this server has %s", d.urlKey)
			}
		}
	case hasCmd && !hasURL && !hasDisc:
		for _, k := range []string{"headers", "bearer_token"} {
			if n := d.keyNode[k]; n != nil && set(k) {
				p.errAt(n, sp+"."+k, "applies only to sse and http servers, but this server has command")
			}
		}
	case d.commandServer():
		has := d.has()
		if n := d.keyNode["args"]; n != nil && set("args") {
			p.errAt(n, sp+".args", "applies only to stdio servers, but this server has %s (put the arguments in the %s list)", has, has)
		}
		for _, k := range []string{"headers", "bearer_token"} {
			if n := d.keyNode[k]; n != nil && set(k) {
				p.errAt(n, sp+"."+k, "applies only to sse and http servers, but this server has %s", has)
			}
		}
		// The commands' relative programs ("./tools.sh") are found
		// relative to their directory, so scripts kept beside the file
		// work wherever toolmux is started.
		if s.Cwd == "" {
			s.Cwd = filepath.Clean(p.dir)
		}
	}
}

// serverSections reads the sections a server overrides, each completed
// from the global one.
func (p *parser) serverSections(d *serverDecl, cfg *Config) {
	s, sp := &d.s, d.sp
	if d.retry != nil {
		r := p.retry(d.retry.v, sp+".retry", cfg.Retry, s.Name)
		s.Retry = &r
	}
	if d.breaker != nil {
		b := p.breaker(d.breaker.v, sp+".circuit_breaker", cfg.CircuitBreaker)
		s.CircuitBreaker = &b
	}
	if d.passthrough != nil {
		if d.commandServer() {
			p.errAt(d.passthrough.k, sp+".passthrough", "applies only to stdio, sse and http servers: a command server has no passthrough route")
		} else {
			pt := p.passthrough(d.passthrough.v, sp+".passthrough", cfg.Passthrough)
			s.Passthrough = &pt
		}
	}
	if d.auth != nil {
		s.Auth = p.serverAuth(d, d.auth)
	}
	if d.health != nil {
		h, pings := p.healthCheck(d.health.v, sp+".health_check", cfg.HealthCheck)
		s.HealthCheck = &h
		// A command server has no session to ping; only its backoff
		// applies (to retrying a failed discovery).
		if n := pings; n != nil && d.commandServer() {
			p.errAt(n, sp+".health_check."+n.Value, "applies only to MCP servers (stdio, sse, http), but this server has %s; only min_backoff and max_backoff apply to it", d.has())
		}
	}
}

// transports maps every accepted spelling to its canonical name; the
// camel-case and hyphenated forms are what other clients write.
var transports = map[string]string{
	"stdio":           Stdio,
	"sse":             SSE,
	"http":            HTTP,
	"streamable-http": HTTP,
	"streamableHttp":  HTTP,
	"command":         Command,
}

// inferTransport picks SSE for URLs ending in /sse, the convention of SSE
// servers, and streamable HTTP (the current MCP transport) otherwise.
func inferTransport(raw string) string {
	if u, err := url.Parse(raw); err == nil && strings.HasSuffix(strings.TrimSuffix(u.Path, "/"), "/sse") {
		return SSE
	}
	return HTTP
}

func checkURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Sprintf("%s is not a valid URL", quote(raw))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Sprintf("%s is not an http:// or https:// URL", quote(raw))
	}
	if u.Host == "" {
		return fmt.Sprintf("%s has no host", quote(raw))
	}
	return ""
}

// retry reads a retry block over base: keys the block omits keep base's
// values. server is "" for the global block.
func (p *parser) retry(n *yaml.Node, kp string, base Retry, server string) Retry {
	r := base
	r.Tools = slices.Clone(base.Tools)
	toolsSet := false
	entries, ok := p.entries(n, kp)
	for _, e := range entries {
		fp := kp + "." + e.key
		switch e.key {
		case "max_attempts":
			if v, ok := p.integer(e.v, fp, 1, 1000); ok {
				r.MaxAttempts = v
			}
		case "initial_backoff":
			p.setDuration(&r.InitialBackoff, e.v, fp)
		case "max_backoff":
			p.setDuration(&r.MaxBackoff, e.v, fp)
		case "tools":
			r.Tools, toolsSet = p.patterns(e.v, fp, server == ""), true
		default:
			p.errAt(e.k, fp, "%s", unknownKeyMsg(e.key, retryKeys, nil))
		}
	}
	if server != "" && !toolsSet {
		r.Tools = toolglob.Scope(base.Tools, server)
	}
	if ok && r.InitialBackoff > r.MaxBackoff {
		p.errAt(n, kp, "initial_backoff (%s) is longer than max_backoff (%s)", r.InitialBackoff, r.MaxBackoff)
	}
	return r
}

func (p *parser) breaker(n *yaml.Node, kp string, base Breaker) Breaker {
	b := base
	entries, _ := p.entries(n, kp)
	for _, e := range entries {
		fp := kp + "." + e.key
		switch e.key {
		case "failures":
			if v, ok := p.integer(e.v, fp, 1, 1_000_000); ok {
				b.Failures = v
			}
		case "cooldown":
			p.setDuration(&b.Cooldown, e.v, fp)
		default:
			p.errAt(e.k, fp, "%s", unknownKeyMsg(e.key, breakerKeys, nil))
		}
	}
	return b
}

// maxPassthroughSessions bounds max_sessions: each session may be a
// process, and a typo of an extra digit or two should be caught.
const maxPassthroughSessions = 10_000

// maxParkedCalls bounds max_parked: each parked call holds a call open
// upstream and a goroutine.
const maxParkedCalls = 100_000

// passthrough reads a passthrough section over base: keys the section
// omits keep base's values.
func (p *parser) passthrough(n *yaml.Node, kp string, base Passthrough) Passthrough {
	pt := base
	p.fields(n, kp, passthroughKeys, func(e entry, fp string) {
		switch e.key {
		case "max_sessions":
			if v, ok := p.integer(e.v, fp, 1, maxPassthroughSessions); ok {
				pt.MaxSessions = v
			}
		case "idle_timeout":
			p.setDuration(&pt.IdleTimeout, e.v, fp)
		case "max_parked":
			if v, ok := p.integer(e.v, fp, 1, maxParkedCalls); ok {
				pt.MaxParked = v
			}
		case "park_timeout":
			p.setDuration(&pt.ParkTimeout, e.v, fp)
		case "groups":
			pt.Groups = p.nonEmptyStrings(e.v, fp, checkGroupName)
		}
	})
	return pt
}

// healthCheck reads a health_check block over base: keys the block omits
// keep base's values. pings is the first key that concerns pings, nil when
// the block has none.
func (p *parser) healthCheck(n *yaml.Node, kp string, base HealthCheck) (h HealthCheck, pings *yaml.Node) {
	h = base
	ok := p.fields(n, kp, healthCheckKeys, func(e entry, fp string) {
		if e.key != "min_backoff" && e.key != "max_backoff" && pings == nil {
			pings = e.k
		}
		switch e.key {
		case "enabled":
			p.setBool(&h.Enabled, e.v, fp)
		case "ping_after":
			p.setDuration(&h.PingAfter, e.v, fp)
		case "ping_timeout":
			p.setDuration(&h.PingTimeout, e.v, fp)
		case "ping_interval":
			p.setDuration(&h.PingInterval, e.v, fp)
		case "min_backoff":
			p.setDuration(&h.MinBackoff, e.v, fp)
		case "max_backoff":
			p.setDuration(&h.MaxBackoff, e.v, fp)
		}
	})
	if ok && h.MinBackoff > h.MaxBackoff {
		p.errAt(n, kp, "min_backoff (%s) is longer than max_backoff (%s)", h.MinBackoff, h.MaxBackoff)
	}
	return h, pings
}
