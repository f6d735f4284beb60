package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/toolmux/toolmux/internal/toolglob"
)

// The configuration is decoded into a yaml.Node tree and walked key by key,
// rather than unmarshalled into tagged structs, so that every message can
// speak of keys, lines and columns instead of Go types, and so that all
// problems are collected instead of stopping at the first.

// Keys of a toolmux.yaml, in the order the reference documents them; the
// order is also the order "expected one of" lists them in.
var (
	topKeys = []string{"workspace", "data_dir", "builtin", "connect_timeout", "timeout",
		"allow", "deny", "retry", "circuit_breaker", "health_check", "servers", "mcpServers", "pipeline", "policy", "task_log",
		"limits", "model", "agent", "agents", "passthrough"}
	serverKeys = []string{"command", "args", "env", "cwd", "url", "transport", "type",
		"headers", "bearer_token", "discover", "call", "allow", "deny", "timeout", "tool_timeouts",
		"connect_timeout", "retry", "circuit_breaker", "health_check", "passthrough", "disabled", "trust"}
	retryKeys       = []string{"max_attempts", "initial_backoff", "max_backoff", "tools"}
	breakerKeys     = []string{"failures", "cooldown"}
	healthCheckKeys = []string{"enabled", "ping_after", "ping_timeout", "ping_interval", "min_backoff", "max_backoff"}
	// passthroughKeys are the keys of a passthrough section, global or a
	// server's.
	passthroughKeys = []string{"max_sessions", "idle_timeout"}

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

type parser struct {
	file   string
	dir    string
	lookup func(string) (string, bool)
	errs   []*Error

	// Memo of mapping entries with YAML merge keys applied: aliases let a
	// small file reference one mapping many times, and without the memo
	// nested merges would cost exponential time.
	merged  map[*yaml.Node][]entry
	merging map[*yaml.Node]bool
}

type entry struct {
	key  string
	k, v *yaml.Node
}

func parse(name string, data []byte, opts Options) (*Config, error) {
	p := &parser{
		file:    name,
		dir:     opts.Dir,
		lookup:  opts.LookupEnv,
		merged:  map[*yaml.Node][]entry{},
		merging: map[*yaml.Node]bool{},
	}
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	root, isJSON := p.document(data)
	var cfg *Config
	if len(p.errs) == 0 {
		cfg = p.config(root, isJSON)
	}
	if len(p.errs) > 0 {
		slices.SortStableFunc(p.errs, func(a, b *Error) int {
			return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
		})
		errs := make([]error, len(p.errs))
		for i, e := range p.errs {
			errs[i] = e
		}
		return nil, errors.Join(errs...)
	}
	return cfg, nil
}

func (p *parser) errAt(n *yaml.Node, key, format string, args ...any) {
	e := &Error{File: p.file, Key: key, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	p.errs = append(p.errs, e)
}

// document parses data as JSON or YAML and returns the root value (nil for
// an empty document) and whether it was JSON. A file is read as JSON when
// its name says so, or when it starts with "{" and is valid JSON; a YAML
// flow mapping that is not JSON still parses as YAML.
func (p *parser) document(data []byte) (*yaml.Node, bool) {
	ext := strings.ToLower(filepath.Ext(p.file))
	forceJSON := ext == ".json" || ext == ".jsonc"
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if forceJSON || len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '[') {
		n, err := parseJSON(data)
		if err == nil {
			return n, true
		}
		if !forceJSON {
			if doc, yerr := decodeYAML(data); yerr == nil {
				return doc, false
			}
		}
		var se *syntaxError
		if errors.As(err, &se) {
			line, col := position(data, se.off)
			p.errs = append(p.errs, &Error{File: p.file, Line: line, Column: col, Msg: "JSON syntax error: " + se.msg})
		}
		return nil, true
	}
	doc, err := decodeYAML(data)
	if err != nil {
		var extra *extraDocError
		if errors.As(err, &extra) {
			p.errs = append(p.errs, &Error{File: p.file, Line: extra.line, Column: extra.col,
				Msg: "a second YAML document; a config file holds exactly one (remove the \"---\")"})
			return nil, false
		}
		line, msg := yamlErrorLine(err)
		line = syntaxLine(data, err.Error(), line)
		p.errs = append(p.errs, &Error{File: p.file, Line: line, Msg: "YAML syntax error: " + msg})
		return nil, false
	}
	return doc, false
}

type extraDocError struct{ line, col int }

func (e *extraDocError) Error() string { return "more than one YAML document" }

// decodeYAML returns the root node of the single document in data, nil if
// data holds no document.
func decodeYAML(data []byte) (root *yaml.Node, err error) {
	defer func() {
		// The file is untrusted input; a parser bug must not take toolmux
		// down with it.
		if r := recover(); r != nil {
			root, err = nil, fmt.Errorf("yaml: internal parser error: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if err == io.EOF {
			return nil, nil
		}
		return nil, err
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == io.EOF:
	case err != nil:
		return nil, err
	case len(extra.Content) > 0 && !isNull(extra.Content[0]):
		return nil, &extraDocError{line: extra.Content[0].Line, col: extra.Content[0].Column}
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	return doc.Content[0], nil
}

var yamlLineRE = regexp.MustCompile(`^line (\d+): `)

// yamlErrorLine splits yaml.v3's "yaml: line N: msg" into N and msg.
func yamlErrorLine(err error) (int, string) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n, msg[len(m[0]):]
	}
	return 0, msg
}

// syntaxLine finds the line of a YAML syntax error more precisely than
// yaml.v3 reports it: for parser errors it names the line where the
// enclosing block started (0-based, at that), and for errors on the first
// line none at all. The error lies on the first line whose prefix of the
// file fails with exactly the same message; the search starts at the
// reported line (the error cannot be earlier) and is bounded so a huge file
// costs little.
func syntaxLine(data []byte, full string, reported int) int {
	budget := 2 << 20
	line, end := 1, 0
	for end < len(data) {
		nl := bytes.IndexByte(data[end:], '\n')
		if nl < 0 {
			end = len(data)
		} else {
			end += nl + 1
		}
		if line >= reported {
			if budget -= end; budget < 0 {
				break
			}
			if _, err := decodeYAML(data[:end]); err != nil && err.Error() == full {
				return line
			}
		}
		line++
	}
	return reported
}

// config walks the root mapping. Top-level keys are handled in two passes
// so a server's partial retry or breaker block can be completed from the
// global one wherever the two appear in the file.
func (p *parser) config(root *yaml.Node, isJSON bool) *Config {
	cfg := Default()
	cfg.Path = p.file
	if root == nil || isNull(deref(root)) {
		cfg.Workspace = filepath.Clean(p.dir)
		return cfg
	}
	if deref(root).Kind != yaml.MappingNode {
		p.errAt(root, "", "expected a mapping of toolmux settings or an mcpServers object, got %s", describe(deref(root)))
		return nil
	}
	entries, _ := p.entries(root, "")
	hasToolmux, hasMCP := false, false
	for _, e := range entries {
		switch {
		case e.key == "mcpServers":
			hasMCP = true
		case isJSON && slices.Contains(geminiKeys, e.key):
			// A settings.json may declare command-discovered tools and no
			// MCP server at all; it is still Gemini CLI's file.
			hasMCP = true
		case slices.Contains(topKeys, e.key):
			hasToolmux = true
		}
	}
	// A file with only mcpServers is another client's configuration: in
	// JSON (Gemini CLI's settings.json) the rest of the file belongs to that
	// client, and its directory says nothing about which files the built-in
	// tools should see, so the workspace stays the current directory.
	common := hasMCP && !hasToolmux
	lenient := common && isJSON
	if !common {
		cfg.Workspace = filepath.Clean(p.dir)
	}
	var gemini []entry
	var agents agentDecls
	for _, e := range entries {
		kp := e.key
		if lenient && slices.Contains(geminiKeys, e.key) {
			gemini = append(gemini, e)
			continue
		}
		if !slices.Contains(topKeys, e.key) {
			if !lenient {
				p.errAt(e.k, kp, "%s", unknownKeyMsg(e.key, topKeys, nil))
			}
			continue
		}
		switch e.key {
		case "workspace":
			if s, ok := p.expandStr(e.v, kp, false); ok {
				if s == "" {
					p.errAt(e.v, kp, "must not be empty (use \".\" for the config file's directory)")
				} else if r, err := resolvePath(s, p.dir, p.lookup); err != nil {
					p.errAt(e.v, kp, "%v", err)
				} else {
					cfg.Workspace = r
				}
			}
		case "data_dir":
			if s, ok := p.expandStr(e.v, kp, false); ok && s != "" {
				if r, err := resolvePath(s, p.dir, p.lookup); err != nil {
					p.errAt(e.v, kp, "%v", err)
				} else {
					cfg.DataDir = r
				}
			}
		case "builtin":
			cfg.Builtin = p.builtin(e.v, kp, cfg.Builtin)
		case "task_log":
			cfg.TaskLog = p.taskLog(e.v, kp, cfg.TaskLog)
		case "passthrough":
			cfg.Passthrough = p.passthrough(e.v, kp, cfg.Passthrough)
		case "limits":
			cfg.Limits = p.limits(e.v, kp)
		case "connect_timeout":
			if d, ok := p.duration(e.v, kp); ok {
				cfg.ConnectTimeout = d
			}
		case "timeout":
			if d, ok := p.duration(e.v, kp); ok {
				cfg.Timeout = d
			}
		case "allow":
			cfg.Allow = p.patterns(e.v, kp, true)
		case "deny":
			cfg.Deny = p.patterns(e.v, kp, true)
		case "retry":
			cfg.Retry = p.retry(e.v, kp, cfg.Retry, "")
		case "circuit_breaker":
			cfg.CircuitBreaker = p.breaker(e.v, kp, cfg.CircuitBreaker)
		case "health_check":
			cfg.HealthCheck, _ = p.healthCheck(e.v, kp, cfg.HealthCheck)
		case "pipeline":
			cfg.Pipeline = p.pipeline(e.v, kp)
		case "policy":
			cfg.Policy = p.policy(e.v, kp)
		case "model":
			cfg.Model = p.model(e, kp)
		case "agent":
			cfg.Agent = p.agent(e, kp, cfg.Agent, &agents)
		case "agents":
			cfg.Agents = p.agents(e.v, kp, &agents)
		}
	}
	seen := map[string]*yaml.Node{}
	for _, e := range entries {
		switch e.key {
		case "servers":
			p.servers(e.v, e.key, false, cfg, seen)
		case "mcpServers":
			p.servers(e.v, e.key, true, cfg, seen)
		}
	}
	if len(gemini) > 0 {
		p.geminiDiscovered(gemini, cfg, seen)
	}
	p.checkAgents(cfg, &agents)
	return cfg
}

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
		if prev, dup := seen[e.key]; dup {
			p.errAt(e.k, sp, "duplicate server name (first defined at line %d)", prev.Line)
			continue
		}
		seen[e.key] = e.k
		switch {
		case strings.TrimSpace(e.key) == "":
			p.errAt(e.k, sp, "a server name must not be empty")
			continue
		case strings.Contains(e.key, "/"):
			p.errAt(e.k, sp, "a server name must not contain \"/\" (patterns use server/tool)")
			continue
		}
		s := p.server(e, sp, common, cfg)
		cfg.Servers = append(cfg.Servers, s)
	}
}

