package builtin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/toolmux/toolmux/tool"
)

// maxLinesShown bounds the line numbers edit's result lists.
const maxLinesShown = 10

func (s *Source) editTool() tool.Tool {
	return tool.Tool{
		Server: ServerName,
		Name:   Edit,
		Title:  "Edit file",
		Description: fmt.Sprintf(`Replaces exact text in a file of the workspace: every occurrence of old_string becomes new_string, and the rest of the file is left untouched. The file is replaced atomically and keeps its permissions.
old_string must match the file exactly, including whitespace, indentation and line breaks: read_file the file first and copy the text from it (without line numbers). Include enough surrounding lines to make old_string unique. By default exactly one occurrence is expected; if old_string occurs several times the edit is refused and the count is reported: add context to old_string, or set expected_replacements to the number of occurrences to replace them all. In a file with CRLF line endings, old_string and new_string written with LF line endings are matched and written with CRLF.
To create a new file, give an empty old_string and the content as new_string (missing parent directories are created); an empty old_string on a file that exists is refused. To replace a whole file, use write_file. Files over %s cannot be edited, and the edited file may not exceed %s.
Paths are relative to the workspace root (%s) or absolute inside it; paths outside the workspace are refused.`,
			size(s.limits.maxReadBytes), size(s.limits.maxWriteBytes), s.ws.root),
		InputSchema: objectSchema(map[string]any{
			"path": map[string]any{
				"type":        "string",
				"description": "The file to edit: relative to the workspace root, or absolute inside it.",
			},
			"old_string": map[string]any{
				"type":        "string",
				"description": "The exact text to replace, copied from the file with its whitespace and a few lines of context so that it is unique. Empty to create a new file.",
			},
			"new_string": map[string]any{
				"type":        "string",
				"description": "The text to put in its place (empty to delete old_string). Must differ from old_string.",
			},
			"expected_replacements": map[string]any{
				"type":        "integer",
				"minimum":     1,
				"description": "How many occurrences of old_string to replace; the edit is refused if the file has a different number. Defaults to 1.",
			},
		}, "path", "old_string", "new_string"),
		Annotations: fileWriter("Edit file", false),
	}
}

