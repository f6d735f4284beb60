package pipeline

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/tool"
)

// Masked replaces every redacted value.
const Masked = "[REDACTED]"

// builtinSecretPatterns catch common credential shapes wherever they appear
// in text: bearer tokens, OpenAI/Anthropic-style keys, AWS access keys,
// GitHub and Slack tokens, PEM private keys.
var builtinSecretPatterns = []string{
	`(?i)\bbearer\s+[A-Za-z0-9\-._~+/]{8,}=*`,
	`\bsk-[A-Za-z0-9_\-]{20,}`,
	`\bAKIA[0-9A-Z]{16}\b`,
	`\bgh[pousr]_[A-Za-z0-9]{36,}\b`,
	`\bxox[baprs]-[A-Za-z0-9\-]{10,}`,
	`-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----`,
}

// redactor masks secrets: values under secret-looking keys, and matches of
// secret patterns in any string.
type redactor struct {
	keys    map[string]bool // normalised key names
	pattern *regexp.Regexp  // all patterns, one alternation: one pass per string
	query   *regexp.Regexp  // key=value pairs of secret keys in URLs and forms
}

func newRedactor(cfg config.Redact) (*redactor, error) {
	r := &redactor{keys: map[string]bool{}}
	var names []string
	for _, k := range append(append([]string{}, config.DefaultRedactKeys...), cfg.Keys...) {
		n := normKey(k)
		if n != "" && !r.keys[n] {
			r.keys[n] = true
			names = append(names, regexp.QuoteMeta(k))
		}
	}
	pats := append(append([]string{}, builtinSecretPatterns...), cfg.Patterns...)
	for i, p := range cfg.Patterns {
		if _, err := regexp.Compile(p); err != nil {
			return nil, fmt.Errorf("redact pattern %d %q: %v", i, p, err)
		}
	}
	r.pattern = regexp.MustCompile("(?:" + strings.Join(pats, ")|(?:") + ")")
	r.query = regexp.MustCompile(`(?i)([?&;](?:` + strings.Join(names, "|") + `)=)[^&#\s"']+`)
	return r, nil
}

// normKey folds case and treats '-' and '_' as absent, so "API-Key",
// "api_key" and "apikey" are one key.
func normKey(k string) string {
	var b strings.Builder
	b.Grow(len(k))
	for _, c := range strings.ToLower(k) {
		if c != '-' && c != '_' {
			b.WriteRune(c)
		}
	}
	return b.String()
}

func (r *redactor) secretKey(k string) bool { return r.keys[normKey(k)] }

// text masks secrets in one string. A string with nothing to mask is
// returned as is: matching first costs no allocation, and most strings
// carry no secret.
func (r *redactor) text(s string) string {
	if s == "" {
		return s
	}
	if r.pattern.MatchString(s) {
		s = r.pattern.ReplaceAllString(s, Masked)
	}
	if strings.ContainsAny(s, "?&;") && r.query.MatchString(s) {
		s = r.query.ReplaceAllString(s, "${1}"+Masked)
	}
	return s
}

// value returns v with secrets masked, and whether anything was masked.
// Maps and slices are copied only along the path to a masked value, so
// the common case, nothing secret, costs no allocation; v itself is never
// modified.
func (r *redactor) value(v any) (any, bool) {
	switch x := v.(type) {
	case string:
		t := r.text(x)
		return t, t != x
	case map[string]any:
		var m map[string]any
		for k, e := range x {
			var masked any
			if r.secretKey(k) {
				if e == Masked {
					continue
				}
				masked = Masked
			} else {
				var changed bool
				if masked, changed = r.value(e); !changed {
					continue
				}
			}
			if m == nil {
				m = maps.Clone(x)
			}
			m[k] = masked
		}
		if m == nil {
			return v, false
		}
		return m, true
	case []any:
		var s []any
		for i, e := range x {
			masked, changed := r.value(e)
			if !changed {
				continue
			}
			if s == nil {
				s = slices.Clone(x)
			}
			s[i] = masked
		}
		if s == nil {
			return v, false
		}
		return s, true
	}
	return v, false
}

// object masks secrets in a JSON object, copying it only if it must.
func (r *redactor) object(m map[string]any) map[string]any {
	out, _ := r.value(m)
	return out.(map[string]any)
}

// record returns a copy of rec with secrets masked in its arguments,
// result, error and notes. The tool received the real values; the record
// only documents them.
func (r *redactor) record(rec *tool.Record) *tool.Record {
	out := *rec
	if rec.Arguments != nil {
		out.Arguments = r.object(rec.Arguments)
	}
	if rec.Result != nil {
		res := *rec.Result
		res.Content = make([]tool.Content, len(rec.Result.Content))
		for i, c := range rec.Result.Content {
			c.Text = r.text(c.Text)
			if c.Resource != nil {
				rc := *c.Resource
				rc.Text = r.text(rc.Text)
				c.Resource = &rc
			}
			res.Content[i] = c
		}
		if res.Structured != nil {
			res.Structured, _ = r.value(res.Structured)
		}
		out.Result = &res
	}
	if rec.Error != nil {
		e := *rec.Error
		e.Message, e.Detail = r.text(e.Message), r.text(e.Detail)
		out.Error = &e
	}
	if len(rec.Notes) > 0 {
		out.Notes = make([]tool.Note, len(rec.Notes))
		for i, n := range rec.Notes {
			n.Message = r.text(n.Message)
			if n.Data != nil {
				n.Data = r.object(n.Data)
			}
			out.Notes[i] = n
		}
	}
	return &out
}
