package vfs

import (
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
)

// ErrInjected matches, with errors.Is, every error an ErrorFS injects.
var ErrInjected = errors.New("vfs: injected fault")

// ErrorFS wraps a file system and fails the operations its faults select,
// so that tests can see what the storage code does when a write, a sync or
// a rename fails on a real disk (after pebble's vfs/errorfs). A failed
// operation is not passed on: the wrapped file system is left unchanged.
//
// Faults see only the operations made while the ErrorFS is enabled, which
// it is when created.
type ErrorFS struct {
	fs FS

	mu       sync.Mutex
	faults   []*faultState
	disabled bool
	injected int
}

// Fault selects the operations an ErrorFS fails. The zero Fault fails every
// mutating operation.
type Fault struct {
	// Ops are the kinds of operation to fail; empty means every kind.
	Ops []OpKind
	// Path, if set, is a filepath.Match pattern that the operated name, or
	// its base name, must match. For a rename either name may match.
	Path string
	// After is how many selected operations succeed before the first
	// failure.
	After int
	// Times is how many selected operations fail; zero means every one
	// after the first After.
	Times int
	// Prob, if positive, makes each selected operation past After fail
	// only with this probability, drawn from a generator seeded with Seed,
	// so that a run can be repeated.
	Prob float64
	Seed uint64
	// Err is the cause the injected error wraps, such as syscall.ENOSPC;
	// nil means syscall.EIO.
	Err error
}

type faultState struct {
	Fault
	seen, failed int
	rand         *rand.Rand
}

// NewErrorFS returns fs wrapped in an ErrorFS with no faults.
func NewErrorFS(fs FS) *ErrorFS { return &ErrorFS{fs: fs} }

// Inject adds f to the faults. An operation fails if any fault selects it;
// each fault counts the operations it selects, whether or not another
// fault failed them.
func (e *ErrorFS) Inject(f Fault) {
	s := &faultState{Fault: f}
	if f.Prob > 0 {
		s.rand = rand.New(rand.NewPCG(f.Seed, 0))
	}
	e.mu.Lock()
	e.faults = append(e.faults, s)
	e.mu.Unlock()
}

// SetEnabled turns fault injection on or off; faults keep their counts.
func (e *ErrorFS) SetEnabled(on bool) {
	e.mu.Lock()
	e.disabled = !on
	e.mu.Unlock()
}

// Injected returns how many operations the ErrorFS has failed.
func (e *ErrorFS) Injected() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.injected
}

// check returns the error to fail op with, or nil to let it run. other is
// the second name of a rename.
func (e *ErrorFS) check(op Op, other string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.disabled {
		return nil
	}
	var cause error
	for _, f := range e.faults {
		if !f.selects(op, other) {
			continue
		}
		f.seen++
		if f.seen <= f.After || (f.Times > 0 && f.failed >= f.Times) {
			continue
		}
		if f.rand != nil && f.rand.Float64() >= f.Prob {
			continue
		}
		f.failed++
		if cause == nil {
			cause = f.Err
			if cause == nil {
				cause = syscall.EIO
			}
		}
	}
	if cause == nil {
		return nil
	}
	e.injected++
	return &os.PathError{Op: op.Kind.String(), Path: op.Name, Err: injectedError{cause}}
}

func (f *faultState) selects(op Op, other string) bool {
	if len(f.Ops) > 0 && !slices.Contains(f.Ops, op.Kind) {
		return false
	}
	return f.Path == "" || matches(f.Path, op.Name) || (other != "" && matches(f.Path, other))
}

func matches(pattern, name string) bool {
	whole, _ := filepath.Match(pattern, name)
	base, _ := filepath.Match(pattern, filepath.Base(name))
	return whole || base
}

// injectedError is an injected failure: it matches ErrInjected and, through
// Unwrap, its cause.
type injectedError struct{ cause error }

func (e injectedError) Error() string        { return "injected " + e.cause.Error() }
func (e injectedError) Unwrap() error        { return e.cause }
func (e injectedError) Is(target error) bool { return target == ErrInjected }

// Create implements FS.
func (e *ErrorFS) Create(name string) (File, error) {
	if err := e.check(Op{Kind: OpCreate, Name: name}, ""); err != nil {
		return nil, err
	}
	f, err := e.fs.Create(name)
	return e.wrap(f, err, name, false)
}

