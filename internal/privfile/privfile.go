// Package privfile keeps files that are their owner's only: stores of
// who may connect (the API keys, a fleet's members) and secrets (a NATS
// server's token, the vault). Such a file is written whole, by rename, so that a
// reader sees the old file or the new, never half of one; writers in
// several processes take turns on an flock; and a file that others could
// read or write, or that another user owns, is refused rather than
// trusted.
package privfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// ModeError is a file that is not its owner's only: not a regular file,
// open to group or others (Perm), or owned by another user than the one
// reading it (UID, not root).
type ModeError struct {
	Path string
	// NotRegular: a directory, a device, a socket.
	NotRegular bool
	// Perm is the file's permission bits when they allow group or others
	// anything; 0 otherwise.
	Perm fs.FileMode
	// UID is the owner when it is another user; -1 otherwise.
	UID int
}

func (e *ModeError) Error() string {
	switch {
	case e.NotRegular:
		return e.Path + " is not a regular file"
	case e.Perm != 0:
		return fmt.Sprintf("%s may be read or written by others (mode %04o): it must be its owner's only; run chmod 600 %s", e.Path, e.Perm, e.Path)
	}
	return fmt.Sprintf("%s belongs to another user (uid %d): it must be yours (uid %d)", e.Path, e.UID, os.Getuid())
}

// Check returns a *ModeError when the file fi describes (named path) is
// not a regular file of this user's (or root's) with nothing for group and
// others.
func Check(path string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return &ModeError{Path: path, NotRegular: true, UID: -1}
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return &ModeError{Path: path, Perm: perm, UID: -1}
	}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok && sys.Uid != 0 && int(sys.Uid) != os.Getuid() {
		return &ModeError{Path: path, UID: int(sys.Uid)}
	}
	return nil
}

// Lock takes an exclusive flock on the file at path (made, mode 0600,
// when it does not exist) and returns its release. The lock is a file of
// its own, beside the one it guards: that one is replaced by every Write,
// so a lock on it would lock a file the next writer no longer opens.
func Lock(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil // closing releases the lock
}

// Write replaces the file at path with data: a temporary file of mode
// 0600 in the same directory (made 0700 when missing), synced, renamed
// over it, the directory synced.
func Write(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return Replace(path, "."+filepath.Base(path)+"-*", data)
}

// Replace is Write in a directory that exists, the temporary file named
// by pattern (as os.CreateTemp names it).
func Replace(path, pattern string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, pattern) // mode 0600
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, a name no longer there
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return err
	}
	SyncDir(dir)
	return nil
}

// SyncDir makes a rename or a removal in dir outlive a crash; a
// filesystem that cannot sync a directory has no such promise to keep.
func SyncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}
