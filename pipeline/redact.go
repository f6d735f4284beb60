package pipeline

import (
	"fmt"
	"regexp"
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
	k = strings.ToLower(k)
	return strings.NewReplacer("-", "", "_", "").Replace(k)
}

func (r *redactor) secretKey(k string) bool { return r.keys[normKey(k)] }

// text masks secrets in one string.
func (r *redactor) text(s string) string {
	if s == "" {
		return s
	}
	s = r.pattern.ReplaceAllString(s, Masked)
	if strings.ContainsAny(s, "?&;") {
		s = r.query.ReplaceAllString(s, "${1}"+Masked)
	}
	return s
}

// value returns a masked copy of a decoded JSON value.
func (r *redactor) value(v any) any {
	switch x := v.(type) {
	case string:
		return r.text(x)
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			if r.secretKey(k) {
				m[k] = Masked
			} else {
				m[k] = r.value(e)
			}
		}
		return m
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = r.value(e)
		}
		return s
	}
	return v
}

// record returns a copy of rec with secrets masked in its arguments,
// result, error and notes. The tool received the real values; the record
// only documents them.
func (r *redactor) record(rec *tool.Record) *tool.Record {
	out := *rec
	if rec.Arguments != nil {
		out.Arguments = r.value(rec.Arguments).(map[string]any)
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
			res.Structured = r.value(res.Structured)
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
				n.Data = r.value(n.Data).(map[string]any)
			}
			out.Notes[i] = n
		}
	}
	return &out
}
