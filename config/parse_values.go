package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/toolmux/toolmux/internal/toolglob"
)

// The typed values sections are made of: each reader reports what is wrong
// at the node, with its key path, and says whether the value is usable.

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

// setBool reads a boolean into dst; a bad value is reported and leaves
// dst as it was.
func (p *parser) setBool(dst *bool, n *yaml.Node, kp string) {
	if v, ok := p.boolean(n, kp); ok {
		*dst = v
	}
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
// setDuration reads a duration into dst; a bad value is reported and
// leaves dst as it was.
func (p *parser) setDuration(dst *time.Duration, n *yaml.Node, kp string) {
	if d, ok := p.duration(n, kp); ok {
		*dst = d
	}
}

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