// server reads one server entry in either dialect.
func (p *parser) server(se entry, sp string, common bool, cfg *Config) Server {
	s := Server{Name: se.key, Line: se.k.Line}
	known, ignored := serverKeys, []string(nil)
	if common {
		known, ignored = commonKeys, commonIgnored
	}
	if isNull(deref(se.v)) {
		p.errAt(se.v, sp, "expected a mapping with command or url, got null")
		return s
	}
	entries, ok := p.entries(se.v, sp)
	if !ok {
		return s
	}
	// Disabled is read first because a disabled server may refer to
	// variables that are not set: that is often why it is disabled.
	for _, e := range entries {
		if (e.key == "disabled" || e.key == "enabled") && slices.Contains(known, e.key) {
			if b, ok := p.boolean(e.v, sp+"."+e.key); ok && b == (e.key == "disabled") {
				s.Disabled = true
			}
		}
	}
	lax := s.Disabled
	keyNode := map[string]*yaml.Node{}
	var (
		urlKey, trKey      string
		trVal              string
		trNode             *yaml.Node
		urlOK              bool
		retryE, breakerE   *entry
		passthroughE       *entry
		healthE            *entry
		cmdNode, urlKeyN   *yaml.Node
		urlValue           *yaml.Node
		discNode, callNode *yaml.Node
	)
	for i, e := range entries {
		kp := sp + "." + e.key
		if !slices.Contains(known, e.key) {
			if !slices.Contains(ignored, e.key) {
				p.errAt(e.k, kp, "%s", unknownKeyMsg(e.key, known, ignored))
			}
			continue
		}
		keyNode[e.key] = e.k
		switch e.key {
		case "command":
			cmdNode = e.k
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
			if urlKeyN != nil {
				p.errAt(e.k, kp, "use either url or httpUrl, not both")
				continue
			}
			urlKey, urlKeyN, urlValue = e.key, e.k, e.v
			s.URL, urlOK = p.expandStr(e.v, kp, lax)
		case "transport", "type":
			if trNode != nil {
				p.errAt(e.k, kp, "use either transport or type, not both")
				continue
			}
			if v, ok := p.str(e.v, kp); ok {
				trKey, trVal, trNode = e.key, v, e.v
			}
		case "discover":
			discNode = e.k
			s.Discover = p.argv(e.v, kp, lax, "discover")
		case "call":
			callNode = e.k
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
			if common {
				s.Timeout, _ = p.millis(e.v, kp)
			} else {
				s.Timeout, _ = p.duration(e.v, kp)
			}
		case "tool_timeouts":
			es, _ := p.entries(e.v, kp)
			for _, t := range es {
				if t.key == "" {
					p.errAt(t.k, kp, "a tool name must not be empty")
					continue
				}
				if d, ok := p.duration(t.v, kp+"."+t.key); ok {
					if s.ToolTimeouts == nil {
						s.ToolTimeouts = map[string]time.Duration{}
					}
					s.ToolTimeouts[t.key] = d
				}
			}
		case "connect_timeout":
			s.ConnectTimeout, _ = p.duration(e.v, kp)
		case "trust":
			s.Trust, _ = p.boolean(e.v, kp)
		case "retry":
			retryE = &entries[i]
		case "circuit_breaker":
			breakerE = &entries[i]
		case "passthrough":
			passthroughE = &entries[i]
		case "health_check":
			healthE = &entries[i]
		}
	}

	// A server is of exactly one kind, given by the keys it has: command
	// (stdio), url (sse or http), or discover and call (a command server).
	hasCmd, hasURL, hasDisc := cmdNode != nil, urlKeyN != nil, discNode != nil || callNode != nil
	switch {
	case hasCmd && hasURL:
		p.errAt(urlKeyN, sp+"."+urlKey, "a server has either command (stdio) or %s (sse/http), not both", urlKey)
	case hasDisc && (hasCmd || hasURL):
		other, what := "command", "stdio"
		if !hasCmd {
			other, what = urlKey, "sse/http"
		}
		k, n := "discover", discNode
		if n == nil {
			k, n = "call", callNode
		}
		p.errAt(n, sp+"."+k, "a server has either %s (%s) or discover and call (tools found by a command), not both", other, what)
	case hasDisc && discNode == nil:
		p.errAt(callNode, sp+".call", "needs discover too (the command that lists the tools call runs)")
	case hasDisc && callNode == nil:
		p.errAt(discNode, sp+".discover", "needs call too (the command that runs the tools discover lists)")
	case !hasCmd && !hasURL && !hasDisc && common:
		p.errAt(se.k, sp, "needs command (to start a stdio server) or url (to reach an sse or http server)")
	case !hasCmd && !hasURL && !hasDisc:
		p.errAt(se.k, sp, "needs command (to start a stdio server), url (to reach an sse or http server), or discover and call (to run tools found by a command)")
	}
	if hasURL && urlOK && (s.URL != "" || !lax) {
		if msg := checkURL(s.URL); msg != "" {
			p.errAt(urlValue, sp+"."+urlKey, "%s", msg)
		}
	}
	// has names the key that gives the server its kind, for messages.
	has := "command"
	switch {
	case hasURL && !hasCmd:
		has = urlKey
	case hasDisc && !hasCmd && !hasURL:
		has = "discover"
		if discNode == nil {
			has = "call"
		}
	}
	switch {
	case trNode != nil:
		t, ok := transports[trVal]
		if !ok || t == Command && common {
			expected := "stdio, sse, http, streamable-http, command"
			if common {
				// Other clients have no command servers.
				expected = "stdio, sse, http, streamable-http"
			}
			p.errAt(trNode, sp+"."+trKey, "unknown transport %s (expected one of: %s)", quote(trVal), expected)
			break
		}
		s.Transport = t
		switch {
		case t == Stdio && !hasCmd && (hasURL || hasDisc):
			p.errAt(trNode, sp+"."+trKey, "%s stdio needs command, but this server has %s", trKey, has)
		case (t == SSE || t == HTTP) && !hasURL && (hasCmd || hasDisc):
			p.errAt(trNode, sp+"."+trKey, "%s %s needs url, but this server has %s", trKey, trVal, has)
		case t == Command && !hasDisc && (hasCmd || hasURL):
			p.errAt(trNode, sp+"."+trKey, "%s command needs discover and call, but this server has %s", trKey, has)
		case t == SSE && urlKey == "httpUrl":
			p.errAt(trNode, sp+"."+trKey, "httpUrl is streamable HTTP, but %s says sse (use url for sse)", trKey)
		}
	case hasCmd:
		s.Transport = Stdio
	case urlKey == "httpUrl":
		s.Transport = HTTP
	case hasURL:
		s.Transport = inferTransport(s.URL)
	case hasDisc:
		s.Transport = Command
	}

	// Settings that belong to another kind of server are mistakes (they
	// would be silently ignored), unless they are empty. Only a server of
	// one kind is checked: one with two has been reported already.
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
	switch {
	case hasURL && !hasCmd && !hasDisc:
		for _, k := range []string{"args", "env", "cwd"} {
			if n := keyNode[k]; n != nil && set(k) {
				p.errAt(n, sp+"."+k, "applies only to stdio servers, but this server has %s", urlKey)
			}
		}
	case hasCmd && !hasURL && !hasDisc:
		for _, k := range []string{"headers", "bearer_token"} {
			if n := keyNode[k]; n != nil && set(k) {
				p.errAt(n, sp+"."+k, "applies only to sse and http servers, but this server has command")
			}
		}
	case hasDisc && !hasCmd && !hasURL:
		if n := keyNode["args"]; n != nil && set("args") {
			p.errAt(n, sp+".args", "applies only to stdio servers, but this server has %s (put the arguments in the %s list)", has, has)
		}
		for _, k := range []string{"headers", "bearer_token"} {
			if n := keyNode[k]; n != nil && set(k) {
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

	if retryE != nil {
		r := p.retry(retryE.v, sp+".retry", cfg.Retry, s.Name)
		s.Retry = &r
	}
	if breakerE != nil {
		b := p.breaker(breakerE.v, sp+".circuit_breaker", cfg.CircuitBreaker)
		s.CircuitBreaker = &b
	}
	if passthroughE != nil {
		if hasDisc && !hasCmd && !hasURL {
			p.errAt(passthroughE.k, sp+".passthrough", "applies only to stdio, sse and http servers: a command server has no passthrough route")
		} else {
			pt := p.passthrough(passthroughE.v, sp+".passthrough", cfg.Passthrough)
			s.Passthrough = &pt
		}
	}
	if healthE != nil {
		h, pings := p.healthCheck(healthE.v, sp+".health_check", cfg.HealthCheck)
		s.HealthCheck = &h
		// A command server has no session to ping; only its backoff
		// applies (to retrying a failed discovery).
		if n := pings; n != nil && hasDisc && !hasCmd && !hasURL {
			p.errAt(n, sp+".health_check."+n.Value, "applies only to MCP servers (stdio, sse, http), but this server has %s; only min_backoff and max_backoff apply to it", has)
		}
	}
	return s
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
			if d, ok := p.duration(e.v, fp); ok {
				r.InitialBackoff = d
			}
		case "max_backoff":
			if d, ok := p.duration(e.v, fp); ok {
				r.MaxBackoff = d
			}
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
			if d, ok := p.duration(e.v, fp); ok {
				b.Cooldown = d
			}
		default:
			p.errAt(e.k, fp, "%s", unknownKeyMsg(e.key, breakerKeys, nil))
		}
	}
	return b
}

// maxPassthroughSessions bounds max_sessions: each session may be a
// process, and a typo of an extra digit or two should be caught.
const maxPassthroughSessions = 10_000

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
			if d, ok := p.duration(e.v, fp); ok {
				pt.IdleTimeout = d
			}
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
			if v, ok := p.boolean(e.v, fp); ok {
				h.Enabled = v
			}
		case "ping_after":
			if d, ok := p.duration(e.v, fp); ok {
				h.PingAfter = d
			}
		case "ping_timeout":
			if d, ok := p.duration(e.v, fp); ok {
				h.PingTimeout = d
			}
		case "ping_interval":
			if d, ok := p.duration(e.v, fp); ok {
				h.PingInterval = d
			}
		case "min_backoff":
			if d, ok := p.duration(e.v, fp); ok {
				h.MinBackoff = d
			}
		case "max_backoff":
			if d, ok := p.duration(e.v, fp); ok {
				h.MaxBackoff = d
			}
		}
	})
	if ok && h.MinBackoff > h.MaxBackoff {
		p.errAt(n, kp, "min_backoff (%s) is longer than max_backoff (%s)", h.MinBackoff, h.MaxBackoff)
	}
	return h, pings
}

