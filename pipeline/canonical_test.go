package pipeline

import (
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

func TestCanonicalURL(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"already canonical", "https://example.com/a", "https://example.com/a"},
		{"scheme and host case", "HTTPS://Example.COM/Path", "https://example.com/Path"},
		{"default http port", "http://example.com:80/a", "http://example.com/a"},
		{"default https port", "https://example.com:443/a", "https://example.com/a"},
		{"other port kept", "https://example.com:8443/a", "https://example.com:8443/a"},
		{"http port on https kept", "https://example.com:80/a", "https://example.com:80/a"},
		{"empty port", "http://example.com:/a", "http://example.com/a"},
		{"port leading zeros", "http://example.com:0080/a", "http://example.com/a"},
		{"query sorted", "https://e.com/s?b=2&a=1", "https://e.com/s?a=1&b=2"},
		{"repeated keys kept, by value", "https://e.com/s?a=2&b=1&a=1", "https://e.com/s?a=1&a=2&b=1"},
		{"empty parameters dropped", "https://e.com/s?&a=1&&", "https://e.com/s?a=1"},
		{"key without value", "https://e.com/s?b&a=", "https://e.com/s?a=&b"},
		{"fragment dropped", "https://e.com/a#section", "https://e.com/a"},
		{"empty query dropped", "https://e.com/a?", "https://e.com/a"},
		{"empty query and fragment", "https://e.com/a?#", "https://e.com/a"},
		{"trailing slash", "https://e.com/a/", "https://e.com/a"},
		{"trailing slashes", "https://e.com/a//", "https://e.com/a"},
		{"empty path", "https://e.com", "https://e.com/"},
		{"root path", "https://e.com/", "https://e.com/"},
		{"empty path with query", "https://e.com?x=1", "https://e.com/?x=1"},
		{"unreserved decoded", "https://e.com/%7Euser/%61%2d%5F", "https://e.com/~user/a-_"},
		{"hex upper-cased", "https://e.com/a%2fb%3f", "https://e.com/a%2Fb%3F"},
		{"escapes in query", "https://e.com/?q=%e4%b8%ad%41&x=a%2bb", "https://e.com/?q=%E4%B8%ADA&x=a%2Bb"},
		{"space escaped", "https://e.com/a b?q=c d", "https://e.com/a%20b?q=c%20d"},
		{"non-ASCII path escaped", "https://e.com/中", "https://e.com/%E4%B8%AD"},
		{"dot segments", "https://e.com/a/./b/../c", "https://e.com/a/c"},
		{"encoded dot segments", "https://e.com/a/%2E%2E/c", "https://e.com/c"},
		{"dot segments above root", "https://e.com/../../a", "https://e.com/a"},
		{"trailing host dot", "https://Example.com./a", "https://example.com/a"},
		{"userinfo kept", "https://User:pw@E.com/", "https://User:pw@e.com/"},
		{"IPv4", "http://127.0.0.1:80/", "http://127.0.0.1/"},
		{"IPv6 default port", "http://[::1]:80/", "http://[::1]/"},
		{"IPv6 port kept", "http://[::1]:8080/x", "http://[::1]:8080/x"},
		{"IPv6 long form", "http://[0:0:0:0:0:0:0:1]/", "http://[::1]/"},
		{"IPv6 upper case", "http://[FE80::AB]/", "http://[fe80::ab]/"},
		{"IPv6 zone", "http://[fe80::1%25en0]/", "http://[fe80::1%25en0]/"},
		{"surrounding space", "  https://e.com/a  ", "https://e.com/a"},
		{"plus kept", "https://e.com/?q=a+b", "https://e.com/?q=a+b"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := CanonicalURL(tc.in)
			if !ok || got != tc.want {
				t.Errorf("CanonicalURL(%q) = %q, %v; want %q", tc.in, got, ok, tc.want)
			}
			again, ok := CanonicalURL(got)
			if !ok || again != got {
				t.Errorf("not idempotent: CanonicalURL(%q) = %q, %v", got, again, ok)
			}
		})
	}

	same := [][2]string{
		{"https://Example.com:443/a/?b=2&a=1#x", "https://example.com/a?a=1&b=2"},
		{"http://EXAMPLE.com", "http://example.com:80/"},
		{"https://e.com/%7e", "https://e.com/~"},
	}
	for _, p := range same {
		a, _ := CanonicalURL(p[0])
		b, _ := CanonicalURL(p[1])
		if a != b || a == "" {
			t.Errorf("%q -> %q and %q -> %q differ", p[0], a, p[1], b)
		}
	}
}

