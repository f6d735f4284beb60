package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The configuration is decoded into a yaml.Node tree and walked key by key,
// rather than unmarshalled into tagged structs, so that every message can
// speak of keys, lines and columns instead of Go types, and so that all
// problems are collected instead of stopping at the first.
//
// This file decodes a document (JSON or YAML) and walks its top level;
// parse_server.go reads servers in both dialects (toolmux's servers and
// the mcpServers of Claude Desktop, Cursor and Gemini CLI, with Gemini
// CLI's discovered tools), parse_values.go the typed values every section
// is made of, and parse_SECTION.go each of the larger sections.

// Keys of a toolmux.yaml, in the order the reference documents them; the
// order is also the order "expected one of" lists them in.
var topKeys = []string{"workspace", "data_dir", "builtin", "connect_timeout", "timeout",
	"allow", "deny", "retry", "circuit_breaker", "health_check", "servers", "mcpServers", "openapi", "pipeline", "policy", "task_log",
	"pinning", "limits", "model", "agent", "agents", "passthrough", "reissue", "subscriptions", "tool_search", "code_mode", "virtual_servers", "telemetry", "mcp_tasks", "rate_limits", "auth", "groups", "vault", "upstream_oauth", "hooks", "guardrails"}

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

	// pinServers are the entries of pinning.servers, checked against the
	// servers once those are read.
	pinServers []entry
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
	forceJSON, looksJSON := jsonByName(p.file), looksLikeJSON(data)
	if forceJSON || looksJSON {
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
	// A file with only mcpServers is another client's configuration: in
	// JSON (Gemini CLI's settings.json) the rest of the file belongs to that
	// client, and its directory says nothing about which files the built-in
	// tools should see, so the workspace stays the current directory.
	common := otherClients(entries, isJSON)
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
		if lenient && slices.Contains(sharedKeys, e.key) {
			continue // the other client's
		}
		if !slices.Contains(topKeys, e.key) {
			if !lenient {
				p.errAt(e.k, kp, "%s", unknownKeyMsg(e.key, topKeys, nil))
			}
			continue
		}
		p.topLevel(e, cfg, &agents)
	}
	seen := map[string]*yaml.Node{}
	emptied := false // a servers mapping written as {}
	for _, e := range entries {
		switch e.key {
		case "servers":
			p.servers(e.v, e.key, false, cfg, seen)
		case "mcpServers":
			p.servers(e.v, e.key, true, cfg, seen)
		default:
			continue
		}
		emptied = emptied || deref(e.v).Kind == yaml.MappingNode
	}
	if len(gemini) > 0 {
		p.geminiDiscovered(gemini, cfg, seen)
	}
	// APIs after every server, so a name clash is reported on the API.
	for _, e := range entries {
		if e.key == "openapi" {
			p.openapi(e.v, e.key, cfg, seen)
		}
	}
	cfg.NoServers = emptied && len(cfg.Servers) == 0
	p.checkAgents(cfg, &agents)
	p.checkPinning(cfg)
	return cfg
}

// otherClients reports whether the top-level keys are those of another
// client's file: mcpServers (or, in JSON, Gemini CLI's command-discovered
// tools) and no key of toolmux's own.
// sharedKeys are top-level keys of toolmux's that another client's JSON
// settings use too, for settings of their own (Gemini CLI's telemetry).
var sharedKeys = []string{"telemetry"}

func otherClients(entries []entry, isJSON bool) bool {
	hasToolmux, hasMCP := false, false
	for _, e := range entries {
		switch {
		case e.key == "mcpServers":
			hasMCP = true
		case isJSON && slices.Contains(geminiKeys, e.key):
			// A settings.json may declare command-discovered tools and no
			// MCP server at all; it is still Gemini CLI's file.
			hasMCP = true
		case isJSON && slices.Contains(sharedKeys, e.key):
			// Gemini CLI's settings.json has a telemetry section of its
			// own: it says nothing about whose file this is.
		case slices.Contains(topKeys, e.key):
			hasToolmux = true
		}
	}
	return hasMCP && !hasToolmux
}

