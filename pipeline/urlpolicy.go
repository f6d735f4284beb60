package pipeline

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"path"
	"reflect"
	"strconv"
	"strings"
	"unicode"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/toolmux/toolmux/internal/toolglob"
	"github.com/toolmux/toolmux/tool"
)

// URL policy actions.
const (
	urlAllow = "allow"
	urlDeny  = "deny"
)

// urlRule is a parsed URLRule.
type urlRule struct {
	action  string
	host    string // path.Match glob on the folded host name; "" matches any
	path    string // doublestar glob on the decoded path; "" matches any
	tools   []toolglob.Pattern
	message string
}

// urlPolicy checks the URLs in a call's arguments before the call is made.
type urlPolicy struct {
	named map[string]bool // lower-cased names of arguments holding URLs
	rules []urlRule
	deny  bool // the default for URLs no rule matches
}

// NewURLPolicy returns the URL policy middleware. It refuses a call, before
// calling the next handler, when one of the URLs in its arguments is
// denied; see [URLPolicyOptions].
//
// The URLs of a call are every http(s) URL in its string arguments, at any
// depth: whole values and URLs embedded in text ("see https://..."), plus
// the values of the arguments cfg.Arguments names, which count as https
// URLs without a scheme. A URL that parsers read in different ways
// ("https://a.com\@b.com/", "https:b.com/x") is checked under each reading
// and refused if any reading is denied; host names are compared folded
// (lower case, no trailing dot, full-width letters as ASCII, IPv4 addresses
// in any of the forms resolvers accept as dotted quads) and paths
// percent-decoded, both as written and with dot segments resolved.
//
// A policy cannot see where a tool goes on its own: redirects, and URLs a
// tool derives from other arguments, are out of its reach.
func NewURLPolicy(cfg URLPolicyOptions) (Middleware, error) {
	p, err := parseURLPolicy(cfg)
	if err != nil {
		return nil, err
	}
	return p.middleware, nil
}

func parseURLPolicy(cfg URLPolicyOptions) (*urlPolicy, error) {
	p := &urlPolicy{named: map[string]bool{}}
	switch strings.ToLower(cfg.Default) {
	case "", urlAllow:
	case urlDeny:
		p.deny = true
	default:
		return nil, fmt.Errorf("url_policy: default %q: want allow or deny", cfg.Default)
	}
	for _, a := range cfg.Arguments {
		if a = strings.TrimSpace(a); a != "" {
			p.named[strings.ToLower(a)] = true
		}
	}
	for i, r := range cfg.Rules {
		ur := urlRule{action: strings.ToLower(r.Action), message: r.Message}
		if ur.action != urlAllow && ur.action != urlDeny {
			return nil, fmt.Errorf("url_policy: rules[%d]: action %q: want allow or deny", i, r.Action)
		}
		if r.Host != "" {
			ur.host = foldHost(r.Host)
			if ur.host == "" {
				return nil, fmt.Errorf("url_policy: rules[%d]: bad host pattern %q", i, r.Host)
			}
			if _, err := path.Match(ur.host, ""); err != nil {
				return nil, fmt.Errorf("url_policy: rules[%d]: bad host pattern %q: %v", i, r.Host, err)
			}
		}
		if r.Path != "" {
			if r.Path[0] != '/' && r.Path[0] != '*' {
				return nil, fmt.Errorf("url_policy: rules[%d]: path pattern %q must start with / (or *)", i, r.Path)
			}
			if !doublestar.ValidatePattern(r.Path) {
				return nil, fmt.Errorf("url_policy: rules[%d]: bad path pattern %q", i, r.Path)
			}
			ur.path = r.Path
		}
		tools, err := toolglob.ParseAll(r.Tools, true)
		if err != nil {
			return nil, fmt.Errorf("url_policy: rules[%d]: %w", i, err)
		}
		ur.tools = tools
		p.rules = append(p.rules, ur)
	}
	return p, nil
}

func (p *urlPolicy) middleware(next Handler) Handler {
	return HandlerFunc(func(ctx context.Context, call tool.Call) *tool.Record {
		if v := p.check(call); v != nil {
			rec := refuse(call, &tool.Error{Kind: tool.KindPolicyViolation, Message: v.message})
			rec.Note("url_policy", v.message, map[string]any{"url": v.url, "rule": v.rule, "action": urlDeny})
			return rec
		}
		return next.Call(ctx, call)
	})
}

