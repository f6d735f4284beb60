package builtin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/toolmux/toolmux/tool"
)

// newFileMode is the mode of files write_file and edit create, before the
// umask, as editors and os.WriteFile callers commonly use.
const newFileMode fs.FileMode = 0o644

// newDirMode is the mode of the parent directories they create.
const newDirMode fs.FileMode = 0o755

func (s *Source) writeFileTool() tool.Tool {
	return tool.Tool{
		Server: ServerName,
		Name:   WriteFile,
		Title:  "Write file",
		Description: fmt.Sprintf(`Writes content to a file of the workspace, replacing the whole file if it exists and creating it (and any missing parent directories) if it does not. The result says whether the file was created or overwritten and how many bytes were written.
The file is replaced atomically: it is never left half-written, and an overwritten file keeps its permissions. Content is limited to %s. Writing to a directory is refused.
To change part of an existing file, prefer edit, which replaces exact text and leaves the rest of the file untouched; read_file first if you need the current content.
Paths are relative to the workspace root (%s) or absolute inside it; paths outside the workspace are refused.`,
			size(s.limits.maxWriteBytes), s.ws.root),
		InputSchema: objectSchema(map[string]any{
			"path": map[string]any{
				"type":        "string",
				"description": "The file to write: relative to the workspace root, or absolute inside it.",
			},
			"content": map[string]any{
				"type":        "string",
				"description": "The complete new content of the file. It may be empty.",
			},
		}, "path", "content"),
		Annotations: fileWriter("Write file", true),
	}
}

func (s *Source) writeFile(ctx context.Context, a args) (*tool.Result, error) {
	if err := a.Check("path", "content"); err != nil {
		return nil, err
	}
	p, _, err := a.String("path", true)
	if err != nil {
		return nil, err
	}
	content, err := a.Text("content")
	if err != nil {
		return nil, err
	}
	if n := int64(len(content)); n > s.limits.maxWriteBytes {
		return nil, a.Invalid("argument \"content\" is %d bytes, over write_file's limit of %s; write the file in smaller parts (write_file for the first part, then edit to add the rest) or generate it with a command",
			n, size(s.limits.maxWriteBytes))
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
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w, err := s.replaceFile(r, loc, p, []byte(content))
	if err != nil {
		return nil, err
	}

	var msg string
	if w.created {
		msg = fmt.Sprintf("Created %s (%s).", loc.display(), plural(len(content), "byte", "bytes"))
		if w.madeDirs {
			msg += " Missing parent directories were created."
		}
	} else {
		msg = fmt.Sprintf("Overwrote %s (%s; it held %s).", loc.display(),
			plural(len(content), "byte", "bytes"), plural(int(w.oldSize), "byte", "bytes"))
	}
	res := tool.TextResult(msg)
	res.Structured = map[string]any{
		"path":    loc.display(),
		"bytes":   len(content),
		"created": w.created,
	}
	return res, nil
}

// written describes a replaceFile.
type written struct {
	created  bool
	madeDirs bool
	oldSize  int64
}

// replaceFile makes data the content of the file loc, creating it and its
// missing parent directories if needed. It refuses what is not a regular
// file, and a file the operating system would not let us write to: the
// rename below would otherwise replace a read-only file that an in-place
// write could not touch.
//
// The write is atomic: the data goes to a temporary file in the same
// directory, is flushed to disk, and is renamed over the target, all
// through r, so a crash leaves either the old file or the new one. A side
// benefit is that a hard link to a file outside the workspace is replaced
// by a new file rather than written through.
func (s *Source) replaceFile(r *os.Root, loc location, p string, data []byte) (written, error) {
	var w written
	mode := newFileMode
	fi, err := r.Lstat(loc.rel)
	switch {
	case err == nil:
		if err := writable(r, loc, p, fi); err != nil {
			return w, err
		}
		mode, w.oldSize = fi.Mode().Perm(), fi.Size()
	case errors.Is(err, fs.ErrNotExist):
		w.created = true
		dir := filepath.Dir(loc.rel)
		if _, err := r.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			if err := r.MkdirAll(dir, newDirMode); err != nil {
				return w, createError(p, err)
			}
			w.madeDirs = true
		}
	default:
		return w, fsError("path", p, err)
	}
	if err := writeAtomic(r, loc.rel, data, mode, !w.created); err != nil {
		return w, createError(p, err)
	}
	return w, nil
}

// writable refuses to replace anything but a regular file that may be
// written to.
func writable(r *os.Root, loc location, p string, fi fs.FileInfo) error {
	switch {
	case fi.IsDir():
		return &tool.Error{Kind: tool.KindInvalidParams,
			Message: fmt.Sprintf("path %q is a directory; give the path of a file (for example %s)", p, filepath.ToSlash(filepath.Join(loc.display(), "name.txt")))}
	case !fi.Mode().IsRegular():
		return &tool.Error{Kind: tool.KindInvalidParams,
			Message: fmt.Sprintf("path %q is not a regular file (it is a %s); only regular files can be written", p, fileKind(fi.Mode()))}
	}
	// Opening for writing without truncating changes nothing, and asks the
	// kernel the question it would answer for an in-place write.
	f, err := r.OpenFile(loc.rel, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ETXTBSY) {
		// A running program cannot be written in place, but replacing it
		// by rename is what compilers do, and the running copy is kept.
		return nil
	}
	if err != nil {
		return fsError("path", p, err)
	}
	f.Close()
	return nil
}

// fileKind names the type of a file that is not regular, for messages.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	}
	return "special file"
}

// createError classifies an error from creating or replacing a file.
// A parent that is a file, not a directory, reads as the path not
// existing, which is what resolve says of reads through it.
func createError(p string, err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return &tool.Error{Kind: tool.KindExecutionFailed, Err: err,
			Message: fmt.Sprintf("cannot write %q: the disk is full", p)}
	}
	if errors.Is(err, syscall.EROFS) {
		return &tool.Error{Kind: tool.KindPermissionDenied, Err: err,
			Message: fmt.Sprintf("cannot write %q: the file system is read-only", p)}
	}
	return fsError("path", p, err)
}

// writeAtomic replaces the file rel with data through r: a temporary file
// in the same directory (so the rename cannot cross file systems) is
// written, flushed and renamed over rel, and the directory is flushed so
// the rename itself survives a crash. The temporary file is removed on any
// failure. With keepMode the new file gets exactly mode, which the umask
// would otherwise narrow; a new file gets mode less the umask, as any
// created file does.
func writeAtomic(r *os.Root, rel string, data []byte, mode fs.FileMode, keepMode bool) (err error) {
	dir := filepath.Dir(rel)
	var suffix [8]byte
	rand.Read(suffix[:])
	// A fixed-length name: the target's own name may already be as long
	// as a name can be.
	tmp := filepath.Join(dir, ".toolmux-"+hex.EncodeToString(suffix[:])+".tmp")
	f, err := r.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			r.Remove(tmp)
		}
	}()
	if keepMode {
		if err = f.Chmod(mode); err != nil {
			return err
		}
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = r.Rename(tmp, rel); err != nil {
		return err
	}
	// The new content is in place; failing to flush the directory only
	// weakens durability across a crash, so it is not an error.
	if d, derr := r.Open(dir); derr == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