var taskLogKeys = []string{"enabled", "durability", "retention"}

func (p *parser) taskLog(n *yaml.Node, kp string, base TaskLog) TaskLog {
	t := base
	p.fields(n, kp, taskLogKeys, func(e entry, fp string) {
		switch e.key {
		case "enabled":
			if v, ok := p.boolean(e.v, fp); ok {
				t.Enabled = v
			}
		case "durability":
			if v, ok := p.choice(e.v, fp, "durability", []string{DurabilityProcess, DurabilityFull}); ok {
				t.Durability = v
			}
		case "retention":
			t.Retention = p.retention(e.v, fp, t.Retention)
		}
	})
	return t
}

var retentionKeys = []string{"max_age", "max_bytes"}

// maxRetentionBytes bounds task_log.retention.max_bytes (1 TiB).
const maxRetentionBytes = 1 << 40

func (p *parser) retention(n *yaml.Node, kp string, base Retention) Retention {
	r := base
	p.fields(n, kp, retentionKeys, func(e entry, fp string) {
		switch e.key {
		case "max_age":
			if v, ok := p.age(e.v, fp); ok {
				r.MaxAge = v
			}
		case "max_bytes":
			if v, ok := p.sizeUpTo(e.v, fp, maxRetentionBytes, "1TiB"); ok {
				if v < 1<<20 {
					p.errAt(e.v, fp, "must be at least 1MiB, got %s", shorten(deref(e.v).Value))
				} else {
					r.MaxBytes = v
				}
			}
		}
	})
	return r
}

