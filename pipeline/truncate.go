package pipeline

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

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

// NewTruncate returns the truncation middleware: past the limit, the model
// sees the head and the tail of a result's text with a marker in between;
// the full text is saved under spillDir ("": not saved).
func NewTruncate(cfg TruncateOptions, spillDir string) (Middleware, error) {
	t, err := newTruncator(cfg, spillDir, false)
	if err != nil {
		return nil, err
	}
	return t.middleware, nil
}

func newTruncator(cfg TruncateOptions, spillDir string, lowContext bool) (*truncator, error) {
	t := &truncator{
		max:        cfg.MaxChars,
		lowMax:     cfg.LowContext.MaxChars,
		lowContext: lowContext || cfg.LowContext.Enabled,
		spillDir:   spillDir,
	}
	if t.max <= 0 {
		t.max = DefaultMaxChars
	}
	if t.lowMax <= 0 {
		t.lowMax = DefaultLowContextChars
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

func parseLimits(ls []ToolLimit) ([]toolLimit, error) {
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

func (t *truncator) middleware(next Handler) Handler { return afterMiddleware(t.after)(next) }

func (t *truncator) after(_ context.Context, _ tool.Call, rec *tool.Record) *tool.Record {
	if rec.Result == nil {
		return rec
	}
	limit := t.limit(rec.Server, rec.Tool)
	src := textOf(rec.Result)
	total := src.chars()
	if total <= limit && !src.spilled() {
		return rec
	}
	path, src, err := t.spill(rec, src)
	cut := cutMiddle(src, total, limit, path, err)
	res := *rec.Result
	res.Content = []tool.Content{{Type: tool.ContentText, Text: cut}}
	for _, c := range rec.Result.Content {
		if !hasText(c) {
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
}

// textView is Result.Text without the copy when the text is one part, as
// it nearly always is: the rules that read a result's text (rollback,
// instructions) then cost nothing more for a large one.
func textView(r *tool.Result) string {
	var only string
	n := 0
	for _, c := range r.Content {
		if !hasText(c) {
			continue
		}
		if n++; n > 1 {
			return r.Text()
		}
		only = c.Text
		if c.Type == tool.ContentResource {
			only = c.Resource.Text
		}
	}
	return only
}

// hasText reports whether a part holds text (what Result.Text joins).
func hasText(c tool.Content) bool {
	return c.Type == tool.ContentText || c.Type == tool.ContentResource && c.Resource != nil && c.Resource.Text != ""
}

// segment is the text of one part: held in memory, or in the file it was
// streamed to when it was too large to hold (Content.Spill), the part
// holding only its beginning and end.
type segment struct {
	text  string // the text, or a spilled part's beginning and end
	file  string // the file with the whole text of a spilled part
	size  int64  // bytes of the whole text
	runes int
}

// textSource is a result's text as Result.Text joins it (parts separated
// by newlines), without joining it: a large text is read from its file a
// piece at a time, never held whole.
type textSource []segment

func textOf(r *tool.Result) textSource {
	var src textSource
	for _, c := range r.Content {
		if !hasText(c) {
			continue
		}
		text := c.Text
		if c.Type == tool.ContentResource {
			text = c.Resource.Text
		}
		seg := segment{text: text, size: int64(len(text))}
		if sp := c.Spill; sp != nil && sp.Path != "" {
			seg.file, seg.size, seg.runes = sp.Path, sp.Bytes, int(sp.Chars)
		} else {
			seg.runes = utf8.RuneCountInString(text)
		}
		src = append(src, seg)
	}
	return src
}

func (src textSource) chars() int {
	n := max(len(src)-1, 0)
	for _, s := range src {
		n += s.runes
	}
	return n
}

func (src textSource) spilled() bool {
	for _, s := range src {
		if s.file != "" {
			return true
		}
	}
	return false
}

// writeTo writes the whole text to w, copying spilled parts from their
// files.
func (src textSource) writeTo(w io.Writer) error {
	for i, s := range src {
		if i > 0 {
			if _, err := io.WriteString(w, "\n"); err != nil {
				return err
			}
		}
		if s.file == "" {
			if _, err := io.WriteString(w, s.text); err != nil {
				return err
			}
			continue
		}
		f, err := os.Open(s.file)
		if err != nil {
			return err
		}
		_, err = io.Copy(w, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// prefix returns the first n characters of the text.
func (src textSource) prefix(n int) string {
	var b strings.Builder
	for i, s := range src {
		if n <= 0 {
			break
		}
		if i > 0 {
			b.WriteByte('\n')
			n--
		}
		p := s.prefix(n)
		b.WriteString(p)
		n -= utf8.RuneCountInString(p)
	}
	return b.String()
}

// suffix returns the last n characters of the text.
func (src textSource) suffix(n int) string {
	var parts []string
	for i := len(src) - 1; i >= 0 && n > 0; i-- {
		p := src[i].suffix(n)
		parts = append(parts, p)
		n -= utf8.RuneCountInString(p)
		if i > 0 && n > 0 {
			parts = append(parts, "\n")
			n--
		}
	}
	var b strings.Builder
	for i := len(parts) - 1; i >= 0; i-- {
		b.WriteString(parts[i])
	}
	return b.String()
}

// prefix returns the first n characters of a part, reading at most 4n
// bytes of its file. A file that cannot be read leaves the part's own
// beginning.
func (s segment) prefix(n int) string {
	if s.file != "" {
		if f, err := os.Open(s.file); err == nil {
			defer f.Close()
			b, err := io.ReadAll(io.LimitReader(f, int64(n)*utf8.UTFMax))
			if err == nil {
				return prefixRunes(string(b), n)
			}
		}
	}
	return prefixRunes(s.text, n)
}

// suffix returns the last n characters of a part, reading at most 4n
// bytes of its file.
func (s segment) suffix(n int) string {
	if s.file != "" {
		if f, err := os.Open(s.file); err == nil {
			defer f.Close()
			off := max(s.size-int64(n)*utf8.UTFMax, 0)
			if _, err := f.Seek(off, io.SeekStart); err == nil {
				if b, err := io.ReadAll(f); err == nil {
					if off > 0 {
						// Start at a character boundary.
						for len(b) > 0 && !utf8.RuneStart(b[0]) {
							b = b[1:]
						}
					}
					return suffixRunes(string(b), n)
				}
			}
		}
	}
	return suffixRunes(s.text, n)
}

// spill writes the whole text under the data directory, one file per call,
// grouped by task, streaming it (a spilled part is copied from its file,
// or its file is moved there when it is the whole text); the files of
// spilled parts are removed once copied. Without a data directory, a
// spilled text stays where it was spilled. It returns the text as it now
// is: the file written, when there is one.
func (t *truncator) spill(rec *tool.Record, src textSource) (string, textSource, error) {
	dir := t.spillDir
	if dir == "" {
		first := ""
		for _, s := range src {
			if s.file != "" {
				first = s.file
				break
			}
		}
		if first == "" {
			return "", src, fmt.Errorf("no data directory is configured")
		}
		if len(src) == 1 {
			return first, src, nil
		}
		dir = filepath.Dir(filepath.Dir(first))
	}
	task := rec.Task
	if task == "" {
		task = "calls"
	}
	dir = filepath.Join(dir, tool.Sanitize(task))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", src, err
	}
	path := filepath.Join(dir, tool.Sanitize(rec.ID)+"-"+tool.Sanitize(rec.Server)+"-"+tool.Sanitize(rec.Tool)+".txt")
	if len(src) == 1 && src[0].file != "" && os.Rename(src[0].file, path) == nil {
		return path, textSource{{text: src[0].text, file: path, size: src[0].size, runes: src[0].runes}}, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return "", src, err
	}
	cw := &countWriter{w: f}
	w := bufio.NewWriterSize(cw, 64<<10)
	err = src.writeTo(w)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", src, err
	}
	if !src.spilled() {
		return path, src, nil
	}
	for _, s := range src {
		if s.file != "" {
			_ = os.Remove(s.file)
		}
	}
	return path, textSource{{file: path, size: cw.n, runes: src.chars()}}, nil
}

// countWriter counts what it writes.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// cutMiddle keeps the head and the tail of the text (total runes) within
// limit runes, marker included, cutting on rune boundaries.
func cutMiddle(src textSource, total, limit int, path string, spillErr error) string {
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
	if head+tail >= total {
		return src.prefix(total)
	}
	var b strings.Builder
	b.Grow(len(where) + 100 + 4*room)
	b.WriteString(src.prefix(head))
	b.WriteString(marker(total - head - tail))
	b.WriteString(src.suffix(tail))
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