// edit's errors follow one rule: invalid_tool_params when the arguments
// are wrong whatever the file holds (an empty old_string for a file that
// exists, old_string equal to new_string, a directory), tool_error when the
// call is well formed but the file's content does not fit it (no match, a
// different number of matches, binary, too large), file_not_found when
// there is no file to edit.
func (s *Source) edit(ctx context.Context, a args) (*tool.Result, error) {
	if err := a.Check("path", "old_string", "new_string", "expected_replacements"); err != nil {
		return nil, err
	}
	p, _, err := a.String("path", true)
	if err != nil {
		return nil, err
	}
	oldS, err := a.Text("old_string")
	if err != nil {
		return nil, err
	}
	newS, err := a.Text("new_string")
	if err != nil {
		return nil, err
	}
	expected, hasExpected, err := a.Int("expected_replacements", 1)
	if err != nil {
		return nil, err
	}
	if !hasExpected {
		expected = 1
	}
	if oldS == newS {
		return nil, a.Invalid("old_string and new_string are identical, so the edit would change nothing; give the new text as new_string")
	}
	loc, err := s.ws.resolveNew("path", p)
	if err != nil {
		return nil, err
	}
	r, err := s.ws.open()
	if err != nil {
		return nil, err
	}
	defer r.Close()

	fi, statErr := r.Lstat(loc.rel)
	exists := statErr == nil
	if statErr != nil && !errors.Is(statErr, fs.ErrNotExist) {
		return nil, fsError("path", p, statErr)
	}

	// An empty old_string creates a file, as in Gemini CLI: it is how a
	// model that only knows edit makes a new file. On a file that exists
	// it would match everywhere, so it is refused rather than guessed at.
	if oldS == "" {
		if exists {
			if fi.IsDir() {
				return nil, writable(r, loc, p, fi)
			}
			return nil, a.Invalid("old_string is empty, which creates a new file, but %s already exists; to change it, give the exact text to replace as old_string, or use write_file to replace the whole file", loc.display())
		}
		if int64(len(newS)) > s.limits.maxWriteBytes {
			return nil, a.Invalid("new_string is %d bytes, over the limit of %s for a file", len(newS), size(s.limits.maxWriteBytes))
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		w, err := s.replaceFile(r, loc, p, []byte(newS))
		if err != nil {
			return nil, err
		}
		msg := fmt.Sprintf("Created %s (%s).", loc.display(), plural(len(newS), "byte", "bytes"))
		if w.madeDirs {
			msg += " Missing parent directories were created."
		}
		res := tool.TextResult(msg)
		res.Structured = map[string]any{"path": loc.display(), "replacements": 0, "created": true}
		return res, nil
	}
	if !exists {
		return nil, &tool.Error{Kind: tool.KindFileNotFound,
			Message: fmt.Sprintf("path %q does not exist in the workspace %s; to create a file, use write_file (or edit with an empty old_string)", p, s.ws.root)}
	}
	if err := writable(r, loc, p, fi); err != nil {
		return nil, err
	}
	data, err := readRegular(r, loc.rel, s.limits.maxReadBytes)
	if err != nil {
		switch err := err.(type) {
		case *notRegularError:
			return nil, &tool.Error{Kind: tool.KindInvalidParams,
				Message: fmt.Sprintf("path %q is not a regular file (it is a %s)", p, err.kind)}
		case *tooLargeError:
			return nil, &tool.Error{Kind: tool.KindToolError,
				Message: fmt.Sprintf("file %q is %d bytes, over edit's limit of %s", p, err.size, size(s.limits.maxReadBytes))}
		}
		return nil, fsError("path", p, err)
	}
	if isBinary(data) {
		return nil, &tool.Error{Kind: tool.KindToolError,
			Message: fmt.Sprintf("%s is a binary file; edit changes text files only", loc.display())}
	}
	content := string(data)

	count := strings.Count(content, oldS)
	crlf := false
	if count == 0 && strings.Contains(content, "\r\n") && strings.Contains(oldS, "\n") && !strings.Contains(oldS, "\r\n") {
		// Models write LF; a file checked out on Windows has CRLF. Matching
		// with the file's line endings is what the model meant.
		if c := strings.Count(content, toCRLF(oldS)); c > 0 {
			count, crlf = c, true
			oldS, newS = toCRLF(oldS), toCRLF(newS)
		}
	}
	switch {
	case count == 0:
		msg := fmt.Sprintf("old_string was not found in %s, so nothing was changed. It must match the file exactly, including whitespace and line breaks; use read_file to see the current content and copy the text from it.", loc.display())
		if line, n := fuzzyFind(content, oldS); n > 0 {
			msg += fmt.Sprintf(" Ignoring differences in whitespace (indentation, tabs or spaces, line breaks), it matches at line %d", line)
			if n > 1 {
				msg += fmt.Sprintf(" (and %s)", plural(n-1, "other place", "other places"))
			}
			msg += ": copy that text exactly."
		}
		return nil, &tool.Error{Kind: tool.KindToolError, Message: msg}
	case count != expected && expected == 1:
		return nil, &tool.Error{Kind: tool.KindToolError,
			Message: fmt.Sprintf("old_string occurs %d times in %s (at lines %s), so nothing was changed; add more surrounding lines to old_string to make it unique, or set expected_replacements to %d to replace every occurrence",
				count, loc.display(), lineList(content, oldS), count)}
	case count != expected:
		return nil, &tool.Error{Kind: tool.KindToolError,
			Message: fmt.Sprintf("expected %s of old_string but found %d in %s (at lines %s), so nothing was changed; set expected_replacements to %d, or change old_string to match exactly the places to replace",
				plural(expected, "occurrence", "occurrences"), count, loc.display(), lineList(content, oldS), count)}
	}

	lines := lineList(content, oldS)
	updated := strings.ReplaceAll(content, oldS, newS)
	if n := int64(len(updated)); n > s.limits.maxWriteBytes {
		return nil, &tool.Error{Kind: tool.KindToolError,
			Message: fmt.Sprintf("the edited %s would be %d bytes, over the limit of %s; nothing was changed", loc.display(), n, size(s.limits.maxWriteBytes))}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if _, err := s.replaceFile(r, loc, p, []byte(updated)); err != nil {
		return nil, err
	}
	at := "line"
	if count > 1 {
		at = "lines"
	}
	msg := fmt.Sprintf("Edited %s: replaced %s (at %s %s).", loc.display(), plural(count, "occurrence", "occurrences"), at, lines)
	if crlf {
		msg += " The file's CRLF line endings were kept."
	}
	res := tool.TextResult(msg)
	res.Structured = map[string]any{"path": loc.display(), "replacements": count, "created": false}
	return res, nil
}

// toCRLF turns the LF line endings of s into CRLF.
func toCRLF(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }

// lineList names the lines where the occurrences of sub in content start,
// in the numbering of read_file and grep (from 1), at most maxLinesShown.
func lineList(content, sub string) string {
	var b strings.Builder
	line, at, shown := 1, 0, 0
	for {
		i := strings.Index(content[at:], sub)
		if i < 0 {
			break
		}
		line += strings.Count(content[at:at+i], "\n")
		if shown == maxLinesShown {
			b.WriteString(", ...")
			break
		}
		if shown > 0 {
			b.WriteString(", ")
		}
		fmt.Fprint(&b, line)
		shown++
		line += strings.Count(sub, "\n")
		at += i + len(sub)
	}
	return b.String()
}

// fuzzyFind looks for sub in content with every run of whitespace reduced
// to one space and sub's surrounding whitespace ignored. It returns the
// line of the first match and the number of matches; 0 matches when sub
// is only whitespace.
func fuzzyFind(content, sub string) (line, n int) {
	needle, _ := squeeze(strings.TrimSpace(sub))
	if needle == "" {
		return 0, 0
	}
	hay, offsets := squeeze(content)
	first := strings.Index(hay, needle)
	if first < 0 {
		return 0, 0
	}
	// Overlapping matches count: each is a place the model may have meant.
	for i := first; i >= 0; {
		n++
		next := strings.Index(hay[i+1:], needle)
		if next < 0 {
			break
		}
		i += 1 + next
	}
	return 1 + strings.Count(content[:offsets[first]], "\n"), n
}

// squeeze reduces every run of whitespace in s to one space. offsets maps
// each byte of the result to the offset in s it came from.
func squeeze(s string) (string, []int) {
	var b strings.Builder
	offsets := make([]int, 0, len(s))
	space := false
	for i, r := range s {
		if unicode.IsSpace(r) {
			if !space {
				b.WriteByte(' ')
				offsets = append(offsets, i)
			}
			space = true
			continue
		}
		space = false
		b.WriteRune(r)
		for range utf8.RuneLen(r) {
			offsets = append(offsets, i)
		}
	}
	return b.String(), offsets
}
