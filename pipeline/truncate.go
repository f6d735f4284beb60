package pipeline

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/internal/toolglob"
	"github.com/toolmux/toolmux/tool"
)

// headShare is the part of the limit given to the head of a cut output; the
// rest goes to its tail, where errors and summaries tend to be.
const headShare = 0.7

type toolLimit struct {
	pattern toolglob.Pattern
	max     int
}

// truncator keeps results within what a model can use: past the limit, the
// model sees the head and the tail with a marker in between saying how much
// was cut and which file holds the full text.
type truncator struct {
	max, lowMax int
	tools, low  []toolLimit
	lowContext  bool
	spillDir    string
}

func newTruncator(cfg config.Truncate, spillDir string, lowContext bool) (*truncator, error) {
	t := &truncator{
		max:        cfg.MaxChars,
		lowMax:     cfg.LowContext.MaxChars,
		lowContext: lowContext || cfg.LowContext.Enabled,
		spillDir:   spillDir,
	}
	if t.max <= 0 {
		t.max = config.DefaultMaxChars
	}
	if t.lowMax <= 0 {
		t.lowMax = config.DefaultLowContextChars
	}
	var err error
	if t.tools, err = parseLimits(cfg.Tools); err != nil {
		return nil, err
	}
	if t.low, err = parseLimits(cfg.LowContext.Tools); err != nil {
		return nil, err
	}
	return t, nil
}

func parseLimits(ls []config.ToolLimit) ([]toolLimit, error) {
	out := make([]toolLimit, 0, len(ls))
	for _, l := range ls {
		p, err := toolglob.Parse(l.Tools, true)
		if err != nil {
			return nil, err
		}
		out = append(out, toolLimit{p, l.MaxChars})
	}
	return out, nil
}

func firstLimit(ls []toolLimit, server, name string, def int) int {
	for _, l := range ls {
		if l.pattern.Match(server, name) {
			return l.max
		}
	}
	return def
}

// limit returns the character limit for a tool. Low-context mode can only
// tighten: the smaller of the normal and the low-context limit applies.
func (t *truncator) limit(server, name string) int {
	n := firstLimit(t.tools, server, name, t.max)
	if t.lowContext {
		n = min(n, firstLimit(t.low, server, name, t.lowMax))
	}
	return n
}

func (t *truncator) middleware(next Handler) Handler {
	return HandlerFunc(func(ctx context.Context, call tool.Call) *tool.Record {
		rec := next.Call(ctx, call)
		if rec.Result == nil {
			return rec
		}
		limit := t.limit(rec.Server, rec.Tool)
		text := rec.Result.Text()
		total := utf8.RuneCountInString(text)
		if total <= limit {
			return rec
		}
		path, err := t.spill(rec, text)
		cut := cutMiddle(text, total, limit, path, err)
		res := *rec.Result
		res.Content = []tool.Content{{Type: tool.ContentText, Text: cut}}
		for _, c := range rec.Result.Content {
			if c.Type != tool.ContentText && !(c.Type == tool.ContentResource && c.Resource != nil && c.Resource.Text != "") {
				res.Content = append(res.Content, c)
			}
		}
		rec.Result = &res
		data := map[string]any{"kind": string(tool.KindOutputTruncated), "original_chars": total,
			"kept_chars": utf8.RuneCountInString(cut), "limit": limit}
		msg := fmt.Sprintf("output cut from %d to %d characters", total, limit)
		if err == nil {
			data["spill_path"] = path
			msg += "; full text saved to " + path
		} else {
			data["spill_error"] = err.Error()
			msg += "; the full text could not be saved: " + err.Error()
		}
		rec.Note("truncate", msg, data)
		return rec
	})
}

// spill writes the full text under the data directory, one file per call,
// grouped by task.
func (t *truncator) spill(rec *tool.Record, text string) (string, error) {
	if t.spillDir == "" {
		return "", fmt.Errorf("no data directory is configured")
	}
	task := rec.Task
	if task == "" {
		task = "calls"
	}
	dir := filepath.Join(t.spillDir, tool.Sanitize(task))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, tool.Sanitize(rec.ID)+"-"+tool.Sanitize(rec.Server)+"-"+tool.Sanitize(rec.Tool)+".txt")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		return "", err
	}
	return path, nil
}

// cutMiddle keeps the head and the tail of text (total runes) within limit
// runes, marker included, cutting on rune boundaries.
func cutMiddle(text string, total, limit int, path string, spillErr error) string {
	where := "the full output is in " + path
	if spillErr != nil {
		where = "the full output could not be saved"
	}
	marker := func(cut int) string {
		return fmt.Sprintf("\n\n[... toolmux cut %d of %d characters here; %s ...]\n\n", cut, total, where)
	}
	// Size the room with the widest possible count, then say the exact one:
	// the result never exceeds limit and the count is true.
	room := max(limit-utf8.RuneCountInString(marker(total)), 0)
	head := int(float64(room) * headShare)
	tail := room - head
	var b strings.Builder
	b.Grow(len(where) + 100 + 4*room)
	b.WriteString(prefixRunes(text, head))
	b.WriteString(marker(total - head - tail))
	b.WriteString(suffixRunes(text, tail))
	return b.String()
}

func prefixRunes(s string, n int) string {
	i := 0
	for ; n > 0 && i < len(s); n-- {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return s[:i]
}

func suffixRunes(s string, n int) string {
	i := len(s)
	for ; n > 0 && i > 0; n-- {
		_, size := utf8.DecodeLastRuneInString(s[:i])
		i -= size
	}
	return s[i:]
}
