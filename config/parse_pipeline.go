package config

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
	"go.yaml.in/yaml/v3"
)

// Keys of the pipeline section, in the order docs/config.md documents them.
var (
	pipelineKeys        = []string{"order", "repair", "validate", "url_policy", "dedupe", "fallbacks", "truncate", "rollback", "instructions", "redact", "pii"}
	repairKeys          = []string{"schema", "aliases"}
	validateKeys        = []string{"max_argument_bytes"}
	urlPolicyKeys       = []string{"arguments", "default", "rules"}
	urlRuleKeys         = []string{"action", "host", "path", "tools", "message"}
	dedupeKeys          = []string{"policy", "keys", "tools"}
	dedupeToolKeys      = []string{"keys", "policy"}
	fallbackKeys        = []string{"tools", "on", "target", "arguments"}
	truncateKeys        = []string{"max_chars", "tools", "low_context"}
	lowContextKeys      = []string{"enabled", "max_chars", "tools"}
	rollbackKeys        = []string{"rules"}
	rollbackRuleKeys    = []string{"prefix", "is_error", "json_empty", "kinds", "tools", "reason"}
	rollbackConditions  = []string{"prefix", "is_error", "json_empty", "kinds"}
	instructionsKeys    = []string{"tools", "rules"}
	instructionRuleKeys = []string{"tools", "match", "kinds", "text"}
	redactKeys          = []string{"keys", "patterns"}

	middlewares = []string{MiddlewareRecord, MiddlewareInstructions, MiddlewareTruncate, MiddlewareRollback,
		MiddlewareFallback, MiddlewareRepair, MiddlewareValidate, MiddlewareURLPolicy, MiddlewareDedupe, MiddlewarePII}

	// errorKinds are the kinds of failed calls, the strings of tool.Kind
	// (config does not import tool; a test keeps the two in step).
	errorKinds = []string{"tool_not_registered", "server_not_found", "server_unavailable",
		"invalid_tool_params", "policy_violation", "approval_denied", "approval_unavailable", "timeout", "cancelled",
		"tool_error", "execution_failed", "duplicate_query", "path_not_in_workspace",
		"file_not_found", "permission_denied", "output_truncated", "fallback_failed", "outcome_unknown", "tool_changed", "auth_required"}

	urlActions     = []string{"allow", "deny"}
	dedupePolicies = []string{"allow", "warn", "reject"}
)

// Bounds on the pipeline's numbers: far beyond any sensible setting, low
// enough that no arithmetic on them overflows.
const (
	maxPipelineChars = 1_000_000_000
	maxArgumentBytes = 1 << 30
)

// pipeline reads the pipeline section. Keys left out keep their zero values,
// which mean "the defaults"; a null value counts as left out.
func (p *parser) pipeline(n *yaml.Node, kp string) Pipeline {
	var pl Pipeline
	p.fields(n, kp, pipelineKeys, func(e entry, fp string) {
		switch e.key {
		case "order":
			pl.Order = p.order(e.v, fp)
		case "repair":
			pl.Repair = p.repair(e.v, fp)
		case "validate":
			p.fields(e.v, fp, validateKeys, func(f entry, fp string) {
				pl.Validate.MaxArgumentBytes, _ = p.size(f.v, fp)
			})
		case "url_policy":
			pl.URLPolicy = p.urlPolicy(e.v, fp)
		case "dedupe":
			pl.Dedupe = p.dedupe(e.v, fp)
		case "fallbacks":
			for i, it := range p.items(e.v, fp) {
				pl.Fallbacks = append(pl.Fallbacks, p.fallback(it, fmt.Sprintf("%s[%d]", fp, i)))
			}
		case "truncate":
			pl.Truncate = p.truncate(e.v, fp)
		case "rollback":
			p.fields(e.v, fp, rollbackKeys, func(f entry, fp string) {
				if items, ok := p.list(f.v, fp); ok {
					pl.Rollback.Rules = make([]RollbackRule, 0, len(items))
					for i, it := range items {
						pl.Rollback.Rules = append(pl.Rollback.Rules, p.rollbackRule(it, fmt.Sprintf("%s[%d]", fp, i)))
					}
				}
			})
		case "instructions":
			pl.Instructions = p.instructions(e.v, fp)
		case "redact":
			pl.Redact = p.redact(e.v, fp)
		case "pii":
			pl.PII = p.pii(e.v, fp)
		}
	})
	return pl
}