// age reads a duration that may be given in days too ("30d").
func (p *parser) age(n *yaml.Node, kp string) (time.Duration, bool) {
	v := deref(n)
	if v.Kind == yaml.ScalarNode && v.Tag == "!!str" {
		if days, ok := strings.CutSuffix(strings.TrimSpace(v.Value), "d"); ok {
			d, err := strconv.Atoi(days)
			if err != nil || d < 1 || d > 100*365 {
				p.errAt(n, kp, "%s is not a number of days between 1 and 36500", quote(v.Value))
				return 0, false
			}
			return time.Duration(d) * 24 * time.Hour, true
		}
	}
	return p.duration(n, kp)
}

var limitsKeys = []string{"max_depth", "max_result_bytes", "max_record_bytes", "max_event_bytes"}

// limits reads the limits section. Keys left out stay zero, the defaults
// of the packages that apply them.
func (p *parser) limits(n *yaml.Node, kp string) Limits {
	var l Limits
	p.fields(n, kp, limitsKeys, func(e entry, fp string) {
		switch e.key {
		case "max_depth":
			l.MaxDepth, _ = p.integer(e.v, fp, 1, 1000)
		case "max_result_bytes":
			l.MaxResultBytes, _ = p.size(e.v, fp)
		case "max_record_bytes":
			l.MaxRecordBytes, _ = p.size(e.v, fp)
		case "max_event_bytes":
			l.MaxEventBytes, _ = p.size(e.v, fp)
		}
	})
	return l
}