// urlViolation is a denied URL: the URL as written in the arguments, the
// index of the rule that denied it (-1 for the default) and the message.
type urlViolation struct {
	url     string
	rule    int
	message string
}

// check returns the first denied URL of the call, or nil.
func (p *urlPolicy) check(call tool.Call) *urlViolation {
	if len(call.Arguments) == 0 {
		return nil
	}
	var found *urlViolation
	seen := map[string]bool{}
	p.walk(call.Arguments, false, func(raw string) bool {
		if seen[raw] {
			return true
		}
		seen[raw] = true
		for _, t := range urlTargets(raw) {
			if rule, denied := p.decide(call, t); denied {
				found = &urlViolation{url: raw, rule: rule, message: p.denyMessage(raw, rule)}
				return false
			}
		}
		return true
	})
	return found
}

// decide applies the rules to one reading of a URL: the first rule that
// matches decides, the default when none does. It returns the index of
// the deciding rule, -1 for the default.
func (p *urlPolicy) decide(call tool.Call, t urlTarget) (int, bool) {
	for i, r := range p.rules {
		if len(r.tools) > 0 {
			if _, ok := toolglob.Any(r.tools, call.Server, call.Tool); !ok {
				continue
			}
		}
		if r.host != "" {
			if ok, _ := path.Match(r.host, t.host); !ok {
				continue
			}
		}
		if r.path != "" {
			if ok, _ := doublestar.Match(r.path, t.path); !ok {
				continue
			}
		}
		return i, r.action == urlDeny
	}
	return -1, p.deny
}

func (p *urlPolicy) denyMessage(raw string, rule int) string {
	u := shorten(raw, 200)
	if rule < 0 {
		return fmt.Sprintf("URL %s is blocked by the URL policy (no rule allows it, and the default is deny)", u)
	}
	r := p.rules[rule]
	if r.message != "" {
		return r.message
	}
	what := []string{"deny"}
	if r.host != "" {
		what = append(what, "host "+r.host)
	}
	if r.path != "" {
		what = append(what, "path "+r.path)
	}
	if len(what) == 1 {
		what = append(what, "every URL")
	}
	if len(r.tools) > 0 {
		names := make([]string, len(r.tools))
		for i, t := range r.tools {
			names[i] = t.String()
		}
		what = append(what, "for tools "+strings.Join(names, ", "))
	}
	return fmt.Sprintf("URL %s is blocked by the URL policy (%s)", u, strings.Join(what, " "))
}

// shorten cuts s to at most n bytes (on a rune boundary), marking the cut.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !isRuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// walk calls visit with every candidate URL in v, stopping when visit
// returns false. named is set below an argument cfg.Arguments names.
func (p *urlPolicy) walk(v any, named bool, visit func(string) bool) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		for _, u := range candidateURLs(x, named) {
			if !visit(u) {
				return false
			}
		}
		return true
	case map[string]any:
		for k, e := range x {
			if !p.walk(e, named || p.named[strings.ToLower(k)], visit) {
				return false
			}
		}
		return true
	case []any:
		for _, e := range x {
			if !p.walk(e, named, visit) {
				return false
			}
		}
		return true
	case []string:
		for _, e := range x {
			if !p.walk(e, named, visit) {
				return false
			}
		}
		return true
	case map[string]string:
		for k, e := range x {
			if !p.walk(e, named || p.named[strings.ToLower(k)], visit) {
				return false
			}
		}
		return true
	case bool, float64, float32, int, int64, int32, uint, uint64, uint32:
		return true
	}
	// Other Go values a caller may pass: strings, slices and maps of them.
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.String:
		return p.walk(rv.String(), named, visit)
	case reflect.Slice, reflect.Array:
		for i := range rv.Len() {
			if !p.walk(rv.Index(i).Interface(), named, visit) {
				return false
			}
		}
	case reflect.Map:
		iter := rv.MapRange()
		for iter.Next() {
			k := iter.Key()
			n := named
			if k.Kind() == reflect.String {
				n = n || p.named[strings.ToLower(k.String())]
			}
			if !p.walk(iter.Value().Interface(), n, visit) {
				return false
			}
		}
	case reflect.Pointer, reflect.Interface:
		if !rv.IsNil() {
			return p.walk(rv.Elem().Interface(), named, visit)
		}
	}
	return true
}

