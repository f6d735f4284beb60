package builtin

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/toolmux/toolmux/tool"
)

// sniffLen is how much of a file decides whether it is binary: a NUL byte in
// the first 8 KiB, as git and Gemini CLI judge it.
const sniffLen = 8 << 10

// imageTypes are the image formats read_file returns as images: the ones
// every multimodal model API accepts.
var imageTypes = map[string]bool{
	"image/png":  true,
	"image/jpeg": true,
	"image/gif":  true,
	"image/webp": true,
}

// imageExts are the extensions of imageTypes. They only explain a mismatch:
// the content decides, since a model API rejects an image whose bytes are not
// what its MIME type says (an LFS pointer named logo.png is text).
var imageExts = map[string]bool{".png": true, ".jpg": true, ".jpeg": true, ".gif": true, ".webp": true}

func (s *Source) readFileTool() tool.Tool {
	return tool.Tool{
		Server: ServerName,
		Name:   ReadFile,
		Title:  "Read file",
		Description: fmt.Sprintf(`Reads a file of the workspace. A text file is returned as text, up to %d lines per call; lines longer than %d characters are cut, with a marker. When only part of the file is shown, a note at the end says which lines were shown and the offset to continue from: to read a large file, call again with offset (0-based line to start at) and limit (number of lines), or use grep first to find the lines you need.
PNG, JPEG, GIF and WebP images are returned as images. Other binary files are described (size and type), not returned. Files over %s are refused.
Paths are relative to the workspace root (%s) or absolute inside it; paths outside the workspace are refused.`,
			s.limits.maxLines, s.limits.maxLineLength, size(s.limits.maxReadBytes), s.ws.root),
		InputSchema: objectSchema(map[string]any{
			"path": map[string]any{
				"type":        "string",
				"description": "The file to read: relative to the workspace root, or absolute inside it.",
			},
			"offset": map[string]any{
				"type":        "integer",
				"minimum":     0,
				"description": "The 0-based line number to start reading at. Omit to start at the beginning. Use with limit to page through large files.",
			},
			"limit": map[string]any{
				"type":        "integer",
				"minimum":     1,
				"description": fmt.Sprintf("The number of lines to read. Omit to read up to %d lines; larger values are lowered to %d.", s.limits.maxLines, s.limits.maxLines),
			},
		}, "path"),
		Annotations: readOnly("Read file"),
	}
}