// ---- Typed values ----

// deref follows an alias to the node it names.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// describe names what a node holds, for "expected X, got Y" messages.
func describe(n *yaml.Node) string {
	switch {
	case n == nil:
		return "nothing"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case isNull(n):
		return "null"
	case n.Tag == "!!str":
		return quote(n.Value)
	case n.Kind == yaml.ScalarNode:
		return shorten(n.Value)
	}
	return "an unsupported value"
}

// quote quotes s for a message, shortened so a hostile file cannot make a
// message huge.
func quote(s string) string {
	return strconv.Quote(shorten(s))
}

func shorten(s string) string {
	if len(s) > 80 {
		if r := []rune(s); len(r) > 60 {
			return string(r[:60]) + "…"
		}
	}
	return s
}

// entries returns the key/value pairs of a mapping, YAML merge keys ("<<")
// applied, reporting non-scalar and duplicate keys. A null value counts as an
// empty mapping; anything else that is not a mapping is reported and gives
// ok == false.
func (p *parser) entries(n *yaml.Node, kp string) (es []entry, ok bool) {
	v := deref(n)
	if isNull(v) {
		return nil, true
	}
	if v.Kind != yaml.MappingNode {
		p.errAt(n, kp, "expected a mapping, got %s", describe(v))
		return nil, false
	}
	return p.mapEntries(v, kp, 0), true
}

