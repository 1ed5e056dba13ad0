package vfs

import (
	"errors"
	"io"
	"os"
	"sort"

	"golang.org/x/sys/unix"
)

// Default is the operating system's file system.
var Default FS = osFS{}

type osFS struct{}

func (osFS) Create(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	return &osFile{f}, nil
}

func (osFS) Open(name string) (File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return &osFile{f}, nil
}

func (osFS) OpenReadWrite(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	return &osFile{f}, nil
}

func (osFS) OpenDir(name string) (File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return &osFile{f}, nil
}

func (osFS) Remove(name string) error             { return os.Remove(name) }
func (osFS) RemoveAll(name string) error          { return os.RemoveAll(name) }
func (osFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }
func (osFS) MkdirAll(dir string, perm os.FileMode) error {
	return os.MkdirAll(dir, perm)
}
func (osFS) Stat(name string) (os.FileInfo, error) { return os.Stat(name) }

func (osFS) List(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	return names, nil
}

func (osFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &os.PathError{Op: "lock", Path: name, Err: ErrLocked}
		}
		return nil, &os.PathError{Op: "lock", Path: name, Err: err}
	}
	return f, nil
}

type osFile struct{ *os.File }

func (f *osFile) Sync() error {
	// Directories cannot be fdatasynced on every kernel; fsync them.
	if err := datasync(f.File); err != nil {
		if errors.Is(err, unix.EINVAL) {
			return f.File.Sync()
		}
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
	}
	return nil
}

func (f *osFile) Map(size int) (Mapping, error) {
	return f.mmap(size, unix.PROT_READ|unix.PROT_WRITE)
}

func (f *osFile) MapReadOnly(size int) (Mapping, error) {
	return f.mmap(size, unix.PROT_READ)
}

func (f *osFile) mmap(size, prot int) (Mapping, error) {
	if size <= 0 {
		return nil, &os.PathError{Op: "mmap", Path: f.Name(), Err: unix.EINVAL}
	}
	fi, err := f.File.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() < int64(size) {
		if err := f.File.Truncate(int64(size)); err != nil {
			return nil, err
		}
	}
	b, err := unix.Mmap(int(f.File.Fd()), 0, size, prot, unix.MAP_SHARED)
	if err != nil {
		return nil, &os.PathError{Op: "mmap", Path: f.Name(), Err: err}
	}
	return &osMapping{name: f.Name(), b: b}, nil
}

// Allocate uses fallocate, keeping the file's size. Where the system or
// the file system has no fallocate it writes zeros, which allocates as well
// (a copy-on-write file system may still need new blocks for a later write
// through a mapping). Writing a mapped file with WriteAt is safe here: the
// range is only ever allocated before anything is stored in it.
func (f *osFile) Allocate(off, n int64) error {
	err := fallocate(f.File, off, n)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) || errors.Is(err, errors.ErrUnsupported) {
		return f.writeZeros(off, n)
	}
	if err != nil {
		return &os.PathError{Op: "fallocate", Path: f.Name(), Err: err}
	}
	return nil
}

func (f *osFile) writeZeros(off, n int64) error {
	zeros := make([]byte, min(n, 64<<10))
	for n > 0 {
		k := min(n, int64(len(zeros)))
		if _, err := f.File.WriteAt(zeros[:k], off); err != nil {
			return err
		}
		off, n = off+k, n-k
	}
	return nil
}

type osMapping struct {
	name string
	b    []byte
}

func (m *osMapping) Bytes() []byte { return m.b }

func (m *osMapping) Sync() error {
	if err := unix.Msync(m.b, unix.MS_SYNC); err != nil {
		return &os.PathError{Op: "msync", Path: m.name, Err: err}
	}
	return nil
}

func (m *osMapping) Close() error {
	if m.b == nil {
		return nil
	}
	err := unix.Munmap(m.b)
	m.b = nil
	if err != nil {
		return &os.PathError{Op: "munmap", Path: m.name, Err: err}
	}
	return nil
}