// fields walks a mapping whose keys must be among known, calling f with
// each known entry and its key path. ok is false when n is not a mapping
// (null is an empty one).
func (p *parser) fields(n *yaml.Node, kp string, known []string, f func(e entry, fp string)) bool {
	es, ok := p.entries(n, kp)
	for _, e := range es {
		fp := join(kp, e.key)
		if !slices.Contains(known, e.key) {
			p.errAt(e.k, fp, "%s", unknownKeyMsg(e.key, known, nil))
			continue
		}
		f(e, fp)
	}
	return ok
}

// element reads one element of a list of mappings (a rule, a fallback),
// with the keys in known; unlike fields, null is an error, since an empty
// element is always a slip. ok is false when the element is not a mapping.
func (p *parser) element(n *yaml.Node, kp string, known []string, f func(e entry, fp string)) bool {
	if v := deref(n); isNull(v) {
		p.errAt(n, kp, "expected a mapping, got null")
		return false
	}
	return p.fields(n, kp, known, f)
}

// list returns the elements of a list whose absence means "the defaults":
// ok is false for null (as if the key were left out) and for a value that
// is not a list (reported), so that an explicit [] can be told apart.
func (p *parser) list(n *yaml.Node, kp string) (items []*yaml.Node, ok bool) {
	v := deref(n)
	if isNull(v) {
		return nil, false
	}
	if v.Kind != yaml.SequenceNode {
		p.errAt(n, kp, "expected a list, got %s", describe(v))
		return nil, false
	}
	return v.Content, true
}

// strList reads a list of expanded strings, each checked by check (which
// returns a message, "" for a good value). The result is nil for null and
// non-nil for a list, even an empty one, so callers can tell "left out"
// (the defaults) from "none".
func (p *parser) strList(n *yaml.Node, kp string, check func(string) string) []string {
	items, ok := p.list(n, kp)
	if !ok {
		return nil
	}
	out := make([]string, 0, len(items))
	for i, it := range items {
		ip := fmt.Sprintf("%s[%d]", kp, i)
		s, ok := p.expandStr(it, ip, false)
		if !ok {
			continue
		}
		if check != nil {
			if msg := check(s); msg != "" {
				p.errAt(it, ip, "%s", msg)
				continue
			}
		}
		out = append(out, s)
	}
	return out
}

// nonEmptyStrings is strList for lists that must have at least one
// element when given.
func (p *parser) nonEmptyStrings(n *yaml.Node, kp string, check func(string) string) []string {
	out := p.strList(n, kp, check)
	if v := deref(n); v.Kind == yaml.SequenceNode && len(v.Content) == 0 {
		p.errAt(n, kp, "must not be empty")
	}
	return out
}

// text reads an expanded string that must not be empty.
func (p *parser) text(n *yaml.Node, kp string) (string, bool) {
	s, ok := p.expandStr(n, kp, false)
	if ok && s == "" {
		p.errAt(n, kp, "must not be empty")
		return "", false
	}
	return s, ok
}

// choice reads one of a few words, such as a policy.
func (p *parser) choice(n *yaml.Node, kp, what string, options []string) (string, bool) {
	s, ok := p.expandStr(n, kp, false)
	if !ok {
		return "", false
	}
	if msg := oneOf(what, options)(s); msg != "" {
		p.errAt(n, kp, "%s", msg)
		return "", false
	}
	return s, true
}

// oneOf checks that a word is among options, suggesting the nearest: a
// check for strList, and choice's.
func oneOf(what string, options []string) func(string) string {
	return func(s string) string {
		if slices.Contains(options, s) {
			return ""
		}
		msg := fmt.Sprintf("unknown %s %s (expected %s)", what, quote(s), orList(options))
		if sug := suggest(s, options); sug != "" {
			msg += "; did you mean " + sug + "?"
		}
		return msg
	}
}

// orList joins words as "a, b or c".
func orList(ws []string) string {
	if len(ws) < 2 {
		return strings.Join(ws, "")
	}
	return strings.Join(ws[:len(ws)-1], ", ") + " or " + ws[len(ws)-1]
}

// checkToolPattern checks a pattern in the syntax of the global allow list.
func checkToolPattern(s string) string { return checkPattern(s, true) }

// checkName checks an argument or key name.
func checkName(s string) string {
	if s == "" {
		return "must not be empty"
	}
	return ""
}