func (p *parser) mapEntries(m *yaml.Node, kp string, depth int) []entry {
	if es, ok := p.merged[m]; ok {
		return es
	}
	if depth > 32 {
		p.errAt(m, kp, "merges (<<) nested too deeply")
		return nil
	}
	p.merging[m] = true
	defer delete(p.merging, m)
	var es []entry
	seen := map[string]*yaml.Node{}
	var merges []*yaml.Node
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		kd := deref(k)
		if kd.Kind != yaml.ScalarNode {
			p.errAt(k, kp, "expected a key, got %s", describe(kd))
			continue
		}
		if kd.Tag == "!!merge" {
			merges = append(merges, v)
			continue
		}
		key := kd.Value
		if prev, dup := seen[key]; dup {
			p.errAt(k, join(kp, key), "duplicate key (first at line %d)", prev.Line)
			continue
		}
		seen[key] = k
		es = append(es, entry{key: key, k: k, v: v})
	}
	// Explicit keys win over merged ones, and earlier merged mappings over
	// later ones, as the YAML merge key specifies.
	for _, mv := range merges {
		md := deref(mv)
		var srcs []*yaml.Node
		switch md.Kind {
		case yaml.MappingNode:
			srcs = []*yaml.Node{md}
		case yaml.SequenceNode:
			for _, c := range md.Content {
				if cd := deref(c); cd.Kind == yaml.MappingNode {
					srcs = append(srcs, cd)
				} else {
					p.errAt(c, join(kp, "<<"), "expected a mapping to merge, got %s", describe(cd))
				}
			}
		default:
			p.errAt(mv, join(kp, "<<"), "expected a mapping or a list of mappings to merge, got %s", describe(md))
		}
		for _, src := range srcs {
			if p.merging[src] {
				p.errAt(mv, join(kp, "<<"), "merge refers back to a mapping that contains it")
				continue
			}
			for _, e := range p.mapEntries(src, kp, depth+1) {
				if _, dup := seen[e.key]; !dup {
					seen[e.key] = e.k
					es = append(es, e)
				}
			}
		}
	}
	p.merged[m] = es
	return es
}