// Open implements FS.
func (e *ErrorFS) Open(name string) (File, error) {
	f, err := e.fs.Open(name)
	return e.wrap(f, err, name, false)
}

// OpenReadWrite implements FS.
func (e *ErrorFS) OpenReadWrite(name string) (File, error) {
	f, err := e.fs.OpenReadWrite(name)
	return e.wrap(f, err, name, false)
}

// OpenDir implements FS.
func (e *ErrorFS) OpenDir(name string) (File, error) {
	f, err := e.fs.OpenDir(name)
	return e.wrap(f, err, name, true)
}

// wrap wraps the file an open of name returned, unless the open failed.
func (e *ErrorFS) wrap(f File, err error, name string, dir bool) (File, error) {
	if err != nil {
		return nil, err
	}
	return &errorFile{File: f, e: e, name: name, dir: dir}, nil
}

// Remove implements FS.
func (e *ErrorFS) Remove(name string) error {
	if err := e.check(Op{Kind: OpRemove, Name: name}, ""); err != nil {
		return err
	}
	return e.fs.Remove(name)
}

// RemoveAll implements FS.
func (e *ErrorFS) RemoveAll(name string) error {
	if err := e.check(Op{Kind: OpRemove, Name: name}, ""); err != nil {
		return err
	}
	return e.fs.RemoveAll(name)
}

// Rename implements FS.
func (e *ErrorFS) Rename(oldname, newname string) error {
	if err := e.check(Op{Kind: OpRename, Name: oldname}, newname); err != nil {
		return err
	}
	return e.fs.Rename(oldname, newname)
}

// MkdirAll implements FS.
func (e *ErrorFS) MkdirAll(dir string, perm os.FileMode) error {
	if err := e.check(Op{Kind: OpMkdir, Name: dir}, ""); err != nil {
		return err
	}
	return e.fs.MkdirAll(dir, perm)
}

// List implements FS.
func (e *ErrorFS) List(dir string) ([]string, error) { return e.fs.List(dir) }

// Stat implements FS.
func (e *ErrorFS) Stat(name string) (os.FileInfo, error) { return e.fs.Stat(name) }

// Lock implements FS.
func (e *ErrorFS) Lock(name string) (io.Closer, error) { return e.fs.Lock(name) }

type errorFile struct {
	File
	e    *ErrorFS
	name string
	dir  bool
}

func (f *errorFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.e.check(Op{Kind: OpWrite, Name: f.name, Len: len(p)}, ""); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f *errorFile) Write(p []byte) (int, error) {
	if err := f.e.check(Op{Kind: OpWrite, Name: f.name, Len: len(p)}, ""); err != nil {
		return 0, err
	}
	return f.File.Write(p)
}

func (f *errorFile) Sync() error {
	kind := OpSync
	if f.dir {
		kind = OpSyncDir
	}
	if err := f.e.check(Op{Kind: kind, Name: f.name}, ""); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *errorFile) Truncate(size int64) error {
	if err := f.e.check(Op{Kind: OpTruncate, Name: f.name}, ""); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

func (f *errorFile) Map(size int) (Mapping, error) { return f.mapWith(f.File.Map, size) }

func (f *errorFile) MapReadOnly(size int) (Mapping, error) {
	return f.mapWith(f.File.MapReadOnly, size)
}

func (f *errorFile) mapWith(mapFile func(int) (Mapping, error), size int) (Mapping, error) {
	if err := f.e.check(Op{Kind: OpMap, Name: f.name}, ""); err != nil {
		return nil, err
	}
	m, err := mapFile(size)
	if err != nil {
		return nil, err
	}
	return &errorMapping{Mapping: m, f: f}, nil
}

// Allocate is an OpWrite, as for MemFS's hook: it takes space as a write
// does, and fails as one on a full disk.
func (f *errorFile) Allocate(off, n int64) error {
	if err := f.e.check(Op{Kind: OpWrite, Name: f.name, Len: int(n)}, ""); err != nil {
		return err
	}
	return f.File.Allocate(off, n)
}

// errorMapping fails the msync of a mapping as an OpSync of its file.
type errorMapping struct {
	Mapping
	f *errorFile
}

func (m *errorMapping) Sync() error {
	if err := m.f.e.check(Op{Kind: OpSync, Name: m.f.name}, ""); err != nil {
		return err
	}
	return m.Mapping.Sync()
}
