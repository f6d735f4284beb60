package config

import (
	"go.yaml.in/yaml/v3"
)

// Keys of the builtin section, in the order docs/config.md documents them.
var (
	builtinKeys = []string{"enabled", "max_read_bytes", "max_write_bytes", "shell", "memory_dir", "web"}
	shellKeys   = []string{"timeout", "max_timeout", "inactivity_timeout", "max_output_bytes"}
	webKeys     = []string{"timeout", "max_bytes", "deny_private", "search"}
	searchKeys  = []string{"provider", "url", "key"}

	searchProviders = []string{Serper, SearXNG}
)

// builtin reads the builtin section over base. Keys left out keep their
// zero values, which mean the defaults of package builtin and package web:
// config does not repeat those numbers, so they cannot drift apart.
func (p *parser) builtin(n *yaml.Node, kp string, base Builtin) Builtin {
	b := base
	p.fields(n, kp, builtinKeys, func(e entry, fp string) {
		switch e.key {
		case "enabled":
			p.setBool(&b.Enabled, e.v, fp)
		case "max_read_bytes":
			b.MaxReadBytes, _ = p.size(e.v, fp)
		case "max_write_bytes":
			b.MaxWriteBytes, _ = p.size(e.v, fp)
		case "shell":
			b.Shell = p.builtinShell(e.v, fp)
		case "memory_dir":
			// Resolved like data_dir, so the facts land in the same place
			// wherever toolmux is started; "" keeps the default.
			if s, ok := p.expandStr(e.v, fp, false); ok && s != "" {
				if r, err := resolvePath(s, p.dir, p.lookup); err != nil {
					p.errAt(e.v, fp, "%v", err)
				} else {
					b.MemoryDir = r
				}
			}
		case "web":
			b.Web = p.builtinWeb(e.v, fp)
		}
	})
	return b
}

func (p *parser) builtinShell(n *yaml.Node, kp string) BuiltinShell {
	var sh BuiltinShell
	var timeoutSet, maxSet bool
	ok := p.fields(n, kp, shellKeys, func(e entry, fp string) {
		switch e.key {
		case "timeout":
			sh.Timeout, timeoutSet = p.duration(e.v, fp)
		case "max_timeout":
			sh.MaxTimeout, maxSet = p.duration(e.v, fp)
		case "inactivity_timeout":
			sh.InactivityTimeout, _ = p.duration(e.v, fp)
		case "max_output_bytes":
			if v, ok := p.size(e.v, fp); ok {
				sh.MaxOutputBytes = int(v)
			}
		}
	})
	// The shell tool would quietly lower the default to the maximum; both
	// written down and contradicting each other is a slip worth reporting.
	// Against the package's default maximum it is not checked, since config
	// does not know it.
	if ok && timeoutSet && maxSet && sh.Timeout > sh.MaxTimeout {
		p.errAt(n, kp, "timeout (%s) is longer than max_timeout (%s)", sh.Timeout, sh.MaxTimeout)
	}
	return sh
}

func (p *parser) builtinWeb(n *yaml.Node, kp string) BuiltinWeb {
	var w BuiltinWeb
	p.fields(n, kp, webKeys, func(e entry, fp string) {
		switch e.key {
		case "timeout":
			w.Timeout, _ = p.duration(e.v, fp)
		case "max_bytes":
			w.MaxBytes, _ = p.size(e.v, fp)
		case "deny_private":
			w.DenyPrivate, _ = p.boolean(e.v, fp)
		case "search":
			w.Search = p.webSearch(e, fp)
		}
	})
	return w
}

// webSearch reads the search backend. A null value leaves web_search off,
// like a key left out; a mapping must name its provider.
func (p *parser) webSearch(se entry, kp string) BuiltinSearch {
	var s BuiltinSearch
	if isNull(deref(se.v)) {
		return s
	}
	var provider, url *yaml.Node
	urlOK := false
	ok := p.fields(se.v, kp, searchKeys, func(e entry, fp string) {
		switch e.key {
		case "provider":
			provider = e.k
			s.Provider, _ = p.choice(e.v, fp, "search provider", searchProviders)
		case "url":
			url = e.v
			s.URL, urlOK = p.expandStr(e.v, fp, false)
			if urlOK && s.URL != "" {
				if msg := checkURL(s.URL); msg != "" {
					p.errAt(e.v, fp, "%s", msg)
				}
			}
		case "key":
			s.Key, _ = p.expandStr(e.v, fp, false)
		}
	})
	if !ok {
		return BuiltinSearch{}
	}
	switch {
	case provider == nil:
		p.errAt(se.k, kp, "needs provider (%s)", orList(searchProviders))
	case s.Provider == SearXNG && url == nil:
		p.errAt(provider, kp+".provider", "searxng needs url, the address of the instance (there is no public default)")
	case s.Provider == SearXNG && urlOK && s.URL == "":
		p.errAt(url, kp+".url", "must not be empty: searxng needs the address of the instance")
	}
	return s
}