func join(kp, key string) string {
	if kp == "" {
		return key
	}
	return kp + "." + key
}

// str reads a string. Other scalars (numbers, booleans) are taken as
// written, so `PORT: 8080` in an env block means "8080".
func (p *parser) str(n *yaml.Node, kp string) (string, bool) {
	v := deref(n)
	if v.Kind != yaml.ScalarNode || isNull(v) {
		p.errAt(n, kp, "expected a string, got %s", describe(v))
		return "", false
	}
	return v.Value, true
}

// expandStr reads a string and expands ${VAR} in it. ok is false when the
// value is unusable; with lax, unset variables are tolerated (and ok is
// false) instead of reported.
func (p *parser) expandStr(n *yaml.Node, kp string, lax bool) (string, bool) {
	s, ok := p.str(n, kp)
	if !ok {
		return "", false
	}
	out, missing, err := expand(s, p.lookup)
	if err != nil {
		p.errAt(n, kp, "%v", err)
		return "", false
	}
	if len(missing) > 0 {
		if !lax {
			for _, name := range missing {
				p.errAt(n, kp, "environment variable %s is not set (use ${%s:-default} to give a default)", name, name)
			}
		}
		return out, false
	}
	return out, true
}

// items returns the elements of a list; null is an empty list.
func (p *parser) items(n *yaml.Node, kp string) []*yaml.Node {
	v := deref(n)
	if isNull(v) {
		return nil
	}
	if v.Kind != yaml.SequenceNode {
		p.errAt(n, kp, "expected a list, got %s", describe(v))
		return nil
	}
	return v.Content
}

func (p *parser) expandList(n *yaml.Node, kp string, lax bool) []string {
	var out []string
	for i, it := range p.items(n, kp) {
		s, _ := p.expandStr(it, fmt.Sprintf("%s[%d]", kp, i), lax)
		out = append(out, s)
	}
	return out
}

// argv reads the argument vector of a command server's discover or call
// command: a non-empty list whose first element, the program, is not
// empty. A string is refused with a hint, because it is not split into
// words: the command runs without a shell.
func (p *parser) argv(n *yaml.Node, kp string, lax bool, key string) []string {
	example := `["./tools.sh", "` + key + `"]`
	if v := deref(n); v.Kind == yaml.ScalarNode && !isNull(v) {
		p.errAt(n, kp, "expected a list of the program and its arguments, such as %s, got %s (it runs without a shell; for a shell line write [\"sh\", \"-c\", \"LINE\"])", example, describe(v))
		return nil
	}
	items := p.items(n, kp)
	if len(items) == 0 {
		if v := deref(n); isNull(v) || v.Kind == yaml.SequenceNode {
			p.errAt(n, kp, "must not be empty (expected the program and its arguments, such as %s)", example)
		}
		return nil
	}
	out := make([]string, 0, len(items))
	for i, it := range items {
		ip := fmt.Sprintf("%s[%d]", kp, i)
		s, ok := p.expandStr(it, ip, lax)
		switch {
		case !ok:
		case strings.ContainsRune(s, 0):
			p.errAt(it, ip, "must not contain a NUL byte")
		case i == 0 && strings.TrimSpace(s) == "":
			p.errAt(it, ip, "the program must not be empty")
		}
		out = append(out, s)
	}
	return out
}

