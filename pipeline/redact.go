package pipeline

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/toolmux/toolmux/tool"
)

// Masked replaces every redacted value.
const Masked = "[REDACTED]"

// builtinSecretPatterns catch common credential shapes wherever they appear
// in text: bearer tokens, OpenAI/Anthropic-style keys, AWS access keys,
// GitHub tokens (classic and fine-grained) and Slack tokens, Google API
// keys, JSON Web Tokens, PEM private keys. The pii stage's `secret` kind is
// these too.
var builtinSecretPatterns = []string{
	`(?i)\bbearer\s+[A-Za-z0-9\-._~+/]{8,}=*`,
	`\bsk-[A-Za-z0-9_\-]{20,}`,
	`\bAKIA[0-9A-Z]{16}\b`,
	`\bgh[pousr]_[A-Za-z0-9]{36,}\b`,
	`\bgithub_pat_[A-Za-z0-9_]{22,}`,
	`\bxox[baprs]-[A-Za-z0-9\-]{10,}`,
	`\bAIza[0-9A-Za-z_\-]{35}`,
	`\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}`,
	`-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----`,
}

// secretHints are literal parts of builtinSecretPatterns, one of which
// every match holds, beside "bearer" in any case (hasSecretHint): text
// without any of them holds no match, and the pii stage and the record's
// masking skip the patterns for it (a test keeps the two in step). Running
// the patterns over a 10 KB text costs a millisecond; looking for the
// hints, microseconds.
var secretHints = []string{"sk-", "AKIA", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_",
	"xox", "AIza", "eyJ", "PRIVATE KEY"}

// hasSecretHint reports whether s holds one of secretHints, or "bearer"
// in any case (the pattern is case-insensitive: "bEARER" is a hint too).
func hasSecretHint(s string) bool {
	for _, h := range secretHints {
		if strings.Contains(s, h) {
			return true
		}
	}
	return hasFold(s, "bearer")
}

// hasFold reports whether s holds word (ASCII, lower case) in any case.
// For "bearer", ASCII folding is (?i)'s: none of its letters has another
// fold in Unicode.
func hasFold(s, word string) bool {
	for i := 0; i+len(word) <= len(s); i++ {
		if s[i]|0x20 == word[0] && strings.EqualFold(s[i:i+len(word)], word) {
			return true
		}
	}
	return false
}

// redactor masks secrets: values under secret-looking keys, and matches of
// secret patterns in any string.
type redactor struct {
	keys    map[string]bool // normalised key names
	builtin *regexp.Regexp  // the built-in patterns, one alternation, run where a hint is
	custom  *regexp.Regexp  // the configuration's, one alternation (nil: none), run on every string
	query   *regexp.Regexp  // key=value pairs of secret keys in URLs and forms
}

func newRedactor(cfg RedactOptions) (*redactor, error) {
	r := &redactor{keys: map[string]bool{}}
	var names []string
	for _, k := range append(DefaultRedactKeys(), cfg.Keys...) {
		n := normKey(k)
		if n != "" && !r.keys[n] {
			r.keys[n] = true
			names = append(names, regexp.QuoteMeta(k))
		}
	}
	for i, p := range cfg.Patterns {
		if _, err := regexp.Compile(p); err != nil {
			return nil, fmt.Errorf("redact pattern %d %q: %v", i, p, err)
		}
	}
	r.builtin = alternation(builtinSecretPatterns)
	if len(cfg.Patterns) > 0 {
		r.custom = alternation(cfg.Patterns)
	}
	r.query = regexp.MustCompile(`(?i)([?&;](?:` + strings.Join(names, "|") + `)=)[^&#\s"']+`)
	return r, nil
}

// alternation is one expression matching any of pats: one pass per
// string for all of them.
func alternation(pats []string) *regexp.Regexp {
	return regexp.MustCompile("(?:" + strings.Join(pats, ")|(?:") + ")")
}

// normKey folds case and treats '-' and '_' as absent, so "API-Key",
// "api_key" and "apikey" are one key.
func normKey(k string) string {
	plain := true
	for i := 0; i < len(k) && plain; i++ {
		c := k[i]
		plain = c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
	}
	if plain {
		return k // the usual key: nothing to fold, nothing to allocate
	}
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
	if hasSecretHint(s) && r.builtin.MatchString(s) {
		s = r.builtin.ReplaceAllString(s, Masked)
	}
	if r.custom != nil && r.custom.MatchString(s) {
		s = r.custom.ReplaceAllString(s, Masked)
	}
	if strings.ContainsAny(s, "?&;") && strings.Contains(s, "=") && r.query.MatchString(s) {
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
		return rewriteChildren(v, false, func(k string, _ int, e any) (any, bool) {
			if r.secretKey(k) {
				return Masked, e != Masked
			}
			return r.value(e)
		})
	case []any:
		return rewriteChildren(v, false, func(_ string, _ int, e any) (any, bool) { return r.value(e) })
	}
	return v, false
}

// object masks secrets in a JSON object, copying it only if it must.
func (r *redactor) object(m map[string]any) map[string]any {
	out, _ := r.value(m)
	return out.(map[string]any)
}

// record masks secrets in rec's arguments, result, error and notes, and
// returns rec. The record is the call's own, but what it points to may be
// shared (the caller's arguments, a result a source keeps, an error kept
// for every caller): a part is copied only when something in it is
// masked, and the copy replaces it in rec. The tool received the real
// values; the record only documents them.
func (r *redactor) record(rec *tool.Record) *tool.Record {
	if rec.Arguments != nil {
		rec.Arguments = r.object(rec.Arguments)
	}
	if rec.Result != nil {
		rec.Result = r.result(rec.Result)
	}
	if e := rec.Error; e != nil {
		if msg, detail := r.text(e.Message), r.text(e.Detail); msg != e.Message || detail != e.Detail {
			c := *e
			c.Message, c.Detail = msg, detail
			rec.Error = &c
		}
	}
	var notes []tool.Note
	for i, n := range rec.Notes {
		msg := r.text(n.Message)
		data, masked := n.Data, false
		if data != nil {
			var v any
			v, masked = r.value(data)
			data = v.(map[string]any)
		}
		if msg == n.Message && !masked {
			continue
		}
		if notes == nil {
			notes = slices.Clone(rec.Notes)
		}
		notes[i].Message, notes[i].Data = msg, data
	}
	if notes != nil {
		rec.Notes = notes
	}
	return rec
}

// result returns res with secrets masked: res itself when there are none.
func (r *redactor) result(res *tool.Result) *tool.Result {
	var content []tool.Content
	for i, c := range res.Content {
		text := r.text(c.Text)
		var rtext string
		if c.Resource != nil {
			rtext = r.text(c.Resource.Text)
		}
		if text == c.Text && (c.Resource == nil || rtext == c.Resource.Text) {
			continue
		}
		if content == nil {
			content = slices.Clone(res.Content)
		}
		content[i].Text = text
		if c.Resource != nil {
			rc := *c.Resource
			rc.Text = rtext
			content[i].Resource = &rc
		}
	}
	structured, masked := res.Structured, false
	if structured != nil {
		structured, masked = r.value(structured)
	}
	if content == nil && !masked {
		return res
	}
	out := *res
	if content != nil {
		out.Content = content
	}
	out.Structured = structured
	return &out
}