// candidateURLs returns the URLs a string argument may hold: the whole
// value when it has an http(s) scheme (or, for a named argument, no scheme
// at all), and every http(s) URL embedded in it.
func candidateURLs(s string, named bool) []string {
	var out []string
	t := strings.TrimSpace(s)
	switch {
	case hasHTTPScheme(t):
		out = append(out, t)
	case named && t != "":
		if strings.HasPrefix(t, "//") || strings.HasPrefix(t, `\\`) {
			out = append(out, "https:"+t)
		} else if i := strings.Index(t, "://"); i < 0 || strings.ContainsAny(t[:i], "/?#@ ") {
			// No scheme (a "://" past the host is not one).
			out = append(out, "https://"+t)
		}
	}
	// URLs embedded in text: "see https://host/x", `get("https://...")`.
	for i := 1; i < len(s); i++ {
		c := s[i]
		if c != 'h' && c != 'H' {
			continue
		}
		if n := embeddedSchemeLen(s[i:]); n > 0 {
			j := i + n
			for j < len(s) && !endsEmbeddedURL(s[j]) {
				j++
			}
			u := strings.TrimRight(s[i:j], ".,;:!?)]}")
			if len(u) > n && (len(out) == 0 || out[len(out)-1] != u) {
				out = append(out, u)
			}
			i = j - 1
		}
	}
	return out
}

// hasHTTPScheme reports whether s starts with "http:" or "https:", in any case.
func hasHTTPScheme(s string) bool {
	return schemeLen(s) > 0
}

// schemeLen returns the length of an "http:" or "https:" prefix of s, any
// case, or 0.
func schemeLen(s string) int {
	for _, p := range []string{"http:", "https:"} {
		if len(s) >= len(p) && strings.EqualFold(s[:len(p)], p) {
			return len(p)
		}
	}
	return 0
}

// embeddedSchemeLen returns the length of "http://", "https://" (or with
// backslashes) at the start of s, any case, or 0.
func embeddedSchemeLen(s string) int {
	n := schemeLen(s)
	if n == 0 || len(s) < n+2 {
		return 0
	}
	if (s[n] == '/' || s[n] == '\\') && (s[n+1] == '/' || s[n+1] == '\\') {
		return n + 2
	}
	return 0
}

// endsEmbeddedURL reports the bytes that end a URL embedded in text.
func endsEmbeddedURL(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '\f', '\v', '"', '\'', '`', '<', '>':
		return true
	}
	return c < 0x20
}

// urlTarget is one reading of a URL: the folded host name and a path.
type urlTarget struct{ host, path string }

// urlTargets returns the readings of an http(s) URL that rules are checked
// against: the URL as net/url parses it, and as lenient clients parse it
// (see lenientURL), each with the decoded path as written, with dot
// segments resolved, and with repeated slashes merged too. It returns
// nothing for strings that are not http(s) URLs with a host.
func urlTargets(raw string) []urlTarget {
	var out []urlTarget
	add := func(host, p string) {
		host = foldHost(host)
		if host == "" {
			return
		}
		if p == "" || p[0] != '/' {
			p = "/" + p
		}
		// As written, with dot segments resolved, and with repeated
		// slashes merged too (as many servers do).
		for _, q := range []string{p, removeDotSegments(p), path.Clean(p)} {
			t := urlTarget{host, q}
			if !containsTarget(out, t) {
				out = append(out, t)
			}
		}
	}
	if u, err := url.Parse(raw); err == nil && u.Opaque == "" {
		if s := strings.ToLower(u.Scheme); s == "http" || s == "https" {
			add(u.Hostname(), u.Path)
		}
	}
	for _, backslash := range []bool{true, false} {
		if host, p, ok := lenientURL(raw, backslash); ok {
			add(host, p)
		}
	}
	return out
}

func containsTarget(ts []urlTarget, t urlTarget) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