// stringMap reads a mapping of names to expanded strings.
func (p *parser) stringMap(n *yaml.Node, kp string, lax bool, valid func(string) bool, what string) map[string]string {
	es, _ := p.entries(n, kp)
	var out map[string]string
	for _, e := range es {
		fp := kp + "." + e.key
		if !valid(e.key) {
			p.errAt(e.k, fp, "%s is not a valid %s", quote(e.key), strings.TrimPrefix(strings.TrimPrefix(what, "an "), "a "))
			continue
		}
		s, _ := p.expandStr(e.v, fp, lax)
		if out == nil {
			out = map[string]string{}
		}
		out[e.key] = s
	}
	return out
}

func validEnvName(s string) bool {
	return s != "" && !strings.ContainsAny(s, "=\x00")
}

// validHeaderName accepts the token characters of RFC 9110.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

func (p *parser) boolean(n *yaml.Node, kp string) (bool, bool) {
	v := deref(n)
	var b bool
	if v.Kind != yaml.ScalarNode || v.Tag != "!!bool" || v.Decode(&b) != nil {
		p.errAt(n, kp, "expected true or false, got %s", describe(v))
		return false, false
	}
	return b, true
}

func (p *parser) integer(n *yaml.Node, kp string, lo, hi int) (int, bool) {
	v := deref(n)
	var i int
	if v.Kind != yaml.ScalarNode || v.Tag != "!!int" {
		p.errAt(n, kp, "expected an integer, got %s", describe(v))
		return 0, false
	}
	if v.Decode(&i) != nil || i < lo || i > hi {
		p.errAt(n, kp, "must be between %d and %d, got %s", lo, hi, v.Value)
		return 0, false
	}
	return i, true
}

// duration reads a Go duration string. Bare numbers are refused because
// their unit is ambiguous: Gemini CLI means milliseconds, people often mean
// seconds.
func (p *parser) duration(n *yaml.Node, kp string) (time.Duration, bool) {
	v := deref(n)
	if v.Kind != yaml.ScalarNode || isNull(v) {
		p.errAt(n, kp, "expected a duration such as \"30s\", got %s", describe(v))
		return 0, false
	}
	if _, err := strconv.ParseFloat(strings.TrimSpace(v.Value), 64); err == nil || v.Tag == "!!int" || v.Tag == "!!float" {
		p.errAt(n, kp, "%s is not a duration (use a unit, e.g. \"30s\")", quote(v.Value))
		return 0, false
	}
	d, err := time.ParseDuration(v.Value)
	if err != nil {
		p.errAt(n, kp, "%s is not a duration (expected e.g. \"30s\", \"2m\" or \"1h30m\")", quote(v.Value))
		return 0, false
	}
	if d <= 0 {
		p.errAt(n, kp, "must be positive, got %s", quote(v.Value))
		return 0, false
	}
	return d, true
}

// millis reads the integer milliseconds Gemini CLI uses for timeouts.
func (p *parser) millis(n *yaml.Node, kp string) (time.Duration, bool) {
	v := deref(n)
	var ms int64
	if v.Kind != yaml.ScalarNode || v.Tag != "!!int" || v.Decode(&ms) != nil {
		p.errAt(n, kp, "expected milliseconds as an integer, got %s", describe(v))
		return 0, false
	}
	if ms <= 0 || ms > math.MaxInt64/int64(time.Millisecond) {
		p.errAt(n, kp, "must be a positive number of milliseconds, got %s", v.Value)
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

// patterns reads tool globs. global patterns may name a server
// ("server/tool"); per-server ones are bare tool globs.
func (p *parser) patterns(n *yaml.Node, kp string, global bool) []string {
	var out []string
	for i, it := range p.items(n, kp) {
		ip := fmt.Sprintf("%s[%d]", kp, i)
		s, ok := p.str(it, ip)
		if !ok {
			continue
		}
		if msg := checkPattern(s, global); msg != "" {
			p.errAt(it, ip, "%s", msg)
			continue
		}
		out = append(out, s)
	}
	return out
}

// checkPattern checks a tool pattern (toolglob's rule), worded with the
// pattern shortened as config's messages write values.
func checkPattern(s string, global bool) string {
	var e *toolglob.Error
	if err := toolglob.Check(s, global); errors.As(err, &e) {
		return e.Explain(quote)
	}
	return ""
}

// toolNames reads Gemini CLI's includeTools/excludeTools, which list exact
// tool names: they are escaped into globs that match only themselves.
func (p *parser) toolNames(n *yaml.Node, kp string) []string {
	var out []string
	for i, it := range p.items(n, kp) {
		s, ok := p.str(it, fmt.Sprintf("%s[%d]", kp, i))
		if !ok {
			continue
		}
		if s == "" {
			p.errAt(it, fmt.Sprintf("%s[%d]", kp, i), "a tool name must not be empty")
			continue
		}
		out = append(out, toolglob.Escape(s))
	}
	return out
}
