// Package vfs is the file-system interface every Strand file access goes
// through, with the operating system's file system, an in-memory one that
// simulates power cuts, and a wrapper that injects faults.
//
// Default is the operating system's file system; log.Options.FS and
// log.DirOptions.Log.FS take any FS, nil meaning Default. NewMem returns
// the in-memory one: data is durable only once its file is synced, and a
// name only once its directory is, and its Crash method returns the file
// system as a power cut at that moment would leave it (with a
// CrashOptions.Rand, some unsynced writes and names survive, as on a real
// disk). NewErrorFS wraps either in one that fails the operations a test
// selects, as a failing or full disk would (after pebble's vfs/errorfs).
//
// So an application can test its own code on Strand against crashes:
// run it on a MemFS, take a Crash at any moment, reopen the log on the
// crashed copy and check that what it acknowledged is there.
package vfs

import (
	"errors"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
)

// FS is a hierarchical file system. Names are slash-separated paths as used
// by package path/filepath on the host.
type FS interface {
	// Create creates the named file for reading and writing, truncating it
	// if it exists.
	Create(name string) (File, error)
	// Open opens the named file read-only.
	Open(name string) (File, error)
	// OpenReadWrite opens an existing file for reading and writing.
	OpenReadWrite(name string) (File, error)
	// OpenDir opens a directory so that it can be synced after files in it
	// were created, renamed or removed.
	OpenDir(name string) (File, error)
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// RemoveAll removes a directory and everything in it.
	RemoveAll(name string) error
	// Rename atomically replaces newname with oldname.
	Rename(oldname, newname string) error
	// MkdirAll creates a directory and any missing parents.
	MkdirAll(dir string, perm os.FileMode) error
	// List returns the names of the entries of a directory, sorted.
	List(dir string) ([]string, error)
	// Stat describes the named file.
	Stat(name string) (os.FileInfo, error)
	// Lock takes an exclusive advisory lock on the named file, creating it
	// if needed. It fails with ErrLocked if another holder has it.
	Lock(name string) (io.Closer, error)
}

// File is an open file. ReadAt and WriteAt are safe for concurrent use;
// Write writes sequentially from the file's current offset, which starts
// at zero.
type File interface {
	io.Closer
	io.ReaderAt
	io.WriterAt
	io.Writer
	// Stat describes the file; Size is the current length, including
	// bytes not yet synced.
	Stat() (os.FileInfo, error)
	// Sync makes the file's data durable (fdatasync). On a directory it
	// makes the directory's entries durable.
	Sync() error
	// Truncate changes the file's length.
	Truncate(size int64) error
	// Map maps the first size bytes of the file into memory for reading and
	// writing, growing the file if it is shorter. Writes through the
	// mapping are made durable by Sync on the file or the mapping. The file
	// must not be truncated or written with WriteAt or Write while mapped.
	Map(size int) (Mapping, error)
	// MapReadOnly maps the first size bytes of the file into memory for
	// reading only, growing the file if it is shorter, as a sealed index
	// is mapped. Writing the memory is a bug: on an OS file it faults.
	MapReadOnly(size int) (Mapping, error)
	// Allocate makes the file system back the n bytes at off, which lie
	// within the file, with real blocks, so that writing them through a
	// mapping cannot fault for want of space (SIGBUS): on a full disk
	// Allocate fails with ENOSPC instead. Hooks see it as an OpWrite of n
	// bytes, since it takes space as a write does.
	Allocate(off, n int64) error
	// SyscallConn returns the raw descriptor of an OS file, for sendfile,
	// as os.File.SyscallConn does: its Control keeps the descriptor open
	// while it runs, so that a concurrent Close cannot hand the number to
	// another file meanwhile. Files without a descriptor return an error
	// matching errors.ErrUnsupported.
	SyscallConn() (syscall.RawConn, error)
}

// Mapping is a memory mapping of a file.
type Mapping interface {
	// Bytes returns the mapped memory. It is valid until Close.
	Bytes() []byte
	// Sync makes writes through the mapping durable (msync).
	Sync() error
	// Close unmaps the memory.
	Close() error
}

// ErrLocked is returned by FS.Lock when the file is already locked.
var ErrLocked = errors.New("vfs: file is locked by another holder")

// SyncDir makes the entries of directory dir durable: the files created,
// renamed or removed in it.
func SyncDir(fs FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}

// MkdirAll creates dir and any missing parents, as FS.MkdirAll does, and
// makes each directory it created durable by syncing the directory that
// holds it: a log in a directory whose name a power cut can take away is
// lost whole, however well its files were synced.
func MkdirAll(fs FS, dir string, perm os.FileMode) error {
	var missing []string // dir and the parents to create, deepest first
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		_, err := fs.Stat(d)
		if err == nil {
			break
		}
		if !errors.Is(err, iofs.ErrNotExist) {
			return err
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := fs.MkdirAll(dir, perm); err != nil {
		return err
	}
	for _, d := range slices.Backward(missing) {
		if err := SyncDir(fs, filepath.Dir(d)); err != nil {
			return err
		}
	}
	return nil
}