// lenientURL splits an http(s) URL the way forgiving parsers do, for URLs
// net/url reads differently or rejects: tabs and newlines are dropped, any
// run of slashes may follow the scheme, user information ends at the last
// "@", and invalid percent-escapes are left alone. With backslash set,
// backslashes are slashes (as WHATWG URL parsers, in browsers, read them);
// otherwise they are ordinary characters (as RFC 3986 parsers read them).
// It returns the host (with no port) and the decoded path.
func lenientURL(raw string, backslash bool) (host, p string, ok bool) {
	s := strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' {
			return -1
		}
		if r == '\\' && backslash {
			return '/'
		}
		return r
	}, strings.TrimFunc(raw, func(r rune) bool { return r <= ' ' }))
	n := schemeLen(s)
	if n == 0 {
		return "", "", false
	}
	s = strings.TrimLeft(s[n:], `/\`)
	end := strings.IndexAny(s, "/?# ")
	if end < 0 {
		end = len(s)
	}
	auth, rest := s[:end], s[end:]
	if i := strings.LastIndexByte(auth, '@'); i >= 0 {
		auth = auth[i+1:]
	}
	if strings.HasPrefix(auth, "[") {
		if i := strings.IndexByte(auth, ']'); i >= 0 {
			auth = auth[1:i]
		}
	} else if i := strings.LastIndexByte(auth, ':'); i >= 0 {
		auth = auth[:i]
	}
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		rest = rest[:i]
	}
	host = lenientUnescape(auth)
	if host == "" || strings.ContainsFunc(host, func(r rune) bool {
		return r <= ' ' || strings.ContainsRune(`"<>\^{|}`+"`", r)
	}) {
		return "", "", false
	}
	return host, lenientUnescape(rest), true
}

// lenientUnescape decodes the valid percent-escapes of s.
func lenientUnescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// foldHost returns the form of a host name rules compare: lower case,
// without brackets or trailing dots, full-width letters and ideographic
// full stops mapped to ASCII (as IDNA mapping does), and IP addresses in
// their standard form, including IPv4 addresses written as resolvers
// accept them ("2130706433", "0x7f.1") and IPv4-mapped IPv6 addresses.
func foldHost(h string) string {
	if len(h) > 2 && h[0] == '[' && h[len(h)-1] == ']' && strings.Contains(h, ":") {
		h = h[1 : len(h)-1]
	}
	h = strings.Map(func(r rune) rune {
		switch {
		case r == '\u3002' || r == '\uFF0E' || r == '\uFF61':
			return '.'
		case r >= '\uFF01' && r <= '\uFF5E': // full-width ASCII
			r -= 0xFEE0
		}
		return unicode.ToLower(r)
	}, h)
	if i := strings.IndexByte(h, '%'); i >= 0 && strings.Contains(h[:i], ":") {
		h = h[:i] // an IPv6 zone
	}
	h = strings.TrimRight(h, ".")
	if a, err := netip.ParseAddr(h); err == nil {
		return a.Unmap().String()
	}
	if a, ok := parseLooseIPv4(h); ok {
		return a.String()
	}
	return h
}

// parseLooseIPv4 parses the IPv4 forms of inet_aton, which many resolvers
// accept: one to four parts, each decimal, octal (leading 0) or hex (0x),
// the last filling the remaining bytes ("127.1", "2130706433", "0x7f.0.0.1").
func parseLooseIPv4(h string) (netip.Addr, bool) {
	if h == "" || strings.Trim(h, "0123456789abcdefx.") != "" {
		return netip.Addr{}, false
	}
	parts := strings.Split(h, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	vals := make([]uint64, len(parts))
	for i, part := range parts {
		base := 10
		switch {
		case strings.HasPrefix(part, "0x"):
			part, base = part[2:], 16
		case len(part) > 1 && part[0] == '0':
			part, base = part[1:], 8
		}
		if part == "" || strings.ContainsAny(part, "+-_") {
			return netip.Addr{}, false
		}
		v, err := strconv.ParseUint(part, base, 32)
		if err != nil {
			return netip.Addr{}, false
		}
		vals[i] = v
	}
	var n uint64
	for i, v := range vals[:len(vals)-1] {
		if v > 255 {
			return netip.Addr{}, false
		}
		n |= v << (8 * (3 - i))
	}
	last := vals[len(vals)-1]
	if last >= 1<<(8*(5-len(vals))) {
		return netip.Addr{}, false
	}
	n |= last
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), true
}
