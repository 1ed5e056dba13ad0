package log

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"

	"github.com/strandlog/strand/vfs"
)

// ErrLogLocked means the directory of a Log is open in another Log, or in
// a Dir, of this process or another: two writers of one log would each
// acknowledge appends that the other overwrites. The message says whether
// the holder is this process.
var ErrLogLocked = errors.New("log: log directory locked")

// heldLocks are the lock files this process holds. A refused lock is held
// either here or by another process, and the error says which: flock(2)
// refuses a second open file description of the same file even within one
// process, so the refusal alone cannot tell.
var heldLocks struct {
	sync.Mutex
	locks []*dirLock
}

// dirLock is a held lock on a directory's lock file.
type dirLock struct {
	fs     vfs.FS
	path   string      // absolute name of the lock file
	info   os.FileInfo // to recognise the file under another name
	holder string      // "a Log" or "a Dir"
	c      io.Closer
	once   sync.Once
}

// lockDir takes the lock file in dir for holder ("a Log", "a Dir"). A lock
// already held fails with an error wrapping sentinel that says whether this
// process holds it.
func lockDir(fs vfs.FS, dir, holder string, sentinel error) (io.Closer, error) {
	name := filepath.Join(dir, lockFile)
	path, err := filepath.Abs(name)
	if err != nil {
		path = filepath.Clean(name)
	}
	heldLocks.Lock()
	defer heldLocks.Unlock()
	if l := heldBy(fs, path, nil); l != nil {
		return nil, fmt.Errorf("%w: %s is already open in this process, by %s", sentinel, dir, l.holder)
	}
	c, err := fs.Lock(name)
	if errors.Is(err, vfs.ErrLocked) {
		// The same file under another name (a symbolic link, a bind
		// mount) may be held here.
		if info, serr := fs.Stat(name); serr == nil {
			if l := heldBy(fs, "", info); l != nil {
				return nil, fmt.Errorf("%w: %s is already open in this process, by %s as %s", sentinel, dir, l.holder, filepath.Dir(l.path))
			}
		}
		return nil, fmt.Errorf("%w: %s is in use by another process: %w", sentinel, dir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("log: lock %s: %w", dir, err)
	}
	l := &dirLock{fs: fs, path: path, holder: holder, c: c}
	l.info, _ = fs.Stat(name) // without it, only the name is recognised
	heldLocks.locks = append(heldLocks.locks, l)
	return l, nil
}

// heldBy returns the held lock on the file named path, or described by
// info, of the file system fs; nil if there is none. heldLocks is locked.
func heldBy(fs vfs.FS, path string, info os.FileInfo) *dirLock {
	for _, l := range heldLocks.locks {
		if sameFS(l.fs, fs) && ((path != "" && l.path == path) || (info != nil && l.info != nil && os.SameFile(l.info, info))) {
			return l
		}
	}
	return nil
}

// sameFS reports whether a and b are the same file system; file systems of
// a type that cannot be compared are never the same.
func sameFS(a, b vfs.FS) bool {
	t := reflect.TypeOf(a)
	return t == reflect.TypeOf(b) && t.Comparable() && a == b
}

// Close releases the lock.
func (l *dirLock) Close() error {
	err := ErrClosed
	l.once.Do(func() {
		heldLocks.Lock()
		defer heldLocks.Unlock()
		err = l.c.Close()
		heldLocks.locks = slices.DeleteFunc(heldLocks.locks, func(h *dirLock) bool { return h == l })
	})
	return err
}