// checkKind checks an error kind, suggesting the nearest known one.
func checkKind(s string) string {
	if slices.Contains(errorKinds, s) {
		return ""
	}
	msg := fmt.Sprintf("unknown error kind %s (expected one of: %s)", quote(s), strings.Join(errorKinds, ", "))
	if sug := suggest(s, errorKinds); sug != "" {
		msg += "; did you mean " + sug + "?"
	}
	return msg
}

// checkRegexp checks a regular expression in Go's syntax.
func checkRegexp(s string) string {
	if s == "" {
		return "must not be empty"
	}
	if _, err := regexp.Compile(s); err != nil {
		return fmt.Sprintf("%s is not a valid regular expression: %s", quote(s), strings.TrimPrefix(err.Error(), "error parsing regexp: "))
	}
	return ""
}

// patternEntries walks an ordered mapping from tool pattern to value,
// reporting bad patterns and calling f for the good ones, in file order.
func (p *parser) patternEntries(n *yaml.Node, kp string, f func(e entry, fp string)) {
	es, _ := p.entries(n, kp)
	for _, e := range es {
		fp := join(kp, e.key)
		if msg := checkToolPattern(e.key); msg != "" {
			p.errAt(e.k, fp, "%s", msg)
			continue
		}
		f(e, fp)
	}
}

// checkedText reads e's value as text and holds it to check (nil: no
// check); a value refused is reported at its position.
func (p *parser) checkedText(e entry, fp string, check func(k, v string) string) (string, bool) {
	s, ok := p.text(e.v, fp)
	if !ok {
		return "", false
	}
	if check != nil {
		if msg := check(e.key, s); msg != "" {
			p.errAt(e.v, fp, "%s", msg)
			return "", false
		}
	}
	return s, true
}

// names reads a mapping of names to names (argument aliases and mappings),
// neither side empty. An explicit {} gives an empty, non-nil map; null
// gives nil.
func (p *parser) names(n *yaml.Node, kp string, check func(k, v string) string) map[string]string {
	es, ok := p.entries(n, kp)
	if !ok || isNull(deref(n)) {
		return nil
	}
	out := make(map[string]string, len(es))
	for _, e := range es {
		fp := join(kp, e.key)
		if e.key == "" {
			p.errAt(e.k, fp, "an argument name must not be empty")
			continue
		}
		if s, ok := p.checkedText(e, fp, check); ok {
			out[e.key] = s
		}
	}
	return out
}

func (p *parser) order(n *yaml.Node, kp string) []string {
	items, ok := p.list(n, kp)
	if !ok {
		return nil
	}
	out := make([]string, 0, len(items))
	first := map[string]int{}
	for i, it := range items {
		ip := fmt.Sprintf("%s[%d]", kp, i)
		s, ok := p.expandStr(it, ip, false)
		if !ok {
			continue
		}
		if !slices.Contains(middlewares, s) {
			msg := fmt.Sprintf("unknown middleware %s (expected one of: %s)", quote(s), strings.Join(middlewares, ", "))
			if sug := suggest(s, middlewares); sug != "" {
				msg += "; did you mean " + sug + "?"
			}
			p.errAt(it, ip, "%s", msg)
			continue
		}
		if j, dup := first[s]; dup {
			p.errAt(it, ip, "%s is listed twice (first as %s[%d])", s, kp, j)
			continue
		}
		first[s] = i
		out = append(out, s)
	}
	return out
}

func (p *parser) repair(n *yaml.Node, kp string) Repair {
	var r Repair
	p.fields(n, kp, repairKeys, func(e entry, fp string) {
		switch e.key {
		case "schema":
			if b, ok := p.boolean(e.v, fp); ok {
				r.NoSchema = !b
			}
		case "aliases":
			p.patternEntries(e.v, fp, func(a entry, ap string) {
				m := p.names(a.v, ap, func(wrong, right string) string {
					if wrong == right {
						return fmt.Sprintf("renames %s to itself", quote(wrong))
					}
					return ""
				})
				r.Aliases = append(r.Aliases, Aliases{Tools: a.key, Map: m})
			})
		}
	})
	return r
}

