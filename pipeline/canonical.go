package pipeline

import (
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// CanonicalURL returns the canonical form of an http(s) URL for comparison:
// scheme and host lower-cased (a trailing dot on the host dropped, IP
// addresses in their standard form), default port (:80 for http, :443 for
// https) dropped, query parameters sorted by key then value (keeping
// repeated keys), fragment dropped, dot segments ("/a/./b/../c") resolved,
// trailing slash normalised (an empty path becomes "/", trailing slashes on
// a longer path are removed), percent-encoding normalised (unreserved
// characters decoded, other escapes upper-case hex, characters that need
// escaping escaped), empty query "?" dropped. User information is kept.
//
// ok is false for anything that is not an absolute http(s) URL with a host.
// The result is itself canonical: CanonicalURL(CanonicalURL(s)) is the same.
func CanonicalURL(s string) (string, bool) {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil || u.Opaque != "" {
		return "", false
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return "", false
	}
	host, ok := canonicalHost(u.Hostname())
	if !ok {
		return "", false
	}
	if port := u.Port(); port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n > 65535 {
			return "", false
		}
		if !(scheme == "http" && n == 80) && !(scheme == "https" && n == 443) {
			host += ":" + strconv.Itoa(n)
		}
	}

	var b strings.Builder
	b.WriteString(scheme)
	b.WriteString("://")
	if u.User != nil {
		b.WriteString(u.User.String())
		b.WriteByte('@')
	}
	b.WriteString(host)
	b.WriteString(canonicalPath(u.EscapedPath()))
	if q := canonicalQuery(u.RawQuery); q != "" {
		b.WriteByte('?')
		b.WriteString(q)
	}
	return b.String(), true
}

// canonicalHost lower-cases a host name (as url.URL.Hostname returns it)
// and drops trailing dots; IP addresses get their standard form, IPv6 ones
// in brackets. ok is false when nothing is left or the host is not one a
// URL can carry.
func canonicalHost(h string) (string, bool) {
	if strings.Contains(h, ":") {
		// Only IPv6 literals have colons in them.
		a, err := netip.ParseAddr(h)
		if err != nil || !a.Is6() {
			return "", false
		}
		z := a.Zone()
		s := a.WithZone("").String()
		if z != "" {
			// Zones only of unreserved characters: nothing to escape.
			for i := range len(z) {
				if !isUnreserved(z[i]) {
					return "", false
				}
			}
			s += "%25" + z
		}
		return "[" + s + "]", true
	}
	h = strings.TrimRight(strings.ToLower(h), ".")
	if h == "" {
		return "", false
	}
	if a, err := netip.ParseAddr(h); err == nil {
		return a.String(), true
	}
	// A reg-name may hold "%" only escaped (url.Parse decoded "%25").
	return strings.ReplaceAll(h, "%", "%25"), true
}

// canonicalPath normalises an escaped path: escapes, dot segments, the
// trailing slash.
func canonicalPath(p string) string {
	p = normalizeEscapes(p, false)
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	p = removeDotSegments(p)
	p = strings.TrimRight(p, "/")
	if p == "" {
		return "/"
	}
	return p
}

// removeDotSegments resolves "." and ".." segments of an absolute path
// (RFC 3986, section 5.2.4). Empty segments ("//") are kept.
func removeDotSegments(p string) string {
	if !strings.Contains(p, ".") {
		return p
	}
	segs := strings.Split(p[1:], "/")
	out := make([]string, 0, len(segs))
	for i, seg := range segs {
		last := i == len(segs)-1
		switch seg {
		case ".":
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		default:
			out = append(out, seg)
			continue
		}
		if last {
			out = append(out, "")
		}
	}
	return "/" + strings.Join(out, "/")
}

// canonicalQuery sorts the parameters of a raw query by key, then value,
// keeping repeated keys and dropping empty parameters ("a=1&&b=2").
func canonicalQuery(raw string) string {
	if raw == "" {
		return ""
	}
	type param struct{ key, value, text string }
	var params []param
	for part := range strings.SplitSeq(raw, "&") {
		if part == "" {
			continue
		}
		part = normalizeEscapes(part, true)
		k, v, _ := strings.Cut(part, "=")
		params = append(params, param{k, v, part})
	}
	slices.SortFunc(params, func(a, b param) int {
		if c := strings.Compare(a.key, b.key); c != 0 {
			return c
		}
		if c := strings.Compare(a.value, b.value); c != 0 {
			return c
		}
		return strings.Compare(a.text, b.text)
	})
	texts := make([]string, len(params))
	for i, p := range params {
		texts[i] = p.text
	}
	return strings.Join(texts, "&")
}

// normalizeEscapes normalises the percent-encoding of a URL component:
// escapes of unreserved characters are decoded, other escapes get
// upper-case hex, and bytes that may not appear unescaped (controls,
// space, non-ASCII, a "%" that starts no escape, ...) are escaped. In a
// query, "?" and "/" are left alone, as is "+".
func normalizeEscapes(s string, query bool) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			d := unhex(s[i+1])<<4 | unhex(s[i+2])
			if isUnreserved(d) {
				b.WriteByte(d)
			} else {
				b.WriteByte('%')
				b.WriteByte(hex[d>>4])
				b.WriteByte(hex[d&15])
			}
			i += 2
			continue
		}
		if mustEscape(c, query) {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

// isUnreserved reports RFC 3986's unreserved characters.
func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// mustEscape reports bytes that may not appear literally in a path or query.
func mustEscape(c byte, query bool) bool {
	if isUnreserved(c) {
		return false
	}
	switch c {
	// sub-delims, ":" and "@" are allowed in both; "/" in paths.
	case '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', ':', '@', '/':
		return false
	case '?':
		return !query
	}
	return true
}

// NormalizeText normalises free text for comparison: trimmed, runs of
// white space collapsed to one space, and case-folded.
func NormalizeText(s string) string {
	return strings.ToLower(strings.ToUpper(strings.Join(strings.Fields(s), " ")))
}
