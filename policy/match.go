package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/jsonfloat"
	"github.com/toolmux/toolmux/internal/toolglob"
)

// compiled is a rule ready for matching: patterns parsed, regular
// expressions compiled, the mode conditions reduced to flags.
type compiled struct {
	rule      Rule
	name      string
	tools     []toolglob.Pattern
	server    string
	args      []argMatcher // sorted by name, so matching order is stable
	readOnly  *bool
	destr     *bool
	callers   []string // globs over the caller's name or subject
	groups    []string
	modes     []Mode
	action    Action
	priority  int
	message   string
	isDefault bool
	// readOnlyOnly is set in plan mode for allow and ask rules that do not
	// name plan: they match read-only tools only, because a rule written
	// for the other modes must not open plan mode up.
	readOnlyOnly bool
}

type argMatcher struct {
	name string
	re   *regexp.Regexp
}

// compile checks and compiles r, the index-th rule (0 for default rules);
// errs is nil when the rule is valid.
func compile(r Rule, index int) (c compiled, errs []*RuleError) {
	bad := func(field, format string, args ...any) {
		errs = append(errs, &RuleError{Index: index, Rule: r.Name, Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	c = compiled{rule: r, name: r.Name, server: r.Server, readOnly: r.ReadOnly, destr: r.Destructive,
		callers: r.Callers, groups: r.Groups, modes: r.Modes, action: r.Action, priority: r.Priority, message: r.Message}
	for i, s := range r.Tools {
		var pe *toolglob.Error
		if err := toolglob.Check(s, true); errors.As(err, &pe) {
			// As config checks it, so that rules built in code are held
			// to the same rule as rules in a file.
			bad(fmt.Sprintf("tools[%d]", i), "%s", pe.Explain(strconv.Quote))
			continue
		}
		p, err := toolglob.Parse(s, true)
		if err != nil {
			bad(fmt.Sprintf("tools[%d]", i), "%v", err)
			continue
		}
		c.tools = append(c.tools, p)
	}
	if r.Server != "" {
		var pe *toolglob.Error
		if err := toolglob.CheckServer(r.Server); errors.As(err, &pe) {
			bad("server", "%s", pe.Explain(strconv.Quote))
		}
	}
	names := make([]string, 0, len(r.Args))
	for k := range r.Args {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if k == "" {
			bad("args", "an argument name must not be empty")
			continue
		}
		expr := r.Args[k]
		if expr == "" {
			bad("args."+k, "must not be empty (use \".*\" to match any value of a present argument)")
			continue
		}
		re, err := regexp.Compile(expr)
		if err != nil {
			bad("args."+k, "%q is not a valid regular expression: %s", expr, strings.TrimPrefix(err.Error(), "error parsing regexp: "))
			continue
		}
		c.args = append(c.args, argMatcher{name: k, re: re})
	}
	for i, p := range r.Callers {
		if msg := checkCallerPattern(p); msg != "" {
			bad(fmt.Sprintf("callers[%d]", i), "%s", msg)
		}
	}
	for i, g := range r.Groups {
		if g == "" {
			bad(fmt.Sprintf("groups[%d]", i), "a group name must not be empty")
		}
	}
	for i, m := range r.Modes {
		if _, err := ParseMode(string(m)); err != nil || m == "" {
			bad(fmt.Sprintf("modes[%d]", i), "unknown mode %q (expected plan, default, auto_edit or yolo)", m)
		}
	}
	switch {
	case r.Action == "":
		bad("action", "missing (expected allow, deny or ask)")
	case !parseAction(r.Action):
		bad("action", "unknown action %q (expected allow, deny or ask)", r.Action)
	}
	return c, errs
}

// applies reports whether the rule takes part in mode, and prepares its
// mode-dependent flags. Rules that cannot apply are dropped up front so
// Decide does not test them call after call.
func (c *compiled) applies(mode Mode) bool {
	named := slices.Contains(c.modes, mode)
	if len(c.modes) > 0 && !named {
		return false
	}
	// A rule that names no mode was written for the modes in general; it
	// must not break the promises of the two extreme ones.
	switch {
	case mode == ModeYolo && c.action == Ask && !named:
		return false
	case mode == ModePlan && c.action != Deny && !named:
		c.readOnlyOnly = true
	}
	return true
}

// matchTool tests every condition except the arguments.
func (c *compiled) matchTool(server, name string, ro, destr bool) bool {
	if c.readOnlyOnly && !ro {
		return false
	}
	if c.readOnly != nil && *c.readOnly != ro {
		return false
	}
	if c.destr != nil && *c.destr != destr {
		return false
	}
	if c.server != "" {
		if ok, _ := path.Match(c.server, server); !ok {
			return false
		}
	}
	if len(c.tools) > 0 {
		if _, ok := toolglob.Any(c.tools, server, name); !ok {
			return false
		}
	}
	return true
}

// matchCaller tests the callers and groups conditions: a rule that names
// either matches only a caller that is named (by name or subject) and in
// one of the groups; a call without a caller matches neither.
func (c *compiled) matchCaller(caller *identity.Caller) bool {
	if len(c.callers) == 0 && len(c.groups) == 0 {
		return true
	}
	if caller == nil {
		return false
	}
	if len(c.groups) > 0 && !caller.InAny(c.groups) {
		return false
	}
	if len(c.callers) > 0 && !slices.ContainsFunc(c.callers, func(p string) bool {
		ok, _ := path.Match(p, caller.Name)
		if !ok {
			ok, _ = path.Match(p, caller.Subject)
		}
		return ok
	}) {
		return false
	}
	return true
}

// checkCallerPattern says what is wrong with a pattern of a rule's
// callers ("" when nothing is): it must be a non-empty glob in the
// syntax of path.Match (config checks its rules the same way).
func checkCallerPattern(p string) string {
	if p == "" {
		return "a caller pattern must not be empty"
	}
	if _, err := path.Match(p, ""); err != nil {
		return fmt.Sprintf("%q is not a valid glob: %v", p, err)
	}
	return ""
}

// matchArgs tests the argument conditions.
func (c *compiled) matchArgs(args map[string]any) bool {
	if len(c.args) == 0 {
		return true
	}
	for _, a := range c.args {
		v, ok := args[a.name]
		if !ok {
			return false
		}
		if s, ok := v.(string); ok {
			if !a.re.MatchString(s) {
				return false
			}
			continue
		}
		bp := bufPool.Get().(*[]byte)
		*bp = appendValue((*bp)[:0], v)
		ok = a.re.Match(*bp)
		if cap(*bp) <= maxPooledBuf {
			bufPool.Put(bp)
		}
		if !ok {
			return false
		}
	}
	return true
}

// bufPool holds the buffers non-string arguments are encoded into, so
// that matching them does not allocate in the common case (numbers,
// booleans); a buffer grown by a large value is left to the collector.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 64); return &b }}

const maxPooledBuf = 4 << 10

func (c *compiled) decision() Decision {
	return Decision{Action: c.action, Rule: c.name, Message: c.message}
}

// ArgumentText returns the text an argument condition matches for the
// value v: a string as it is, anything else as JSON (without HTML
// escaping, map keys sorted).
func ArgumentText(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return string(appendValue(nil, v))
}

// appendValue appends the JSON encoding of v. The scalar types JSON
// decoding produces are formatted here, without allocating, exactly as
// encoding/json would; the rest goes through encoding/json.
func appendValue(b []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...)
	case string:
		return append(b, x...)
	case bool:
		return strconv.AppendBool(b, x)
	case float64:
		return jsonfloat.Append(b, x, 64)
	case float32:
		return jsonfloat.Append(b, float64(x), 32)
	case int:
		return strconv.AppendInt(b, int64(x), 10)
	case int64:
		return strconv.AppendInt(b, x, 10)
	case int32:
		return strconv.AppendInt(b, int64(x), 10)
	case uint64:
		return strconv.AppendUint(b, x, 10)
	case json.Number:
		return append(b, x...)
	case json.RawMessage:
		return append(b, x...)
	}
	var w bytes.Buffer
	enc := json.NewEncoder(&w)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Not representable in JSON (a channel, a cycle): match on Go's
		// rendering rather than fail the call.
		return fmt.Append(b, v)
	}
	return append(b, bytes.TrimSuffix(w.Bytes(), []byte("\n"))...)
}