// topLevel reads one top-level key of toolmux's own; the servers are read
// after every other key (see config).
func (p *parser) topLevel(e entry, cfg *Config, agents *agentDecls) {
	kp := e.key
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
	case "pinning":
		cfg.Pinning = p.pinning(e.v, kp)
	case "telemetry":
		cfg.Telemetry = p.telemetry(e.v, kp)
	case "passthrough":
		cfg.Passthrough = p.passthrough(e.v, kp, cfg.Passthrough)
	case "reissue":
		cfg.Reissue = p.reissue(e.v, kp)
	case "hooks":
		cfg.Hooks = p.hooks(e.v, kp)
	case "guardrails":
		cfg.Guardrails = p.guardrails(e.v, kp)
	case "subscriptions":
		cfg.Subscriptions = p.subscriptions(e.v, kp)
	case "auth":
		cfg.Auth = p.auth(e.v, kp)
	case "tool_search":
		cfg.ToolSearch = p.toolSearch(e.v, kp)
	case "code_mode":
		cfg.CodeMode = p.codeMode(e.v, kp)
	case "virtual_servers":
		cfg.VirtualServers = p.virtualServers(e.v, kp)
	case "mcp_tasks":
		cfg.MCPTasks = p.mcpTasks(e.v, kp)
	case "rate_limits":
		cfg.RateLimits = p.rateLimits(e.v, kp)
	case "limits":
		cfg.Limits = p.limits(e.v, kp)
	case "vault":
		cfg.Vault = p.vault(e.v, kp)
	case "upstream_oauth":
		cfg.UpstreamOAuth = p.upstreamOAuth(e.v, kp)
	case "connect_timeout":
		p.setDuration(&cfg.ConnectTimeout, e.v, kp)
	case "timeout":
		p.setDuration(&cfg.Timeout, e.v, kp)
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
	case "groups":
		cfg.Groups = p.groups(e.v, kp)
	case "model":
		cfg.Model = p.model(e, kp)
	case "agent":
		cfg.Agent = p.agent(e, kp, cfg.Agent, agents)
	case "agents":
		cfg.Agents = p.agents(e.v, kp, agents)
	}
}

var (
	pinningKeys     = []string{"policy", "servers"}
	pinningPolicies = []string{PinHold, PinAsk, PinWarn, PinOff}
)

// pinning reads the `pinning:` section; the servers it names are checked
// against the configured ones once those are read (checkPinning).
func (p *parser) pinning(n *yaml.Node, kp string) Pinning {
	var pn Pinning
	p.fields(n, kp, pinningKeys, func(e entry, fp string) {
		switch e.key {
		case "policy":
			pn.Policy, _ = p.choice(e.v, fp, "policy", pinningPolicies)
		case "servers":
			es, _ := p.entries(e.v, fp)
			for _, s := range es {
				sp := join(fp, s.key)
				if v, ok := p.choice(s.v, sp, "policy", pinningPolicies); ok {
					if pn.Servers == nil {
						pn.Servers = map[string]string{}
					}
					pn.Servers[s.key] = v
					p.pinServers = append(p.pinServers, s)
				}
			}
		}
	})
	return pn
}

// checkPinning reports pinning.servers entries that name no configured
// server: a misspelt name would leave that server under the default.
func (p *parser) checkPinning(cfg *Config) {
	names := make([]string, 0, len(cfg.Servers))
	for _, s := range cfg.Servers {
		names = append(names, s.Name)
	}
	for _, a := range cfg.OpenAPI {
		names = append(names, a.Name)
	}
	for _, e := range p.pinServers {
		if slices.Contains(names, e.key) {
			continue
		}
		msg := fmt.Sprintf("no server named %s is configured", quote(e.key))
		if sug := suggest(e.key, names); sug != "" {
			msg += "; did you mean " + sug + "?"
		}
		p.errAt(e.k, join("pinning.servers", e.key), "%s", msg)
	}
}

var telemetryKeys = []string{"enabled", "endpoint", "protocol", "service_name", "headers"}

func (p *parser) telemetry(n *yaml.Node, kp string) Telemetry {
	var t Telemetry
	p.fields(n, kp, telemetryKeys, func(e entry, fp string) {
		switch e.key {
		case "enabled":
			t.Enabled, _ = p.boolean(e.v, fp)
		case "endpoint":
			if s, ok := p.expandStr(e.v, fp, false); ok {
				if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					p.errAt(e.v, fp, "%s is not an http or https URL", quote(s))
				} else {
					t.Endpoint = s
				}
			}
		case "protocol":
			t.Protocol, _ = p.choice(e.v, fp, "protocol", []string{TelemetryHTTP, TelemetryGRPC})
		case "service_name":
			t.ServiceName, _ = p.expandStr(e.v, fp, false)
		case "headers":
			t.Headers = p.stringMap(e.v, fp, false, validHeaderName, "a header name")
		}
	})
	return t
}

var taskLogKeys = []string{"enabled", "durability", "retention"}

func (p *parser) taskLog(n *yaml.Node, kp string, base TaskLog) TaskLog {
	t := base
	p.fields(n, kp, taskLogKeys, func(e entry, fp string) {
		switch e.key {
		case "enabled":
			p.setBool(&t.Enabled, e.v, fp)
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