func (s *Source) readFile(ctx context.Context, a args) (*tool.Result, error) {
	if err := a.Check("path", "offset", "limit"); err != nil {
		return nil, err
	}
	loc, p, err := s.pathArg(a, "path", true)
	if err != nil {
		return nil, err
	}
	offset, _, err := a.Int("offset", 0)
	if err != nil {
		return nil, err
	}
	limit, hasLimit, err := a.Int("limit", 1)
	if err != nil {
		return nil, err
	}
	if !hasLimit || limit > s.limits.maxLines {
		limit = s.limits.maxLines
	}

	r, err := s.ws.open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	data, err := readRegular(r, loc.rel, s.limits.maxReadBytes)
	if err != nil {
		switch err := err.(type) {
		case *notRegularError:
			if err.dir {
				return nil, &tool.Error{Kind: tool.KindInvalidParams,
					Message: fmt.Sprintf("path %q is a directory, not a file; use list_directory to see its entries", p)}
			}
			return nil, &tool.Error{Kind: tool.KindInvalidParams,
				Message: fmt.Sprintf("path %q is not a regular file (it is a %s)", p, err.kind)}
		case *tooLargeError:
			return nil, &tool.Error{Kind: tool.KindToolError,
				Message: fmt.Sprintf("file %q is %d bytes, over read_file's limit of %s; use grep to find the lines you need", p, err.size, size(s.limits.maxReadBytes))}
		}
		return nil, fsError("path", p, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	mime := http.DetectContentType(data)
	if imageTypes[mime] {
		return &tool.Result{Content: []tool.Content{
			{Type: tool.ContentImage, Data: data, MIMEType: mime},
			{Type: tool.ContentText, Text: fmt.Sprintf("[image %s: %s, %d bytes]", loc.display(), mime, len(data))},
		}}, nil
	}
	if isBinary(data) {
		msg := fmt.Sprintf("%s is a binary file of %d bytes (detected type: %s); its content is not shown. read_file returns text files, and PNG, JPEG, GIF and WebP images.",
			loc.display(), len(data), mime)
		if ext := strings.ToLower(filepath.Ext(loc.rel)); imageExts[ext] {
			msg += fmt.Sprintf(" Despite its %s extension, its content is not a recognised image.", ext)
		}
		return tool.TextResult(msg), nil
	}
	return s.textResult(loc, data, offset, limit)
}

// textResult selects lines [offset, offset+limit) of data.
func (s *Source) textResult(loc location, data []byte, offset, limit int) (*tool.Result, error) {
	if len(data) == 0 {
		if offset > 0 {
			return nil, &tool.Error{Kind: tool.KindInvalidParams,
				Message: fmt.Sprintf("offset %d is past the end of %s, which is empty", offset, loc.display())}
		}
		return tool.TextResult(fmt.Sprintf("[%s is empty]", loc.display())), nil
	}
	// A final newline ends the last line; it does not start another.
	total := bytes.Count(data, []byte{'\n'})
	if data[len(data)-1] != '\n' {
		total++
	}
	if offset >= total {
		return nil, &tool.Error{Kind: tool.KindInvalidParams,
			Message: fmt.Sprintf("offset %d is past the end of %s, which has %s (offsets are 0-based, so the last line is offset %d)",
				offset, loc.display(), plural(total, "line", "lines"), total-1)}
	}
	end := min(total, offset+limit)

	var b strings.Builder
	cut := 0
	rest := data
	for i := 0; i < end; i++ {
		line, after, _ := bytes.Cut(rest, []byte{'\n'})
		rest = after
		if i < offset {
			continue
		}
		line = bytes.TrimSuffix(line, []byte{'\r'})
		text, wasCut := s.cutLine(line)
		if wasCut {
			cut++
		}
		b.WriteString(text)
		if i < end-1 {
			b.WriteByte('\n')
		}
	}
	var notes []string
	switch {
	case end < total:
		notes = append(notes, fmt.Sprintf("[showing lines %d-%d of %d; use offset=%d to continue]", offset+1, end, total, end))
	case offset > 0:
		notes = append(notes, fmt.Sprintf("[showing lines %d-%d of %d; end of file]", offset+1, end, total))
	}
	if cut > 0 {
		notes = append(notes, fmt.Sprintf("[%s longer than %d characters cut]", plural(cut, "line", "lines"), s.limits.maxLineLength))
	}
	if len(notes) > 0 {
		b.WriteString("\n\n")
		b.WriteString(strings.Join(notes, "\n"))
	}
	return tool.TextResult(b.String()), nil
}

// cutLine returns line as valid UTF-8, cut to the maximum line length.
func (s *Source) cutLine(line []byte) (string, bool) {
	limit := s.limits.maxLineLength
	if len(line) <= limit {
		return strings.ToValidUTF8(string(line), "\uFFFD"), false
	}
	n := utf8.RuneCount(line)
	if n <= limit {
		return strings.ToValidUTF8(string(line), "\uFFFD"), false
	}
	i, count := 0, 0
	for count < limit {
		_, size := utf8.DecodeRune(line[i:])
		i += size
		count++
	}
	return strings.ToValidUTF8(string(line[:i]), "\uFFFD") + fmt.Sprintf(" ... [line cut: %d of %d characters shown]", limit, n), true
}

// isBinary reports a NUL byte in the first sniffLen bytes.
func isBinary(data []byte) bool {
	return bytes.IndexByte(data[:min(len(data), sniffLen)], 0) >= 0
}

// notRegularError reports a path that is not a regular file.
type notRegularError struct {
	dir  bool
	kind string
}

func (e *notRegularError) Error() string { return "not a regular file: " + e.kind }

// tooLargeError reports a file over the size limit.
type tooLargeError struct{ size int64 }

func (e *tooLargeError) Error() string { return fmt.Sprintf("file of %d bytes is too large", e.size) }

// openRegular opens rel through r, only if it is a regular file. It opens
// without blocking, so a FIFO swapped in after the walk saw a file cannot
// hang the call, and checks the type on the open descriptor, which is what
// will be read.
func openRegular(r *os.Root, rel string) (*os.File, os.FileInfo, error) {
	f, err := r.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		kind := "special file"
		switch {
		case fi.IsDir():
			kind = "directory"
		case fi.Mode()&os.ModeNamedPipe != 0:
			kind = "named pipe"
		case fi.Mode()&os.ModeSocket != 0:
			kind = "socket"
		case fi.Mode()&os.ModeDevice != 0:
			kind = "device"
		}
		return nil, nil, &notRegularError{dir: fi.IsDir(), kind: kind}
	}
	return f, fi, nil
}

// readRegular reads the regular file rel, up to limit bytes. The limit is
// enforced on the bytes read too, in case the file grows after the stat.
func readRegular(r *os.Root, rel string, limit int64) ([]byte, error) {
	f, fi, err := openRegular(r, rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.Size() > limit {
		return nil, &tooLargeError{size: fi.Size()}
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, &tooLargeError{size: int64(len(data))}
	}
	return data, nil
}