func TestCanonicalURLRejects(t *testing.T) {
	for _, in := range []string{
		"",
		"example.com/a",
		"/relative/path",
		"//example.com/a",
		"ftp://example.com/a",
		"file:///etc/passwd",
		"mailto:someone@example.com",
		"javascript:alert(1)",
		"http:opaque",
		"http:///no-host",
		"https://",
		"https://./",
		"http://example.com:99999/",
		"http://[::1/",
		"http://exa mple.com/",
		"https://e.com/%zz",
		"not a url",
	} {
		if got, ok := CanonicalURL(in); ok {
			t.Errorf("CanonicalURL(%q) = %q, true; want not ok", in, got)
		}
	}
}

func TestNormalizeText(t *testing.T) {
	tests := []struct{ in, want string }{
		{"  Rust  MCP\tservers\n", "rust mcp servers"},
		{"already normal", "already normal"},
		{"", ""},
		{" \t\n ", ""},
		{"ÉCOLE Straße", "école straße"},
		{"ΣΊΣΥΦΟΣ σίσυφος", "σίσυφοσ σίσυφοσ"}, // final sigma folds like sigma
		{"\u212A", "k"},     // Kelvin sign
		{"a\u00a0b", "a b"}, // no-break space is white space
	}
	for _, tc := range tests {
		if got := NormalizeText(tc.in); got != tc.want {
			t.Errorf("NormalizeText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func FuzzCanonicalURL(f *testing.F) {
	for _, s := range []string{
		"https://Example.com:443/a/?b=2&a=1#x",
		"http://[::1]:80/",
		"http://[fe80::1%25en0]:8080/a/../b",
		"https://user:pa%20ss@e.com/%7e/%2f?q=%e4&q=a+b",
		"HTTP://E.COM./a//./..",
		"https://e.com/a b?c d",
		"https://xn--bcher-kva.example/bücher",
		"https://e.com/?a=1;b=2&&",
		"http://127.1/",
		"ftp://example.com/",
		"not a url",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		// The URL policy's parsing shares the input: it must not panic,
		// and host folding must be stable.
		for _, u := range candidateURLs(s, true) {
			for _, tg := range urlTargets(u) {
				if foldHost(tg.host) != tg.host || tg.path == "" || tg.path[0] != '/' {
					t.Fatalf("%q: target %+v (host folds to %q)", u, tg, foldHost(tg.host))
				}
			}
		}

		c, ok := CanonicalURL(s)
		if !ok {
			return
		}
		again, ok := CanonicalURL(c)
		if !ok || again != c {
			t.Fatalf("not idempotent: %q -> %q -> %q (%v)", s, c, again, ok)
		}
		u, err := url.Parse(c)
		if err != nil {
			t.Fatalf("%q -> %q, which does not parse: %v", s, c, err)
		}
		orig, _ := url.Parse(strings.TrimSpace(s))
		if !sameHost(orig.Hostname(), u.Hostname()) {
			t.Fatalf("%q -> %q: host %q became %q", s, c, orig.Hostname(), u.Hostname())
		}
		if u.Fragment != "" || u.ForceQuery {
			t.Fatalf("%q -> %q keeps a fragment or an empty query", s, c)
		}
	})
}

// sameHost compares host names as CanonicalURL does: IP addresses by value,
// names ignoring case and trailing dots.
func sameHost(a, b string) bool {
	if x, err := netip.ParseAddr(a); err == nil {
		y, err := netip.ParseAddr(b)
		return err == nil && x == y
	}
	return strings.TrimRight(strings.ToLower(a), ".") == b
}