func (p *parser) urlPolicy(n *yaml.Node, kp string) URLPolicy {
	var u URLPolicy
	p.fields(n, kp, urlPolicyKeys, func(e entry, fp string) {
		switch e.key {
		case "arguments":
			u.Arguments = p.strList(e.v, fp, checkName)
		case "default":
			u.Default, _ = p.choice(e.v, fp, "action", urlActions)
		case "rules":
			for i, it := range p.items(e.v, fp) {
				u.Rules = append(u.Rules, p.urlRule(it, fmt.Sprintf("%s[%d]", fp, i)))
			}
		}
	})
	return u
}

func (p *parser) urlRule(n *yaml.Node, kp string) URLRule {
	var r URLRule
	hasAction := false
	ok := p.element(n, kp, urlRuleKeys, func(e entry, fp string) {
		switch e.key {
		case "action":
			hasAction = true
			r.Action, _ = p.choice(e.v, fp, "action", urlActions)
		case "host":
			if s, ok := p.expandStr(e.v, fp, false); ok {
				if msg := checkHostGlob(s); msg != "" {
					p.errAt(e.v, fp, "%s", msg)
				} else {
					r.Host = strings.ToLower(s)
				}
			}
		case "path":
			if s, ok := p.expandStr(e.v, fp, false); ok {
				if msg := checkPathGlob(s); msg != "" {
					p.errAt(e.v, fp, "%s", msg)
				} else {
					r.Path = s
				}
			}
		case "tools":
			r.Tools = p.strList(e.v, fp, checkToolPattern)
		case "message":
			r.Message, _ = p.expandStr(e.v, fp, false)
		}
	})
	if ok && !hasAction {
		p.errAt(n, kp, "missing action (allow or deny)")
	}
	return r
}

// checkHostGlob checks a URL rule's host: a path.Match glob on a host
// name, not a URL.
func checkHostGlob(s string) string {
	if strings.Contains(s, "/") {
		return fmt.Sprintf("%s: expected a host name or host glob such as \"*.example.com\", not a URL (put the path in path)", quote(s))
	}
	if _, err := path.Match(s, ""); err != nil {
		return fmt.Sprintf("%s is not a valid glob: %v (see path.Match)", quote(s), err)
	}
	return ""
}

// checkPathGlob checks a URL rule's path: a doublestar glob on a URL path,
// which starts with "/", so the glob must start with "/" or "*".
func checkPathGlob(s string) string {
	if !doublestar.ValidatePattern(s) {
		return fmt.Sprintf("%s is not a valid glob (\"*\" matches within a segment, \"**\" across \"/\")", quote(s))
	}
	if s != "" && s[0] != '/' && s[0] != '*' {
		return fmt.Sprintf("%s: URL paths start with \"/\", so a path glob starts with \"/\" or \"*\" (write %s)", quote(s), quote("/"+s))
	}
	return ""
}

func (p *parser) dedupe(n *yaml.Node, kp string) Dedupe {
	var d Dedupe
	p.fields(n, kp, dedupeKeys, func(e entry, fp string) {
		switch e.key {
		case "policy":
			d.Policy, _ = p.choice(e.v, fp, "policy", dedupePolicies)
		case "keys":
			d.Keys = p.strList(e.v, fp, checkName)
		case "tools":
			p.patternEntries(e.v, fp, func(t entry, tp string) {
				dt := DedupeTool{Tools: t.key}
				p.fields(t.v, tp, dedupeToolKeys, func(f entry, fp string) {
					switch f.key {
					case "keys":
						dt.Keys = p.strList(f.v, fp, checkName)
					case "policy":
						dt.Policy, _ = p.choice(f.v, fp, "policy", dedupePolicies)
					}
				})
				d.Tools = append(d.Tools, dt)
			})
		}
	})
	return d
}

func (p *parser) fallback(n *yaml.Node, kp string) Fallback {
	var f Fallback
	seen := map[string]bool{}
	ok := p.element(n, kp, fallbackKeys, func(e entry, fp string) {
		seen[e.key] = true
		switch e.key {
		case "tools":
			f.Tools = p.nonEmptyStrings(e.v, fp, checkToolPattern)
		case "on":
			f.On = p.nonEmptyStrings(e.v, fp, checkKind)
		case "target":
			if s, ok := p.text(e.v, fp); ok {
				if msg := checkTarget(s); msg != "" {
					p.errAt(e.v, fp, "%s", msg)
				} else {
					f.Target = s
				}
			}
		case "arguments":
			f.Arguments = p.names(e.v, fp, nil)
		}
	})
	if ok {
		for _, req := range []struct{ key, what string }{
			{"tools", "the patterns of the tools it applies to"},
			{"on", "the error kinds that trigger it, such as timeout"},
			{"target", `the tool to call instead, as "server/tool"`},
		} {
			if !seen[req.key] {
				p.errAt(n, kp, "missing %s (%s)", req.key, req.what)
			}
		}
	}
	return f
}

