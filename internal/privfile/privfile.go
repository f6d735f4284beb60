// Package privfile is how toolmux keeps small files of its own that
// several processes of a machine share and that must stay their owner's
// (the API key store, the vault): an flock that writers take turns on,
// and a replacement of a file by a rename, so that a reader sees the old
// file or the new, never half of one, and a crash leaves one of them.
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

// Lock takes an exclusive flock of the file at path (made, of mode 0600,
// when it does not exist), waiting for it. Lock a file of its own, not one
// that Replace replaces: a lock on a file renamed over is a lock on a file
// the next writer no longer opens. unlock releases it.
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

// Replace replaces the file at path with data: a temporary file of mode
// 0600 in the same directory (named by pattern, as os.CreateTemp names
// it), synced, renamed over it, the directory synced.
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

// Check says what is wrong with the file at path, of info fi, for a file
// that must be its owner's only: not a regular file, readable or
// writable by others, or another user's (root's is trusted); "" when
// nothing is.
func Check(path string, fi fs.FileInfo) string {
	if !fi.Mode().IsRegular() {
		return path + " is not a regular file"
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Sprintf("%s may be read or written by others (mode %04o): it must be its owner's only; run chmod 600 %s", path, perm, path)
	}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok && sys.Uid != 0 && int(sys.Uid) != os.Getuid() {
		return fmt.Sprintf("%s belongs to another user (uid %d): it must be yours (uid %d) or root's", path, sys.Uid, os.Getuid())
	}
	return ""
}
