package vfs

import (
	"errors"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// MemFS is an in-memory file system that models what survives a power cut.
//
// Data written to a file is durable only once the file is synced; a
// directory entry (a created, renamed or removed name) is durable only once
// its directory is synced. Crash returns the file system a restart would
// find: every durable name and byte, plus, when CrashOptions asks for it, an
// in-order prefix of each file's unsynced writes whose last write may be
// torn at any byte, and any subset of the unsynced changes to directory
// entries. Each such change (a create, a remove, a mkdir, a rename even
// between two directories) survives whole or not at all, as in a
// journaling file system; syncing one of the directories a change touched
// makes all of it durable.
//
// Mapping a file counts as flushing the writes made to it before; writes
// through a mapping are lost by Crash while the mapping is open, and kept
// or lost as a whole once it is closed.
type MemFS struct {
	mu    sync.Mutex
	root  *memNode
	locks map[string]bool
	hook  func(Op) error
}

// Op describes a mutating file-system operation, passed to the hook set
// with SetHook before the operation runs, and to the faults of an ErrorFS.
type Op struct {
	Kind OpKind
	Name string // the file or directory operated on; for Rename, the old name
	Len  int    // bytes written, for OpWrite
}

// OpKind is the kind of an Op.
type OpKind int

// The kinds of operations passed to a hook.
const (
	OpCreate OpKind = iota
	OpWrite
	OpTruncate
	OpSync // of a file or a mapping
	OpRename
	OpRemove
	OpMkdir
	OpSyncDir // of a directory
	OpMap
)

var opNames = [...]string{"create", "write", "truncate", "sync", "rename", "remove", "mkdir", "syncdir", "map"}

func (k OpKind) String() string {
	if int(k) < len(opNames) {
		return opNames[k]
	}
	return "op(?)"
}

// CrashOptions says how much of the unsynced state survives a crash.
type CrashOptions struct {
	// Rand, if set, picks for each file how many of its unsynced writes
	// survive (in the order they were made) and how many bytes of the next
	// one; whether writes through a mapping survive; and which unsynced
	// changes to directory entries survive, each with even odds. With Rand
	// nil every unsynced byte and entry is lost. The same Rand state and
	// the same operations give the same crash.
	Rand *rand.Rand
}

type memNode struct {
	name string
	dir  bool

	// Directories: the entries as they are now and as the last Sync of the
	// directory left them, and the change that last set each entry that
	// differs.
	children map[string]*memNode
	synced   map[string]*memNode
	pending  map[string]*entryChange

	// Files.
	data     []byte
	undo     []undoRec // unsynced changes, oldest first
	mapped   int       // open mappings
	snapshot []byte    // data as of the last durable point, while mapped
	modTime  time.Time
}

// entryChange is one operation's change to directory entries: a crash
// keeps all of them or none.
type entryChange struct{ entries []entryRef }

type entryRef struct {
	dir  *memNode
	name string
}

// set binds name in dir to n, or removes it if n is nil, as part of c.
func (c *entryChange) set(dir *memNode, name string, n *memNode) {
	if n == nil {
		delete(dir.children, name)
	} else {
		dir.children[name] = n
	}
	dir.pending[name] = c
	c.entries = append(c.entries, entryRef{dir, name})
}

// commit makes the change's entries outside dir durable: a rename is
// made durable by a sync of either directory.
func (c *entryChange) commit(dir *memNode) {
	for _, e := range c.entries {
		if e.dir == dir || e.dir.pending[e.name] != c {
			continue
		}
		if n, ok := e.dir.children[e.name]; ok {
			e.dir.synced[e.name] = n
		} else {
			delete(e.dir.synced, e.name)
		}
		delete(e.dir.pending, e.name)
	}
}

// undoRec records how to revert one unsynced write or truncate.
type undoRec struct {
	truncate bool
	off      int64  // write offset
	n        int    // bytes written
	old      []byte // bytes the write overwrote or the truncate removed
	oldLen   int64  // file length before the change
}

// NewMem returns an empty in-memory file system.
func NewMem() *MemFS {
	return &MemFS{root: newDir("/"), locks: make(map[string]bool)}
}

func newDir(name string) *memNode {
	return &memNode{name: name, dir: true, children: map[string]*memNode{}, synced: map[string]*memNode{}, pending: map[string]*entryChange{}, modTime: time.Unix(0, 0)}
}

// SetHook installs fn to run before every mutating operation; a non-nil
// error from fn fails the operation with that error and leaves the file
// system unchanged. Tests use it to inject faults (a full disk) or to stop a
// run at a chosen operation and take a Crash. fn runs without MemFS's lock
// held, so it may call Crash.
func (fs *MemFS) SetHook(fn func(Op) error) {
	fs.mu.Lock()
	fs.hook = fn
	fs.mu.Unlock()
}

func (fs *MemFS) before(op Op) error {
	fs.mu.Lock()
	hook := fs.hook
	fs.mu.Unlock()
	if hook == nil {
		return nil
	}
	if err := hook(op); err != nil {
		return &os.PathError{Op: op.Kind.String(), Path: op.Name, Err: err}
	}
	return nil
}

// Crash returns the file system as a restart after a power cut at this
// moment would find it. The receiver is unchanged and may go on being used
// (by a process that does not know it is dead).
func (fs *MemFS) Crash(cfg CrashOptions) *MemFS {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := NewMem()
	c := crash{cfg: cfg, cloned: map[*memNode]*memNode{}, kept: map[*entryChange]bool{}}
	out.root = c.dir(fs.root)
	return out
}

// crash builds the file system a crash leaves. It visits names in sorted
// order so that a seeded Rand gives the same crash every time.
type crash struct {
	cfg    CrashOptions
	cloned map[*memNode]*memNode
	kept   map[*entryChange]bool // decided so far
}

func (c *crash) keeps(ch *entryChange) bool {
	keep, ok := c.kept[ch]
	if !ok {
		keep = c.cfg.Rand != nil && c.cfg.Rand.IntN(2) == 0
		c.kept[ch] = keep
	}
	return keep
}

func (c *crash) dir(d *memNode) *memNode {
	entries := maps.Clone(d.synced)
	for _, name := range slices.Sorted(maps.Keys(d.pending)) {
		if !c.keeps(d.pending[name]) {
			continue
		}
		if n, ok := d.children[name]; ok {
			entries[name] = n
		} else {
			delete(entries, name)
		}
	}
	nd := newDir(d.name)
	for _, name := range slices.Sorted(maps.Keys(entries)) {
		n := entries[name]
		nn, ok := c.cloned[n]
		switch {
		case ok:
		case n.dir:
			nn = c.dir(n)
		default:
			nn = &memNode{name: name, data: n.durableData(c.cfg), modTime: n.modTime}
		}
		c.cloned[n] = nn
		nd.children[name] = nn
		nd.synced[name] = nn
	}
	return nd
}

// durableData is the content a crash leaves in the file.
func (n *memNode) durableData(cfg CrashOptions) []byte {
	if n.snapshot != nil {
		// A mapping still open may be written as we read: only a closed
		// one's writes can be kept.
		if n.mapped == 0 && cfg.Rand != nil && cfg.Rand.IntN(2) == 0 {
			return append([]byte(nil), n.data...)
		}
		return append([]byte(nil), n.snapshot...)
	}
	data := append([]byte(nil), n.data...)
	keep, torn := 0, 0
	if cfg.Rand != nil {
		keep = cfg.Rand.IntN(len(n.undo) + 1)
	}
	for i := len(n.undo) - 1; i > keep; i-- {
		data = n.undo[i].revert(data)
	}
	if keep < len(n.undo) {
		r := n.undo[keep]
		if !r.truncate && cfg.Rand != nil {
			torn = cfg.Rand.IntN(r.n + 1)
		}
		data = r.revertFrom(data, torn)
	}
	return data
}

// snapshotOf copies data into a snapshot, which is never nil: a nil
// snapshot means the file is not mapped.
func snapshotOf(data []byte) []byte {
	return append(make([]byte, 0, len(data)), data...)
}

// revert undoes the change entirely.
func (r undoRec) revert(data []byte) []byte { return r.revertFrom(data, 0) }

// revertFrom undoes the change but for the first keep bytes of a write.
func (r undoRec) revertFrom(data []byte, keep int) []byte {
	if r.truncate {
		data = resize(data, r.oldLen)
		copy(data[r.oldLen-int64(len(r.old)):], r.old)
		return data
	}
	for i := keep; i < r.n; i++ {
		p := r.off + int64(i)
		if i < len(r.old) {
			data[p] = r.old[i]
		}
	}
	return resize(data, max(r.oldLen, r.off+int64(keep)))
}

func resize(b []byte, n int64) []byte {
	if n <= int64(len(b)) {
		return b[:n]
	}
	if n <= int64(cap(b)) {
		tail := b[len(b):n]
		clear(tail)
		return b[:n]
	}
	nb := make([]byte, n, n+n/4)
	copy(nb, b)
	return nb
}

func (fs *MemFS) lookup(name string) (*memNode, *memNode, string, error) {
	name = clean(name)
	if name == "/" {
		return fs.root, nil, "/", nil
	}
	parent := fs.root
	parts := strings.Split(strings.TrimPrefix(name, "/"), "/")
	for i, p := range parts {
		c, ok := parent.children[p]
		if i == len(parts)-1 {
			return c, parent, p, nil
		}
		if !ok || !c.dir {
			return nil, nil, p, syscall.ENOENT
		}
		parent = c
	}
	panic("unreachable")
}

// lookupNode is lookup for an existing file or directory.
func (fs *MemFS) lookupNode(name string) (*memNode, error) {
	n, _, _, err := fs.lookup(name)
	if err == nil && n == nil {
		err = syscall.ENOENT
	}
	return n, err
}

// lookupEntry is lookup for an existing entry other than the root.
func (fs *MemFS) lookupEntry(name string) (*memNode, *memNode, string, error) {
	n, parent, base, err := fs.lookup(name)
	if err == nil && (n == nil || parent == nil) {
		err = syscall.ENOENT
	}
	return n, parent, base, err
}

func clean(name string) string {
	return path.Clean("/" + filepath.ToSlash(name))
}

// Create implements FS.
func (fs *MemFS) Create(name string) (File, error) {
	if err := fs.before(Op{Kind: OpCreate, Name: name}); err != nil {
		return nil, err
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, parent, base, err := fs.lookup(name)
	if err != nil || parent == nil {
		return nil, pathErr("create", name, syscall.ENOENT)
	}
	if n != nil && n.dir {
		return nil, pathErr("create", name, syscall.EISDIR)
	}
	if n != nil && n.mapped > 0 {
		return nil, pathErr("create", name, syscall.EBUSY)
	}
	if n == nil {
		n = &memNode{name: base}
		new(entryChange).set(parent, base, n)
	} else if len(n.data) > 0 {
		n.undo = append(n.undo, undoRec{truncate: true, old: n.data, oldLen: int64(len(n.data))})
		n.data = nil
	}
	n.modTime = time.Now()
	return &memFile{fs: fs, n: n, name: name, write: true}, nil
}

func (fs *MemFS) open(name string, write, dir bool) (File, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, err := fs.lookupNode(name)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	if n.dir != dir {
		if dir {
			return nil, pathErr("open", name, syscall.ENOTDIR)
		}
		return nil, pathErr("open", name, syscall.EISDIR)
	}
	return &memFile{fs: fs, n: n, name: name, write: write}, nil
}

// Open implements FS.
func (fs *MemFS) Open(name string) (File, error) { return fs.open(name, false, false) }

// OpenReadWrite implements FS.
func (fs *MemFS) OpenReadWrite(name string) (File, error) { return fs.open(name, true, false) }

// OpenDir implements FS.
func (fs *MemFS) OpenDir(name string) (File, error) { return fs.open(name, false, true) }

// Remove implements FS.
func (fs *MemFS) Remove(name string) error {
	if err := fs.before(Op{Kind: OpRemove, Name: name}); err != nil {
		return err
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, parent, base, err := fs.lookupEntry(name)
	if err != nil {
		return pathErr("remove", name, err)
	}
	if n.dir && len(n.children) > 0 {
		return pathErr("remove", name, syscall.ENOTEMPTY)
	}
	new(entryChange).set(parent, base, nil)
	return nil
}

// RemoveAll implements FS.
func (fs *MemFS) RemoveAll(name string) error {
	if err := fs.before(Op{Kind: OpRemove, Name: name}); err != nil {
		return err
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, parent, base, err := fs.lookup(name)
	if err != nil || n == nil {
		return nil
	}
	if parent == nil {
		return pathErr("removeall", name, syscall.EINVAL)
	}
	new(entryChange).set(parent, base, nil)
	return nil
}

// Rename implements FS.
func (fs *MemFS) Rename(oldname, newname string) error {
	if err := fs.before(Op{Kind: OpRename, Name: oldname}); err != nil {
		return err
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, oldParent, oldBase, err := fs.lookupEntry(oldname)
	if err != nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
	target, newParent, newBase, err := fs.lookup(newname)
	if err == nil && newParent == nil {
		err = syscall.EINVAL
	}
	if err == nil && target != nil && target.dir != n.dir {
		err = syscall.EISDIR
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
	n.name = newBase
	c := new(entryChange)
	c.set(oldParent, oldBase, nil)
	c.set(newParent, newBase, n)
	return nil
}

// MkdirAll implements FS.
func (fs *MemFS) MkdirAll(dir string, perm os.FileMode) error {
	if err := fs.before(Op{Kind: OpMkdir, Name: dir}); err != nil {
		return err
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	d := fs.root
	for _, p := range strings.Split(strings.TrimPrefix(clean(dir), "/"), "/") {
		if p == "" {
			continue
		}
		c, ok := d.children[p]
		if !ok {
			c = newDir(p)
			new(entryChange).set(d, p, c)
		} else if !c.dir {
			return pathErr("mkdir", dir, syscall.ENOTDIR)
		}
		d = c
	}
	return nil
}

// List implements FS.
func (fs *MemFS) List(dir string) ([]string, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, err := fs.lookupNode(dir)
	if err == nil && !n.dir {
		err = syscall.ENOTDIR
	}
	if err != nil {
		return nil, pathErr("readdir", dir, err)
	}
	names := make([]string, 0, len(n.children))
	for name := range n.children {
		names = append(names, name)
	}
	sort.Strings(names)
	return names, nil
}

// Stat implements FS.
func (fs *MemFS) Stat(name string) (os.FileInfo, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, err := fs.lookupNode(name)
	if err != nil {
		return nil, pathErr("stat", name, err)
	}
	return n.info(), nil
}

// Lock implements FS.
func (fs *MemFS) Lock(name string) (io.Closer, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	name = clean(name)
	if fs.locks[name] {
		return nil, pathErr("lock", name, ErrLocked)
	}
	n, parent, base, err := fs.lookup(name)
	if err != nil || parent == nil {
		return nil, pathErr("lock", name, syscall.ENOENT)
	}
	if n == nil {
		new(entryChange).set(parent, base, &memNode{name: base, modTime: time.Now()})
	}
	fs.locks[name] = true
	return &memLock{fs: fs, name: name}, nil
}

type memLock struct {
	fs   *MemFS
	name string
	once sync.Once
}

func (l *memLock) Close() error {
	l.once.Do(func() {
		l.fs.mu.Lock()
		delete(l.fs.locks, l.name)
		l.fs.mu.Unlock()
	})
	return nil
}

func pathErr(op, name string, err error) error {
	return &os.PathError{Op: op, Path: name, Err: err}
}

type memFile struct {
	fs     *MemFS
	n      *memNode
	name   string
	write  bool
	pos    int64 // for Write
	closed bool
}

var errClosed = errors.New("file already closed")

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return pathErr("close", f.name, errClosed)
	}
	f.closed = true
	return nil
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, pathErr("read", f.name, errClosed)
	}
	if f.n.dir {
		return 0, pathErr("read", f.name, syscall.EISDIR)
	}
	if off < 0 {
		return 0, pathErr("read", f.name, syscall.EINVAL)
	}
	if off >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.n.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.before(Op{Kind: OpWrite, Name: f.name, Len: len(p)}); err != nil {
		return 0, err
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return f.writeAtLocked(p, off)
}

func (f *memFile) writeAtLocked(p []byte, off int64) (int, error) {
	switch {
	case f.closed:
		return 0, pathErr("write", f.name, errClosed)
	case !f.write:
		return 0, pathErr("write", f.name, syscall.EBADF)
	case f.n.mapped > 0:
		return 0, pathErr("write", f.name, syscall.EBUSY)
	case off < 0:
		return 0, pathErr("write", f.name, syscall.EINVAL)
	}
	n := f.n
	rec := undoRec{off: off, n: len(p), oldLen: int64(len(n.data))}
	if off < int64(len(n.data)) {
		end := min(off+int64(len(p)), int64(len(n.data)))
		rec.old = append([]byte(nil), n.data[off:end]...)
	}
	if end := off + int64(len(p)); end > int64(len(n.data)) {
		n.data = resize(n.data, end)
	}
	copy(n.data[off:], p)
	n.undo = append(n.undo, rec)
	n.modTime = time.Now()
	return len(p), nil
}

func (f *memFile) Write(p []byte) (int, error) {
	if err := f.fs.before(Op{Kind: OpWrite, Name: f.name, Len: len(p)}); err != nil {
		return 0, err
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	n, err := f.writeAtLocked(p, f.pos)
	f.pos += int64(n)
	return n, err
}

func (f *memFile) Stat() (os.FileInfo, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return f.n.info(), nil
}

func (f *memFile) Sync() error {
	kind := OpSync
	if f.n.dir {
		kind = OpSyncDir
	}
	if err := f.fs.before(Op{Kind: kind, Name: f.name}); err != nil {
		return err
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return pathErr("sync", f.name, errClosed)
	}
	f.n.sync()
	return nil
}

func (n *memNode) sync() {
	if n.dir {
		for _, c := range n.pending {
			c.commit(n)
		}
		n.synced = maps.Clone(n.children)
		clear(n.pending)
		return
	}
	n.undo = nil
	if n.mapped > 0 {
		n.snapshot = snapshotOf(n.data)
	} else {
		n.snapshot = nil
	}
}

func (f *memFile) Truncate(size int64) error {
	if err := f.fs.before(Op{Kind: OpTruncate, Name: f.name}); err != nil {
		return err
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	switch {
	case f.closed:
		return pathErr("truncate", f.name, errClosed)
	case !f.write:
		return pathErr("truncate", f.name, syscall.EBADF)
	case f.n.mapped > 0:
		return pathErr("truncate", f.name, syscall.EBUSY)
	case size < 0:
		return pathErr("truncate", f.name, syscall.EINVAL)
	}
	f.n.truncate(size)
	return nil
}

func (n *memNode) truncate(size int64) {
	rec := undoRec{truncate: true, oldLen: int64(len(n.data))}
	if size < int64(len(n.data)) {
		rec.old = append([]byte(nil), n.data[size:]...)
	}
	n.undo = append(n.undo, rec)
	n.data = resize(n.data, size)
	n.modTime = time.Now()
}

func (f *memFile) Map(size int) (Mapping, error) {
	if err := f.fs.before(Op{Kind: OpMap, Name: f.name}); err != nil {
		return nil, err
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	switch {
	case f.closed:
		return nil, pathErr("mmap", f.name, errClosed)
	case size <= 0:
		return nil, pathErr("mmap", f.name, syscall.EINVAL)
	case !f.write && size > len(f.n.data):
		return nil, pathErr("mmap", f.name, syscall.EINVAL)
	}
	n := f.n
	if n.mapped == 0 {
		// Writes before the mapping count as flushed (see MemFS); the
		// snapshot is what a crash keeps of the mapped file.
		n.undo = nil
		n.snapshot = snapshotOf(n.data)
	}
	if size > len(n.data) {
		grown := make([]byte, size)
		copy(grown, n.data)
		n.data = grown
	}
	n.mapped++
	return &memMapping{fs: f.fs, n: n, name: f.name, b: n.data[:size:size]}, nil
}

// MapReadOnly is Map: a slice cannot be protected.
func (f *memFile) MapReadOnly(size int) (Mapping, error) { return f.Map(size) }

// Allocate checks the range; memory needs no allocation, but a hook can
// fail it as a full disk would.
func (f *memFile) Allocate(off, n int64) error {
	if err := f.fs.before(Op{Kind: OpWrite, Name: f.name, Len: int(n)}); err != nil {
		return err
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	switch {
	case f.closed:
		return pathErr("fallocate", f.name, errClosed)
	case !f.write:
		return pathErr("fallocate", f.name, syscall.EBADF)
	case off < 0 || n <= 0 || off+n > int64(len(f.n.data)):
		return pathErr("fallocate", f.name, syscall.EINVAL)
	}
	return nil
}

func (f *memFile) SyscallConn() (syscall.RawConn, error) {
	return nil, pathErr("syscallconn", f.name, errors.ErrUnsupported)
}

type memMapping struct {
	fs   *MemFS
	n    *memNode
	name string
	b    []byte
}

func (m *memMapping) Bytes() []byte { return m.b }

func (m *memMapping) Sync() error {
	if err := m.fs.before(Op{Kind: OpSync, Name: m.name}); err != nil {
		return err
	}
	m.fs.mu.Lock()
	defer m.fs.mu.Unlock()
	if m.b == nil {
		return errClosed
	}
	m.n.sync()
	return nil
}

func (m *memMapping) Close() error {
	m.fs.mu.Lock()
	defer m.fs.mu.Unlock()
	if m.b == nil {
		return nil
	}
	m.b = nil
	m.n.mapped--
	return nil
}

func (n *memNode) info() os.FileInfo {
	return memInfo{name: n.name, size: int64(len(n.data)), dir: n.dir, mod: n.modTime}
}

type memInfo struct {
	name string
	size int64
	dir  bool
	mod  time.Time
}

func (i memInfo) Name() string { return i.name }
func (i memInfo) Size() int64  { return i.size }
func (i memInfo) Mode() os.FileMode {
	if i.dir {
		return os.ModeDir | 0o755
	}
	return 0o644
}
func (i memInfo) ModTime() time.Time { return i.mod }
func (i memInfo) IsDir() bool        { return i.dir }
func (i memInfo) Sys() any           { return nil }
