package config

import (
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// openapiKeys are the keys of an openapi entry, in the order the
// reference documents them.
var openapiKeys = []string{"spec", "base_url", "headers", "bearer_token", "include", "exclude",
	"timeout", "spec_timeout", "max_spec_bytes", "max_response_bytes", "max_schema_nodes", "auth"}

// openapi reads the openapi section: API name to API. A name is a server
// name (the "server" of server__tool), so it must not be one already
// taken by servers or mcpServers (seen).
func (p *parser) openapi(n *yaml.Node, kp string, cfg *Config, seen map[string]*yaml.Node) {
	entries, _ := p.entries(n, kp)
	for _, e := range entries {
		sp := kp + "." + e.key
		dup := fmt.Sprintf("a server named %q is already defined (line %%d): an API's name is a server name and must differ", e.key)
		if !p.serverName(e, sp, seen, dup) {
			continue
		}
		if a, ok := p.openapiEntry(e, sp); ok {
			cfg.OpenAPI = append(cfg.OpenAPI, a)
		}
	}
}

// openapiEntry reads one API.
func (p *parser) openapiEntry(se entry, sp string) (OpenAPI, bool) {
	a := OpenAPI{Name: se.key, Line: se.k.Line}
	if isNull(deref(se.v)) {
		p.errAt(se.v, sp, "expected a mapping with spec, got null")
		return a, false
	}
	hasSpec := false
	ok := p.fields(se.v, sp, openapiKeys, func(e entry, fp string) {
		switch e.key {
		case "spec":
			hasSpec = true
			s, ok := p.text(e.v, fp)
			switch {
			case !ok:
			case strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://"):
				if u, err := url.Parse(s); err != nil || u.Host == "" {
					p.errAt(e.v, fp, "%s is not a usable URL", quote(s))
				} else {
					a.Spec = s
				}
			default:
				if r, err := resolvePath(s, p.dir, p.lookup); err != nil {
					p.errAt(e.v, fp, "%v", err)
				} else {
					a.Spec = r
				}
			}
		case "base_url":
			s, ok := p.text(e.v, fp)
			if !ok {
				return
			}
			if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				p.errAt(e.v, fp, "expected an http(s) URL such as https://api.example.com/v1, got %s", quote(s))
				return
			}
			a.BaseURL = s
		case "headers":
			a.Headers = p.stringMap(e.v, fp, false, validHeaderName, "an HTTP header name")
		case "bearer_token":
			a.BearerToken, _ = p.expandStr(e.v, fp, false)
		case "include", "exclude":
			var pats []string
			for i, it := range p.items(e.v, fp) {
				ip := fmt.Sprintf("%s[%d]", fp, i)
				s, ok := p.str(it, ip)
				if !ok {
					continue
				}
				if _, err := path.Match(s, ""); err != nil || s == "" {
					p.errAt(it, ip, "%s is not a pattern (a glob over operation names or \"METHOD /path\", such as \"get*\" or \"GET /pets/*\")", quote(s))
					continue
				}
				pats = append(pats, s)
			}
			if e.key == "include" {
				a.Include = pats
			} else {
				a.Exclude = pats
			}
		case "timeout":
			p.setDuration(&a.Timeout, e.v, fp)
		case "spec_timeout":
			p.setDuration(&a.SpecTimeout, e.v, fp)
		case "max_spec_bytes":
			a.MaxSpecBytes, _ = p.size(e.v, fp)
		case "max_response_bytes":
			a.MaxResponseBytes, _ = p.size(e.v, fp)
		case "auth":
			// The servers' auth section, as for an http server; of its
			// kinds, user_secrets (a secret sent as a header) applies.
			if v := deref(e.v); v.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(v.Content); i += 2 {
					if k, kind := v.Content[i], v.Content[i+1]; k.Value == "kind" && kind.Value != AuthUserSecrets && slices.Contains([]string{AuthOAuth, AuthTokenExchange}, kind.Value) {
						p.errAt(kind, fp+".kind", "kind %s does not apply to an API (only %s does)", kind.Value, AuthUserSecrets)
						return
					}
				}
			}
			// An API is read as an http server whose URL is its base_url
			// (messages name it).
			d := &serverDecl{s: Server{Name: a.Name, Transport: HTTP}, sp: sp, keyNode: map[string]*yaml.Node{},
				urlKey: "base_url", urlKeyN: e.k}
			a.Auth = p.serverAuth(d, &e)
		case "max_schema_nodes":
			a.MaxSchemaNodes, _ = p.integer(e.v, fp, 1, 1_000_000)
		}
	})
	if ok && !hasSpec {
		p.errAt(se.k, sp, "needs spec: the OpenAPI 3 document, a file or an http(s) URL")
		return a, false
	}
	return a, ok && a.Spec != ""
}