// checkTarget checks a fallback target: exactly one tool, "server/tool".
func checkTarget(s string) string {
	srv, tl, ok := strings.Cut(s, "/")
	if !ok || srv == "" || tl == "" || strings.Contains(tl, "/") {
		return fmt.Sprintf("%s: expected one tool as \"server/tool\", such as \"builtin/web_fetch\"", quote(s))
	}
	if strings.ContainsAny(s, `*?[\`) {
		return fmt.Sprintf("%s: expected one tool as \"server/tool\", not a pattern", quote(s))
	}
	return ""
}

func (p *parser) truncate(n *yaml.Node, kp string) Truncate {
	var t Truncate
	p.fields(n, kp, truncateKeys, func(e entry, fp string) {
		switch e.key {
		case "max_chars":
			t.MaxChars, _ = p.integer(e.v, fp, 1, maxPipelineChars)
		case "tools":
			t.Tools = p.toolLimits(e.v, fp)
		case "low_context":
			p.fields(e.v, fp, lowContextKeys, func(f entry, fp string) {
				switch f.key {
				case "enabled":
					t.LowContext.Enabled, _ = p.boolean(f.v, fp)
				case "max_chars":
					t.LowContext.MaxChars, _ = p.integer(f.v, fp, 1, maxPipelineChars)
				case "tools":
					t.LowContext.Tools = p.toolLimits(f.v, fp)
				}
			})
		}
	})
	return t
}

func (p *parser) toolLimits(n *yaml.Node, kp string) []ToolLimit {
	var out []ToolLimit
	p.patternEntries(n, kp, func(e entry, fp string) {
		if v, ok := p.integer(e.v, fp, 1, maxPipelineChars); ok {
			out = append(out, ToolLimit{Tools: e.key, MaxChars: v})
		}
	})
	return out
}

func (p *parser) rollbackRule(n *yaml.Node, kp string) RollbackRule {
	var r RollbackRule
	var cond *entry
	ok := p.element(n, kp, rollbackRuleKeys, func(e entry, fp string) {
		if slices.Contains(rollbackConditions, e.key) {
			if cond != nil {
				p.errAt(e.k, kp, "has both %s and %s, but a rule has exactly one condition (prefix, is_error, json_empty or kinds); split it into two rules", cond.key, e.key)
			} else {
				cond = &e
			}
		}
		switch e.key {
		case "prefix":
			r.Prefix, _ = p.text(e.v, fp)
		case "is_error":
			if b, ok := p.boolean(e.v, fp); ok {
				if !b {
					p.errAt(e.v, fp, "must be true (to match results that are not errors, use another condition)")
				}
				r.IsError = b
			}
		case "json_empty":
			if s, ok := p.text(e.v, fp); ok {
				if slices.Contains(strings.Split(s, "."), "") {
					p.errAt(e.v, fp, "%s is not a dotted path (expected keys joined by \".\", such as \"data.items\")", quote(s))
				} else {
					r.JSONEmpty = s
				}
			}
		case "kinds":
			r.Kinds = p.nonEmptyStrings(e.v, fp, checkKind)
		case "tools":
			r.Tools = p.strList(e.v, fp, checkToolPattern)
		case "reason":
			r.Reason, _ = p.expandStr(e.v, fp, false)
		}
	})
	if ok && cond == nil {
		p.errAt(n, kp, "needs a condition: one of prefix, is_error, json_empty or kinds")
	}
	return r
}

func (p *parser) instructions(n *yaml.Node, kp string) Instructions {
	var in Instructions
	p.fields(n, kp, instructionsKeys, func(e entry, fp string) {
		switch e.key {
		case "tools":
			p.patternEntries(e.v, fp, func(t entry, tp string) {
				if s, ok := p.text(t.v, tp); ok {
					in.Tools = append(in.Tools, ToolText{Tools: t.key, Text: s})
				}
			})
		case "rules":
			for i, it := range p.items(e.v, fp) {
				in.Rules = append(in.Rules, p.instructionRule(it, fmt.Sprintf("%s[%d]", fp, i)))
			}
		}
	})
	return in
}

func (p *parser) instructionRule(n *yaml.Node, kp string) InstructionRule {
	var r InstructionRule
	seen := map[string]bool{}
	ok := p.element(n, kp, instructionRuleKeys, func(e entry, fp string) {
		seen[e.key] = true
		switch e.key {
		case "tools":
			r.Tools = p.strList(e.v, fp, checkToolPattern)
		case "match":
			if s, ok := p.expandStr(e.v, fp, false); ok {
				if msg := checkRegexp(s); msg != "" {
					p.errAt(e.v, fp, "%s", msg)
				} else {
					r.Match = s
				}
			}
		case "kinds":
			r.Kinds = p.nonEmptyStrings(e.v, fp, checkKind)
		case "text":
			r.Text, _ = p.text(e.v, fp)
		}
	})
	if ok {
		if !seen["match"] && !seen["kinds"] {
			p.errAt(n, kp, "needs match (a regular expression on the result text) or kinds (error kinds), or both")
		}
		if !seen["text"] {
			p.errAt(n, kp, "missing text (the instruction to attach)")
		}
	}
	return r
}

func (p *parser) redact(n *yaml.Node, kp string) Redact {
	var r Redact
	p.fields(n, kp, redactKeys, func(e entry, fp string) {
		switch e.key {
		case "keys":
			r.Keys = p.strList(e.v, fp, func(s string) string {
				if strings.Trim(s, "-_") == "" {
					return fmt.Sprintf("%s is not a key name", quote(s))
				}
				return ""
			})
		case "patterns":
			r.Patterns = p.strList(e.v, fp, func(s string) string {
				if msg := checkRegexp(s); msg != "" {
					return msg
				}
				if regexp.MustCompile(s).MatchString("") {
					return fmt.Sprintf("%s matches the empty string, so it would mask between every character", quote(s))
				}
				return ""
			})
		}
	})
	return r
}

var sizeRE = regexp.MustCompile(`^([0-9]+)\s*([A-Za-z]*)$`)

// sizeUnits are the accepted units, matched ignoring case: "iB" units are
// binary, the others decimal.
var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"kb": 1000, "kib": 1 << 10,
	"mb": 1000 * 1000, "mib": 1 << 20,
	"gb": 1000 * 1000 * 1000, "gib": 1 << 30,
	"tb": 1000 * 1000 * 1000 * 1000, "tib": 1 << 40,
}

// size reads a byte count: an integer, or a string such as "512KiB" or
// "2MB".
func (p *parser) size(n *yaml.Node, kp string) (int64, bool) {
	return p.sizeUpTo(n, kp, maxArgumentBytes, "1GiB")
}

// sizeUpTo reads a byte count of at most limit (named as limitName).
func (p *parser) sizeUpTo(n *yaml.Node, kp string, limit int64, limitName string) (int64, bool) {
	v := deref(n)
	const want = `expected a size in bytes such as 1048576 or "1MiB"`
	if v.Kind == yaml.ScalarNode && v.Tag == "!!float" && v.Value != "" && strings.Trim(v.Value, "0123456789") == "" {
		// An integer too large for int64, which YAML resolves as a float.
		p.errAt(n, kp, "must be between 1 byte and %s, got %s", limitName, shorten(v.Value))
		return 0, false
	}
	if v.Kind != yaml.ScalarNode || isNull(v) || v.Tag != "!!int" && v.Tag != "!!str" {
		p.errAt(n, kp, "%s, got %s", want, describe(v))
		return 0, false
	}
	var b int64
	if v.Tag == "!!int" {
		if v.Decode(&b) != nil {
			b = -1
		}
	} else {
		m := sizeRE.FindStringSubmatch(strings.TrimSpace(v.Value))
		unit, known := int64(0), false
		if m != nil {
			unit, known = sizeUnits[strings.ToLower(m[2])]
		}
		if !known {
			p.errAt(n, kp, "%s is not a size (%s; units: KiB, MiB, GiB, KB, MB, GB)", quote(v.Value), want)
			return 0, false
		}
		x, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil || x > limit/unit {
			b = limit + 1
		} else {
			b = x * unit
		}
	}
	if b < 1 || b > limit {
		p.errAt(n, kp, "must be between 1 byte and %s, got %s", limitName, shorten(v.Value))
		return 0, false
	}
	return b, true
}
