package log

import (
	"container/list"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"iter"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
)

// DirOptions configure a data directory.
type DirOptions struct {
	// Log holds the options every partition's Log starts from: the file
	// system, index sizes, CheckpointInterval, Now. Its SegmentBytes,
	// SegmentAge, Fsync, Compression and MaxBatchBytes are overridden by
	// the topic's configuration. With ExternalHighWatermark, the Dir's
	// partitions are replicas whose high watermark the replication layer
	// moves (Partition.AdvanceHighWatermark, as package replica does):
	// records produced are not readable by consumers until it does.
	Log Options

	// Defaults fill in the zero fields of a topic's configuration when it
	// is created (and when AlterTopicConfig leaves a field zero).
	// Defaults.Partitions is the partition count of a topic created
	// without one; like every default, its zero means the built-in
	// default, here 1. Negative values are refused, but for Unlimited in
	// Retention.
	Defaults TopicConfig

	// Logger receives what the background maintenance cannot return to a
	// caller: the partitions whose retention or compaction failed, one
	// record per failure at level Error. Default slog.Default(), so that
	// failures are seen unless discarded on purpose (a Logger with
	// slog.DiscardHandler).
	Logger *slog.Logger

	// MaxOpenFiles bounds the files the partitions keep open (three per
	// segment, and each partition's lock file); the least recently used
	// partitions are closed, and reopened when next used. Partitions in use
	// stay open even past the bound. Default 1024.
	MaxOpenFiles int

	// MaintenanceInterval is how often retention and compaction run in the
	// background (Kafka's log.retention.check.interval.ms); default 5
	// minutes; negative: never, only when Maintain is called.
	MaintenanceInterval time.Duration

	// Replicated says that the Dir holds replicas that a replication
	// layer writes (package replica, as a cluster node composes it), and
	// that it must coordinate nothing itself: nothing but its caller may
	// write a replicated partition's log, or the replicas diverge. A
	// replica of TransactionStateTopic belongs to the cluster's transaction
	// coordinator (the leader of that partition, as in Kafka), not to the
	// Dir: OpenDir loads no coordinator from it and writes no markers,
	// Maintain aborts no transaction, and Transactions and
	// NewTransactionalProducer refuse with ErrReplicated. The Dir then
	// writes a partition's log only when its caller appends or truncates
	// (AppendReplicated, TruncateTo and the rest), and when retention and
	// compaction remove records, each replica on its own as Kafka's do:
	// both stay below the high watermark the replication layer sets, so
	// they remove only records every in-sync replica holds. Set
	// Log.ExternalHighWatermark with it, for that high watermark.
	Replicated bool
}

const (
	topicsDir        = ".topics"
	lockFile         = ".lock"
	configSuffix     = ".json"
	tombstoneSuffix  = ".del" // a deleted topic's configuration, until its folders are renamed away
	deletingSuffix   = "-delete"
	maxFileName      = 255 // bytes, on the file systems Strand runs on
	defaultOpenFiles = 1024
	evictRecount     = 256
)

// Dir is a data directory of topics, each split into partitions, each a
// Log in a folder named <topic>-<partition> as in Kafka. A Dir is safe for
// concurrent use. Partitions are opened when first used and closed when
// too many files are open; the Partition handles hide both.
//
// A failed fsync fails its partition for the life of the Dir. After a
// failed fsync the pages written since the last good one may be lost from
// the disk, or may be durable, and a later fsync may succeed without
// writing them (PostgreSQL's "fsyncgate"); only a new process, reading
// the disk, can start from firm ground. So the partition refuses appends
// and every other change with the error of the failed sync (it wraps
// ErrFailed); it is never closed by the open-file bound and reopened,
// which would recover and re-sync the cached pages as if nothing had
// happened; reads go on while its log stays open, ReadCommitted up to the
// last good sync (if the failure was only found when the bound closed the
// log, reads fail too); and Close returns the failure. After a restart, the
// next OpenDir recovers whatever the disk holds: what the fsync policy
// had made durable before the failure is there, and of the records whose
// appends failed (or that were written since the last good sync), any
// part, all or none may be; nothing can tell which were lost, since the
// process that knew is gone.
type Dir struct {
	path string
	opts DirOptions
	fs   vfs.FS
	lock io.Closer

	mu      sync.Mutex
	changed *sync.Cond // a partition finished opening or closing
	topics  map[string]*topic
	open    *list.List // open partitions, most recently used first
	closed  bool

	openFiles  int // files of the open partitions, as last counted
	evictCalls int

	stop chan struct{}
	done sync.WaitGroup

	pids producerIDs // see newProducerID
	txns dirTxns     // see Transactions
}

type topic struct {
	name     string
	id       [16]byte    // see Dir.TopicID
	compact  atomic.Bool // cfg.compacted(), for checks without the lock
	cfg      TopicConfig // merged with the defaults
	gen      int         // counts the changes of cfg: a partition opened meanwhile reconfigures
	parts    []*Partition
	deleting bool // DeleteTopic is closing its partitions
}

// OpenDir opens the data directory at path, creating it if needed. Only
// one Dir may have a directory open at a time; another gets ErrDirLocked.
// It finishes the topic deletes a crash interrupted and removes the
// folders DeleteTopic renamed for deletion; it removes nothing else (see
// Strays). A topic configuration that cannot be read or used fails it
// with ErrBadTopicConfig naming the file.
func OpenDir(path string, opts DirOptions) (*Dir, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: OpenDir of an empty path", ErrInvalidOption)
	}
	if _, err := opts.Log.withDefaults(); err != nil {
		return nil, err
	}
	if opts.Log.FS == nil {
		opts.Log.FS = vfs.Default
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Defaults.Partitions == 0 {
		opts.Defaults.Partitions = 1
	}
	if err := opts.Defaults.check(); err != nil {
		return nil, fmt.Errorf("log: DirOptions.Defaults: %w", err)
	}
	switch {
	case opts.MaxOpenFiles == 0:
		opts.MaxOpenFiles = defaultOpenFiles
	case opts.MaxOpenFiles < 3:
		return nil, fmt.Errorf("%w: MaxOpenFiles is %d, allowed 3 or more", ErrInvalidOption, opts.MaxOpenFiles)
	}
	if opts.MaintenanceInterval == 0 {
		opts.MaintenanceInterval = 5 * time.Minute
	}
	d := &Dir{path: path, opts: opts, fs: opts.Log.FS, topics: make(map[string]*topic), open: list.New(), stop: make(chan struct{})}
	d.changed = sync.NewCond(&d.mu)
	if err := vfs.MkdirAll(d.fs, filepath.Join(path, topicsDir), 0o755); err != nil {
		return nil, fmt.Errorf("log: create %s: %w", path, err)
	}
	lock, err := lockDir(d.fs, path, "a Dir", ErrDirLocked)
	if err != nil {
		return nil, err
	}
	d.lock = lock
	if err := d.load(); err != nil {
		lock.Close()
		return nil, err
	}
	if opts.MaintenanceInterval > 0 {
		d.done.Add(1)
		go d.maintainEvery(opts.MaintenanceInterval)
	}
	if !opts.Replicated {
		if err := d.recoverTransactions(); err != nil {
			return nil, errors.Join(err, d.Close())
		}
	}
	return d, nil
}

// load reads the topic configurations, finishes the deletes a crash
// interrupted and removes the folders they renamed for deletion. It
// removes nothing else: a folder no topic owns may be the user's, or data
// whose configuration was lost (see Strays).
func (d *Dir) load() error {
	for _, dir := range []string{filepath.Dir(d.path), d.path} {
		if err := vfs.SyncDir(d.fs, dir); err != nil {
			return fmt.Errorf("log: sync %s: %w", dir, err)
		}
	}
	names, err := d.fs.List(filepath.Join(d.path, topicsDir))
	if err != nil {
		return fmt.Errorf("log: %w", err)
	}
	var tombstones []string
	for _, name := range names {
		if topicName, ok := strings.CutSuffix(name, configSuffix); ok && ValidateTopic(topicName) == nil {
			cfg, id, err := d.readConfig(d.configName(topicName))
			if err != nil {
				return err
			}
			if err := d.checkConfig(cfg); err != nil {
				return fmt.Errorf("%w: %s: %w", ErrBadTopicConfig, d.configName(topicName), err)
			}
			if id == ([16]byte{}) {
				// Written by a version without topic ids: the topic gets
				// its id now.
				if id, err = newTopicID(); err == nil {
					err = d.writeConfig(topicName, cfg, id)
				}
				if err != nil {
					return err
				}
			}
			d.topics[topicName] = d.newTopic(topicName, id, cfg)
		} else if topicName, ok := strings.CutSuffix(name, tombstoneSuffix); ok && ValidateTopic(topicName) == nil {
			tombstones = append(tombstones, topicName)
		}
		// Anything else is a temporary file of writeConfig, or not ours.
	}
	for _, name := range tombstones {
		if _, ok := d.topics[name]; ok {
			return fmt.Errorf("%w: %s and %s both exist: topic %s is configured and being deleted",
				ErrBadTopicConfig, d.configName(name), d.tombstoneName(name), name)
		}
		if _, err := d.renameAway(name); err != nil {
			return err
		}
	}
	entries, err := d.fs.List(d.path)
	if err != nil {
		return fmt.Errorf("log: %w", err)
	}
	var doomed []string
	for _, name := range entries {
		if isDeletingDir(name) {
			doomed = append(doomed, filepath.Join(d.path, name))
		}
	}
	return d.removeDoomed(doomed)
}

// Strays returns the paths of the entries of the data directory that no
// topic owns: a partition folder whose topic has no configuration, or one
// past its topic's partition count, or anything else a user put there.
// Strand never removes them, since it cannot prove it created them and no
// longer needs them (they may be data whose configuration was lost), and
// CreateTopic and AddPartitions refuse to adopt a folder among them with
// ErrStray: move it out of the data directory, or delete it, to free the
// name. The only folders Strand removes by itself are those DeleteTopic
// renamed to <topic>-<partition>.<32 hex digits>-delete.
func (d *Dir) Strays() ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	entries, err := d.fs.List(d.path)
	if err != nil {
		return nil, fmt.Errorf("log: %w", err)
	}
	var strays []string
	for _, name := range entries {
		if name == topicsDir || name == lockFile || name == producerIDFile || name == producerIDFile+vfs.TempSuffix || isDeletingDir(name) {
			continue
		}
		if tp, p, ok := parsePartitionDir(name); ok {
			if t := d.topics[tp]; t != nil && p < t.cfg.Partitions {
				continue
			}
		}
		strays = append(strays, filepath.Join(d.path, name))
	}
	slices.Sort(strays)
	return strays, nil
}

// partitionDirs returns the names of the folders in the data directory
// of partitions from..to-1 of topic.
func (d *Dir) partitionDirs(topic string, from, to int32) ([]string, error) {
	entries, err := d.fs.List(d.path)
	if err != nil {
		return nil, fmt.Errorf("log: %w", err)
	}
	var dirs []string
	for _, name := range entries {
		if tp, p, ok := parsePartitionDir(name); ok && tp == topic && from <= p && p < to {
			dirs = append(dirs, name)
		}
	}
	return dirs, nil
}

// checkFree refuses with ErrStray if a folder for a partition from..to-1
// of topic already exists: Strand did not create it for this topic.
func (d *Dir) checkFree(topic string, from, to int32) error {
	dirs, err := d.partitionDirs(topic, from, to)
	if err == nil && len(dirs) > 0 {
		err = fmt.Errorf("%w: %s already exists, but Strand did not create it for topic %s; move it out of %s or delete it",
			ErrStray, filepath.Join(d.path, dirs[0]), topic, d.path)
	}
	return err
}

// renameAway renames the folders of the deleted topic whose tombstone is
// in .topics to names only Strand makes, then removes the tombstone: the
// name is free again. It returns the renamed folders, for removeDoomed.
func (d *Dir) renameAway(topic string) ([]string, error) {
	tomb := d.tombstoneName(topic)
	cfg, _, err := d.readConfig(tomb)
	if err != nil {
		return nil, err
	}
	dirs, err := d.partitionDirs(topic, 0, cfg.Partitions)
	if err != nil {
		return nil, err
	}
	var doomed []string
	for _, name := range dirs {
		to := filepath.Join(d.path, deletingName(name))
		if err := d.fs.Rename(filepath.Join(d.path, name), to); err != nil {
			return doomed, fmt.Errorf("log: delete topic %s: %w", topic, err)
		}
		doomed = append(doomed, to)
	}
	if len(doomed) > 0 {
		if err := vfs.SyncDir(d.fs, d.path); err != nil {
			return doomed, fmt.Errorf("log: delete topic %s: %w", topic, err)
		}
	}
	if err := d.fs.Remove(tomb); err != nil {
		return doomed, fmt.Errorf("log: delete topic %s: %w", topic, err)
	}
	if err := vfs.SyncDir(d.fs, filepath.Dir(tomb)); err != nil {
		return doomed, fmt.Errorf("log: delete topic %s: %w", topic, err)
	}
	return doomed, nil
}

// removeDoomed removes folders renameAway renamed.
func (d *Dir) removeDoomed(doomed []string) error {
	var errs []error
	for _, dir := range doomed {
		if err := d.fs.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("log: %w", err))
		}
	}
	if len(doomed) > 0 {
		errs = append(errs, vfs.SyncDir(d.fs, d.path))
	}
	return errors.Join(errs...)
}

// deletingName is the name the partition folder dir (<topic>-<partition>)
// is renamed to for deletion: Kafka's <topic>-<partition>.<uuid>-delete,
// the topic cut short to fit the file name limit as Kafka does
// (UnifiedLog.logDirNameWithSuffixCappedLength). The random 32 hex digits
// make it a name only Strand makes, so OpenDir may remove it.
func deletingName(dir string) string {
	var id [16]byte
	_, _ = rand.Read(id[:]) // crypto/rand.Read never fails
	i := strings.LastIndexByte(dir, '-')
	suffix := dir[i:] + "." + hex.EncodeToString(id[:]) + deletingSuffix
	return dir[:min(i, maxFileName-len(suffix))] + suffix
}

// isDeletingDir reports whether name is one deletingName makes.
func isDeletingDir(name string) bool {
	rest, ok := strings.CutSuffix(name, deletingSuffix)
	i := len(rest) - 33
	if !ok || i <= 0 || rest[i] != '.' {
		return false
	}
	for _, c := range rest[i+1:] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	_, _, ok = parsePartitionDir(rest[:i])
	return ok
}

// parsePartitionDir splits "<topic>-<partition>".
func parsePartitionDir(name string) (string, int32, bool) {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return "", 0, false
	}
	p, err := strconv.ParseInt(name[i+1:], 10, 32)
	if err != nil || p < 0 || ValidateTopic(name[:i]) != nil {
		return "", 0, false
	}
	return name[:i], int32(p), true
}

func (d *Dir) newTopic(name string, id [16]byte, cfg TopicConfig) *topic {
	t := &topic{name: name, id: id, cfg: cfg}
	t.compact.Store(cfg.compacted())
	t.grow(d, cfg.Partitions)
	return t
}

func (t *topic) grow(d *Dir, n int32) {
	for p := int32(len(t.parts)); p < n; p++ {
		t.parts = append(t.parts, &Partition{d: d, topic: t, id: p})
	}
}

func (d *Dir) configName(topic string) string {
	return filepath.Join(d.path, topicsDir, topic+configSuffix)
}

func (d *Dir) tombstoneName(topic string) string {
	return filepath.Join(d.path, topicsDir, topic+tombstoneSuffix)
}

// storedConfig is a configuration file: the topic's configuration and its
// id, as Kafka writes a topic id (Uuid.toString: URL-safe base64 without
// padding).
type storedConfig struct {
	ID string `json:"id,omitempty"`
	TopicConfig
}

// readConfig reads a configuration file, a topic's or a tombstone; it
// checks the partition count, which sizes what is made of it. The id of a
// file written before topic ids is zero.
func (d *Dir) readConfig(name string) (TopicConfig, [16]byte, error) {
	var id [16]byte
	f, err := d.fs.Open(name)
	if err != nil {
		return TopicConfig{}, id, fmt.Errorf("log: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<20))
	if err != nil {
		return TopicConfig{}, id, fmt.Errorf("log: read %s: %w", name, err)
	}
	var sc storedConfig
	if err := json.Unmarshal(data, &sc); err != nil {
		return TopicConfig{}, id, fmt.Errorf("%w: %s: %w", ErrBadTopicConfig, name, err)
	}
	if err := checkPartitions("Partitions", sc.Partitions); err != nil {
		return TopicConfig{}, id, fmt.Errorf("%w: %s: %w", ErrBadTopicConfig, name, err)
	}
	if sc.ID != "" {
		if n, err := base64.RawURLEncoding.Decode(id[:], []byte(sc.ID)); err != nil || n != len(id) || base64.RawURLEncoding.EncodedLen(n) != len(sc.ID) {
			return TopicConfig{}, id, fmt.Errorf("%w: %s: topic id %q is not 16 bytes in URL-safe base64", ErrBadTopicConfig, name, sc.ID)
		}
	}
	return sc.TopicConfig, id, nil
}

// newTopicID returns a random topic id, none of those Kafka reserves (zero,
// and 1 for its metadata topic) and none whose text starts with '-'
// (Uuid.randomUuid), which command lines would take for an option.
func newTopicID() ([16]byte, error) {
	for {
		var id [16]byte
		if _, err := rand.Read(id[:]); err != nil {
			return id, fmt.Errorf("log: topic id: %w", err)
		}
		if id != ([16]byte{}) && id != ([16]byte{15: 1}) && base64.RawURLEncoding.EncodeToString(id[:])[0] != '-' {
			return id, nil
		}
	}
}

// TopicID returns a topic's id (KIP-516): random, given when the topic is
// created (or, for a topic of an earlier version of Strand, when OpenDir
// first reads its configuration) and stored with its configuration. A
// topic deleted and created again under the same name has a new id, so a
// client that names topics by id cannot take one for the other.
func (d *Dir) TopicID(name string) ([16]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, err := d.topicLocked(name)
	if err != nil {
		return [16]byte{}, err
	}
	return t.id, nil
}

// checkConfig checks that every partition of a topic configured by cfg,
// merged with the defaults, can open: a configuration is never written
// unless it passes, and one read from disk that does not is refused.
func (d *Dir) checkConfig(cfg TopicConfig) error {
	if err := cfg.check(); err != nil {
		return err
	}
	if _, err := cfg.logOptions(d.opts.Log).withDefaults(); err != nil {
		return err
	}
	_, err := cfg.compactOptions().withDefaults()
	return err
}

func checkPartitions(option string, n int32) error {
	if n < 1 || n > MaxPartitions {
		return fmt.Errorf("%w: %s is %d, allowed 1 to %d (MaxPartitions)", ErrInvalidOption, option, n, MaxPartitions)
	}
	return nil
}

// writeConfig replaces a topic's configuration atomically: temporary file,
// sync, rename, directory sync. It is the commit point of a create or a
// partition increase.
func (d *Dir) writeConfig(topic string, cfg TopicConfig, id [16]byte) error {
	data, err := json.MarshalIndent(storedConfig{ID: base64.RawURLEncoding.EncodeToString(id[:]), TopicConfig: cfg}, "", "  ")
	if err != nil {
		return err
	}
	name := d.configName(topic)
	tmp := filepath.Join(d.path, topicsDir, topic+".tmp") // no longer than name: see maxTopicLength
	f, err := d.fs.Create(tmp)
	if err != nil {
		return fmt.Errorf("log: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("log: write %s: %w", tmp, err)
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		return fmt.Errorf("log: write %s: %w", tmp, err)
	}
	if err := d.fs.Rename(tmp, name); err != nil {
		return fmt.Errorf("log: %w", err)
	}
	return vfs.SyncDir(d.fs, filepath.Dir(name))
}

// CreateTopic creates a topic. Zero fields of cfg take the Dir's
// defaults (a zero Partitions too); Unlimited and NotCompacted turn off a
// default retention or compaction. A negative partition count or
// retention (but Unlimited) is ErrInvalidOption. The configuration is
// stored with the defaults filled in, so later changes of the Dir's
// defaults leave the topic as it is (AlterTopicConfig changes it). The
// topic gets a random id (see TopicID).
func (d *Dir) CreateTopic(name string, cfg TopicConfig) error {
	id, err := newTopicID()
	if err != nil {
		return err
	}
	return d.CreateTopicWithID(name, id, cfg)
}

// CreateTopicWithID creates a topic as CreateTopic does, with the given id:
// the replicas of a topic on several nodes share the id their cluster gave
// it. A zero id is ErrInvalidOption.
func (d *Dir) CreateTopicWithID(name string, id [16]byte, cfg TopicConfig) error {
	if id == ([16]byte{}) {
		return fmt.Errorf("%w: topic %s: zero topic id", ErrInvalidOption, name)
	}
	if err := ValidateTopic(name); err != nil {
		return err
	}
	cfg = cfg.merged(d.opts.Defaults)
	if err := d.checkConfig(cfg); err != nil {
		return fmt.Errorf("topic %s: %w", name, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	if _, ok := d.topics[name]; ok {
		return fmt.Errorf("%w: %s", ErrTopicExists, name)
	}
	// A delete of this name that failed half-way left its tombstone: the
	// old folders go before the name is reused.
	var doomed []string
	if _, err := d.fs.Stat(d.tombstoneName(name)); err == nil {
		if doomed, err = d.renameAway(name); err != nil {
			return err
		}
	} else if !errors.Is(err, iofs.ErrNotExist) {
		return fmt.Errorf("log: %w", err)
	}
	if err := d.checkFree(name, 0, cfg.Partitions); err != nil {
		return err
	}
	if err := d.writeConfig(name, cfg, id); err != nil {
		return err
	}
	d.topics[name] = d.newTopic(name, id, cfg)
	return d.removeDoomed(doomed)
}

// AddPartitions grows a topic to n partitions, as Kafka's
// kafka-topics --alter --partitions does; it cannot shrink one.
func (d *Dir) AddPartitions(name string, n int32) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	t, ok := d.topics[name]
	if !ok || t.deleting { // new partitions would open while DeleteTopic renames the folders
		return fmt.Errorf("%w: %s", ErrUnknownTopic, name)
	}
	if n < t.cfg.Partitions {
		return fmt.Errorf("%w: topic %s has %d partitions, cannot shrink to %d", ErrInvalidOption, name, t.cfg.Partitions, n)
	}
	if err := checkPartitions("Partitions", n); err != nil {
		return fmt.Errorf("topic %s: %w", name, err)
	}
	if err := d.checkFree(name, t.cfg.Partitions, n); err != nil {
		return err
	}
	cfg := t.cfg
	cfg.Partitions = n
	if err := d.writeConfig(name, cfg, t.id); err != nil {
		return err
	}
	t.cfg = cfg
	t.grow(d, n)
	return nil
}

// DeleteTopic deletes a topic and its data. Its partitions' pending
// operations fail with ErrClosed; readers holding batches of it go on
// reading them until they close them. While it closes the partitions,
// CreateTopic of the same name fails with ErrTopicExists; once it returns,
// the name is free.
//
// The topic's configuration is renamed to a tombstone first, the commit
// point: a crash after it leaves the delete for the next OpenDir to
// finish. Then the partition folders are renamed to names only Strand
// makes (<topic>-<partition>.<32 hex digits>-delete, as Kafka does), the
// tombstone is removed and the name is free; the renamed folders are
// removed last.
func (d *Dir) DeleteTopic(name string) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return ErrClosed
	}
	t, ok := d.topics[name]
	if !ok || t.deleting {
		d.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrUnknownTopic, name)
	}
	t.deleting = true
	var victims []*Partition
	for _, p := range t.parts {
		p.deleted = true
		if d.detachLocked(p) {
			victims = append(victims, p)
		}
	}
	d.mu.Unlock()
	errs := []error{d.closeAll(victims)}
	d.waitClosed(t.parts)

	d.mu.Lock()
	doomed, err := d.commitDeleteLocked(t)
	d.mu.Unlock()
	return errors.Join(append(errs, err, d.removeDoomed(doomed))...)
}

// commitDeleteLocked makes the delete of t durable and renames its folders
// away; see DeleteTopic.
func (d *Dir) commitDeleteLocked(t *topic) ([]string, error) {
	if d.closed { // Close released the directory: nothing may change it now
		return nil, ErrClosed
	}
	if err := d.fs.Rename(d.configName(t.name), d.tombstoneName(t.name)); err != nil {
		t.deleting = false
		for _, p := range t.parts {
			p.deleted = false
		}
		return nil, fmt.Errorf("log: delete topic %s: %w", t.name, err)
	}
	delete(d.topics, t.name)
	if err := vfs.SyncDir(d.fs, filepath.Join(d.path, topicsDir)); err != nil {
		// The tombstone may not be durable: renaming the folders now could
		// leave a topic without its data after a crash. CreateTopic or the
		// next OpenDir finishes the delete.
		return nil, fmt.Errorf("log: delete topic %s: %w", t.name, err)
	}
	return d.renameAway(t.name)
}

// checkOpen returns ErrClosed if the Dir is closed.
func (d *Dir) checkOpen() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	return nil
}

// Topics returns the names of the topics, sorted.
func (d *Dir) Topics() ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	names := make([]string, 0, len(d.topics))
	for name := range d.topics {
		names = append(names, name)
	}
	slices.Sort(names)
	return names, nil
}

// TopicConfig returns a topic's configuration, its zero fields filled in
// from the Dir's defaults (Kafka's DescribeConfigs).
func (d *Dir) TopicConfig(name string) (TopicConfig, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, err := d.topicLocked(name)
	if err != nil {
		return TopicConfig{}, err
	}
	return t.cfg, nil
}

// topicLocked returns a topic that is not being deleted.
func (d *Dir) topicLocked(name string) (*topic, error) {
	if d.closed {
		return nil, ErrClosed
	}
	t, ok := d.topics[name]
	if !ok || t.deleting {
		return nil, fmt.Errorf("%w: %s", ErrUnknownTopic, name)
	}
	return t, nil
}

// AlterTopicConfig changes a topic's configuration (Kafka's
// IncrementalAlterConfigs): alter gets the current configuration, with
// the defaults filled in, and changes what it likes. A field it sets to
// zero takes the Dir's default again (Kafka's DELETE operation);
// Unlimited and NotCompacted turn off what the defaults turn on. The
// partition count cannot change here (see AddPartitions).
//
// The new configuration is checked as CreateTopic checks one, written
// atomically (it is the commit point: a crash leaves the old
// configuration or the new one), and applied to the open partitions at
// once: segment size and age at their next roll, fsync policy,
// compression and MaxBatchBytes at their next append (a change to
// FsyncAlways syncs what was appended before), retention and compaction
// at the next maintenance. Turning compaction on makes the topic refuse
// records without a key from then on; compaction removes those already
// appended. It returns the configuration now in force.
func (d *Dir) AlterTopicConfig(name string, alter func(*TopicConfig)) (TopicConfig, error) {
	d.mu.Lock()
	var t *topic
	var cfg TopicConfig
	for {
		var err error
		if t, err = d.topicLocked(name); err != nil {
			d.mu.Unlock()
			return TopicConfig{}, err
		}
		// alter runs without the lock, so that it may call the Dir; a
		// change meanwhile makes it run again on the changed configuration.
		var gen int
		cfg, gen = t.cfg, t.gen
		d.mu.Unlock()
		alter(&cfg)
		d.mu.Lock()
		if d.topics[name] == t && t.gen == gen {
			break
		}
	}
	if cfg.Partitions != t.cfg.Partitions {
		d.mu.Unlock()
		return TopicConfig{}, fmt.Errorf("%w: topic %s: Partitions changed from %d to %d; use AddPartitions", ErrInvalidOption, name, t.cfg.Partitions, cfg.Partitions)
	}
	cfg = cfg.merged(d.opts.Defaults)
	if err := d.checkConfig(cfg); err != nil {
		d.mu.Unlock()
		return TopicConfig{}, fmt.Errorf("topic %s: %w", name, err)
	}
	if err := d.writeConfig(name, cfg, t.id); err != nil {
		d.mu.Unlock()
		return TopicConfig{}, err
	}
	t.cfg = cfg
	t.gen++
	t.compact.Store(cfg.compacted())
	var live []*Partition
	for _, p := range t.parts {
		if p.state == partOpen {
			p.pins++ // kept open until reconfigured
			live = append(live, p)
		}
	}
	opts := cfg.logOptions(d.opts.Log)
	d.mu.Unlock()
	var errs []error
	for _, p := range live {
		err := p.log.reconfigure(opts)
		p.release(err)
		if err != nil {
			errs = append(errs, fmt.Errorf("topic %s partition %d: %w", name, p.id, err))
		}
	}
	return cfg, errors.Join(errs...)
}

// Partition returns the handle of one partition of a topic.
func (d *Dir) Partition(topicName string, partition int32) (*Partition, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	t, ok := d.topics[topicName]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnknownTopic, topicName)
	}
	if partition < 0 || int(partition) >= len(t.parts) {
		return nil, fmt.Errorf("%w: topic %s partition %d, the topic has partitions 0 to %d", ErrUnknownPartition, topicName, partition, len(t.parts)-1)
	}
	return t.parts[partition], nil
}

// Maintain applies retention and compaction to every partition now, as
// the background maintenance does at each interval, and aborts the
// transactions open past their timeout (see Transactions). It returns the
// partitions' errors joined.
func (d *Dir) Maintain() error {
	return errors.Join(append(d.maintain(), d.tickTransactions())...)
}

// maintain returns the errors of the partitions whose maintenance failed,
// each naming its partition.
func (d *Dir) maintain() []error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return []error{ErrClosed}
	}
	var parts []*Partition
	for _, t := range d.topics {
		if t.cfg.maintained() {
			parts = append(parts, t.parts...)
		}
	}
	d.mu.Unlock()
	var errs []error
	for _, p := range parts {
		if err := p.maintain(); err != nil && !errors.Is(err, ErrClosed) {
			errs = append(errs, fmt.Errorf("topic %s partition %d: %w", p.topic.name, p.id, err))
		}
	}
	return errs
}

func (d *Dir) maintainEvery(interval time.Duration) {
	defer d.done.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
			for _, err := range d.maintain() {
				d.opts.Logger.Error("strand: background maintenance failed", "dir", d.path, "err", err)
			}
		}
	}
}

// Close closes every partition and releases the directory. Operations in
// progress on partitions fail with ErrClosed. The error reports every
// partition whose sync failed during the Dir's life (wrapping ErrFailed):
// those were not shut down cleanly.
func (d *Dir) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return ErrClosed
	}
	d.closed = true
	var victims, all []*Partition
	for e := d.open.Front(); e != nil; {
		p := e.Value.(*Partition)
		e = e.Next()
		d.detachLocked(p)
		victims = append(victims, p)
	}
	for _, t := range d.topics {
		all = append(all, t.parts...)
	}
	d.mu.Unlock()
	close(d.stop)
	d.done.Wait()
	errs := []error{d.closeAll(victims)}
	d.waitClosed(all)
	d.mu.Lock()
	for _, p := range all {
		errs = append(errs, p.failed)
	}
	d.mu.Unlock()
	return errors.Join(append(errs, d.lock.Close())...)
}

// waitClosed waits until no partition of parts is opening or closing.
func (d *Dir) waitClosed(parts []*Partition) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range parts {
		for p.state == partOpening || p.state == partClosing {
			d.changed.Wait()
		}
	}
}

// Partition states.
const (
	partClosed = iota
	partOpening
	partOpen
	partClosing
)

// Partition is one partition of a topic in a Dir. Its methods open the
// partition's Log when needed; they are safe for concurrent use.
type Partition struct {
	d     *Dir
	topic *topic
	id    int32

	// Guarded by d.mu.
	state    int8
	deleted  bool
	verified bool  // opened once: Options.VerifyOnOpen is done
	failed   error // a failed sync (ErrFailed): the partition is never reopened
	log      *Log
	pins     int           // operations using log
	elem     *list.Element // in d.open while open
	files    int           // open files of log, as last counted
}

// Topic returns the partition's topic.
func (p *Partition) Topic() string { return p.topic.name }

// ID returns the partition's number.
func (p *Partition) ID() int32 { return p.id }

func (p *Partition) dir() string {
	return filepath.Join(p.d.path, p.topic.name+"-"+strconv.Itoa(int(p.id)))
}

// acquire returns the partition's open log, opening it if needed, and pins
// it until release. A failed partition refuses changes (write), and
// everything once its log is closed: reopening it would recover, and so
// sync, pages that a failed fsync may have lost from the disk.
func (p *Partition) acquire(write bool) (*Log, error) {
	d := p.d
	d.mu.Lock()
	for {
		switch {
		case d.closed:
			d.mu.Unlock()
			return nil, ErrClosed
		case p.deleted:
			d.mu.Unlock()
			return nil, fmt.Errorf("%w: topic %s partition %d: the topic was deleted; if one of that name was created since, get its partitions from Dir.Partition", ErrStalePartition, p.topic.name, p.id)
		case p.failed != nil && (write || p.state == partClosed):
			err := p.failed
			d.mu.Unlock()
			return nil, err
		case p.state == partOpen:
			p.pins++
			d.open.MoveToFront(p.elem)
			l := p.log
			d.mu.Unlock()
			return l, nil
		case p.state == partClosed:
			p.state = partOpening
			p.pins++
			opts, gen := p.topic.cfg.logOptions(d.opts.Log), p.topic.gen
			opts.VerifyOnOpen = opts.VerifyOnOpen && !p.verified
			d.mu.Unlock()
			l, err := open(p.dir(), opts, true)
			if err == nil {
				if dmg := l.Damage(); dmg != nil {
					d.opts.Logger.Error("strand: partition log damaged; repaired by cutting it, it must fetch the rest from its leader",
						"topic", p.topic.name, "partition", p.id, "file", dmg.File, "position", dmg.Position, "logEndOffset", dmg.LogEndOffset, "err", dmg.Err)
				}
			}
			d.mu.Lock()
			p.verified = p.verified || err == nil
			if err == nil && gen != p.topic.gen {
				// AlterTopicConfig ran while it opened, and found it closed.
				if err = l.reconfigure(p.topic.cfg.logOptions(d.opts.Log)); err != nil {
					l.Close()
				}
			}
			if err != nil {
				p.state = partClosed
				p.pins--
				d.changed.Broadcast()
				d.mu.Unlock()
				return nil, err
			}
			if d.closed || p.deleted {
				// Closed or deleted while opening: nobody else will close it.
				p.state = partClosed
				p.pins--
				d.changed.Broadcast()
				d.mu.Unlock()
				l.Close()
				return nil, ErrClosed
			}
			p.log, p.state = l, partOpen
			p.elem = d.open.PushFront(p)
			p.files = l.Stats().OpenFiles
			d.openFiles += p.files
			d.changed.Broadcast()
			victims := d.evictLocked()
			d.mu.Unlock()
			_ = d.closeAll(victims) // as in release
			return l, nil
		default: // opening or closing elsewhere
			d.changed.Wait()
		}
	}
}

// release unpins the log acquire returned; err is what the operation on
// it returned, and a failed sync fails the partition.
func (p *Partition) release(err error) {
	d := p.d
	d.mu.Lock()
	p.pins--
	if p.failed == nil && errors.Is(err, ErrFailed) {
		p.failed = err
	}
	victims := d.evictLocked()
	d.mu.Unlock()
	_ = d.closeAll(victims) // a failed sync is kept on the partition, for Close to report
}

// evictLocked picks the least recently used unpinned partitions to close
// while the open files exceed the bound, and detaches their logs.
//
// The files of open logs are counted when they open; segments rolled since
// make that an underestimate, so it is recounted every evictRecount calls
// and whenever it passes the bound.
func (d *Dir) evictLocked() []*Partition {
	if d.evictCalls++; d.openFiles <= d.opts.MaxOpenFiles && d.evictCalls%evictRecount != 0 {
		return nil
	}
	files := 0
	for e := d.open.Front(); e != nil; e = e.Next() {
		p := e.Value.(*Partition)
		p.files = p.log.Stats().OpenFiles
		files += p.files
	}
	d.openFiles = files
	var victims []*Partition
	for e := d.open.Back(); e != nil && files > d.opts.MaxOpenFiles; {
		p := e.Value.(*Partition)
		e = e.Prev()
		if p.pins > 0 || p.failed != nil { // a failed log stays open for reads
			continue
		}
		files -= p.files
		d.detachLocked(p)
		victims = append(victims, p)
	}
	return victims
}

// detachLocked takes an open partition's log out of the open set for
// closeAll to close; the partition is closing until then.
func (d *Dir) detachLocked(p *Partition) bool {
	if p.state != partOpen {
		return false
	}
	d.open.Remove(p.elem)
	d.openFiles -= p.files
	p.elem, p.state = nil, partClosing
	return true
}

// closeAll closes the logs of detached partitions and marks them closed.
// A failed sync, found now or before, is kept on the partition rather than
// returned.
func (d *Dir) closeAll(parts []*Partition) error {
	var errs []error
	closeErrs := make([]error, len(parts))
	for i, p := range parts {
		closeErrs[i] = p.log.Close()
		if err := closeErrs[i]; err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrFailed) {
			errs = append(errs, err)
		}
	}
	if len(parts) > 0 {
		d.mu.Lock()
		for i, p := range parts {
			if p.failed == nil && errors.Is(closeErrs[i], ErrFailed) {
				p.failed = closeErrs[i]
			}
			p.log, p.state = nil, partClosed
		}
		d.changed.Broadcast()
		d.mu.Unlock()
	}
	return errors.Join(errs...)
}

// with runs fn on the partition's open log; write says whether fn changes
// the log.
func with[T any](p *Partition, write bool, fn func(*Log) (T, error)) (T, error) {
	l, err := p.acquire(write)
	if err != nil {
		var zero T
		return zero, err
	}
	v, err := fn(l)
	p.release(err)
	return v, err
}

// do runs fn, which returns only an error, on the partition's open log;
// write says whether fn changes the log.
func do(p *Partition, write bool, fn func(*Log) error) error {
	_, err := with(p, write, func(l *Log) (struct{}, error) { return struct{}{}, fn(l) })
	return err
}

// Append appends records to the partition; see Log.Append. A compacted
// topic refuses records without a key (ErrKeyRequired).
func (p *Partition) Append(recs []segment.Record) (AppendResult, error) {
	return p.AppendQueued(recs, nil)
}

// AppendQueued is Append that calls queued once the batch holds its place
// in the partition's order: a batch appended after that gets later
// offsets, although AppendQueued returns only once its batch is written
// and, under FsyncAlways, durable. An appender that must wait for its
// batch to be durable before it answers can so start the next append
// meanwhile, and have two in flight, one written while the other syncs,
// as the log's own appenders do (group.Service writes its offsets so).
// queued is called once at most, with the log's queue locked: it must
// return at once, and not append; an append that fails before it is
// queued does not call it.
func (p *Partition) AppendQueued(recs []segment.Record, queued func()) (AppendResult, error) {
	for i := range recs {
		if err := p.checkKey(i, recs[i].Key); err != nil {
			return AppendResult{}, err
		}
	}
	return p.appendQueued(recs, nil, queued)
}

// appendQueued is Append with Log.appendQueued's queued.
func (p *Partition) appendQueued(recs []segment.Record, prod *segment.ProducerFields, queued func()) (AppendResult, error) {
	return with(p, true, func(l *Log) (AppendResult, error) { return l.appendQueued(recs, prod, queued) })
}

// AppendBatch appends a producer's batch; see Log.AppendBatch. As a Kafka
// leader does (LogValidator), it reads the records of a compressed batch,
// which must decompress within segment.MaxDecompressedSize, and of a
// compacted topic's batch, which must all have keys.
func (p *Partition) AppendBatch(b segment.Batch) (AppendResult, error) {
	if err := p.checkRecords(b); err != nil {
		return AppendResult{}, err
	}
	return with(p, true, func(l *Log) (AppendResult, error) { return l.AppendBatch(b) })
}

// checkRecords reads the records of b if it is compressed or the topic
// compacted, as AppendBatch does.
func (p *Partition) checkRecords(b segment.Batch) error {
	if b.Codec() == segment.CodecNone && !p.topic.compact.Load() {
		return nil
	}
	if err := b.Validate(); err != nil {
		return fmt.Errorf("log %s: %w", p.dir(), err)
	}
	i := 0
	for r, err := range b.Records() {
		if err != nil {
			return fmt.Errorf("log %s: %w", p.dir(), err)
		}
		if err := p.checkKey(i, r.Key); err != nil {
			return err
		}
		i++
	}
	return nil
}

// AppendMarker appends a transaction coordinator's marker; see
// Log.AppendMarker.
func (p *Partition) AppendMarker(b segment.Batch) (AppendResult, error) {
	return with(p, true, func(l *Log) (AppendResult, error) { return l.AppendMarker(b) })
}

// checkKey refuses record i of an append if it has no key and the topic
// is compacted.
func (p *Partition) checkKey(i int, key []byte) error {
	if key == nil && p.topic.compact.Load() {
		return fmt.Errorf("%w: topic %s partition %d, record %d of the batch", ErrKeyRequired, p.topic.name, p.id, i)
	}
	return nil
}

// Read reads whole batches; see Log.Read. The result stays readable after
// the partition is closed, until it is closed itself.
func (p *Partition) Read(offset int64, maxBytes int, iso Isolation) (*Batches, error) {
	return with(p, false, func(l *Log) (*Batches, error) { return l.Read(offset, maxBytes, iso) })
}

// Records yields records from offset from; see Log.Records.
func (p *Partition) Records(from int64, iso Isolation) iter.Seq2[segment.Record, error] {
	return func(yield func(segment.Record, error) bool) {
		l, err := p.acquire(false)
		if err != nil {
			yield(segment.Record{}, err)
			return
		}
		defer p.release(nil)
		l.Records(from, iso)(yield)
	}
}

// Wait waits until a read of offset would return records; see Log.Wait.
func (p *Partition) Wait(ctx context.Context, offset int64, iso Isolation) error {
	if ctx == nil {
		return ErrNilContext
	}
	_, err := with(p, false, func(l *Log) (struct{}, error) { return struct{}{}, l.Wait(ctx, offset, iso) })
	return err
}

// Offsets returns the partition's log start offset, high watermark and log
// end offset.
func (p *Partition) Offsets() (start, highWatermark, end int64, err error) {
	o, err := with(p, false, func(l *Log) ([3]int64, error) {
		return [3]int64{l.LogStartOffset(), l.HighWatermark(), l.LogEndOffset()}, nil
	})
	return o[0], o[1], o[2], err
}

// LastStableOffset returns the partition's last stable offset, where
// ReadCommitted reads stop; see Log.LastStableOffset.
func (p *Partition) LastStableOffset() (int64, error) {
	return with(p, false, func(l *Log) (int64, error) { return l.LastStableOffset(), nil })
}

// OffsetForTimestamp looks an offset up by time; see
// Log.OffsetForTimestamp.
func (p *Partition) OffsetForTimestamp(ts int64) (int64, bool, error) {
	l, err := p.acquire(false)
	if err != nil {
		return 0, false, err
	}
	defer p.release(nil)
	return l.OffsetForTimestamp(ts)
}

// DeleteRecordsBefore advances the log start offset; see
// Log.DeleteRecordsBefore.
func (p *Partition) DeleteRecordsBefore(offset int64) error {
	return do(p, true, func(l *Log) error { return l.DeleteRecordsBefore(offset) })
}

// Sync makes everything appended to the partition so far durable,
// whatever the topic's fsync policy: for a topic with FsyncNever or
// FsyncInterval, at the points where the application needs it. See
// Log.Sync.
func (p *Partition) Sync() error {
	return do(p, true, func(l *Log) error { return l.Sync() })
}

// Damage returns the damage that opening the partition's log repaired,
// kept until ClearDamage; nil if none. See Options.TruncateCorruption,
// which DirOptions.Log sets for every partition.
func (p *Partition) Damage() (*Damage, error) {
	return with(p, false, func(l *Log) (*Damage, error) { return l.Damage(), nil })
}

// ClearDamage forgets the damage opening the partition's log repaired;
// see Log.ClearDamage.
func (p *Partition) ClearDamage() error {
	return do(p, true, func(l *Log) error { return l.ClearDamage() })
}

// Stats returns the partition's log statistics; see Log.Stats.
func (p *Partition) Stats() (Stats, error) {
	return with(p, false, func(l *Log) (Stats, error) { return l.Stats(), nil })
}

// maintain applies the topic's retention and compaction.
func (p *Partition) maintain() error {
	p.d.mu.Lock()
	cfg := p.topic.cfg // AddPartitions replaces it
	p.d.mu.Unlock()
	_, err := with(p, true, func(l *Log) (struct{}, error) {
		now := l.opts.Now()
		if _, err := l.ApplyRetention(now, cfg.Retention); err != nil {
			return struct{}{}, err
		}
		if cfg.compacted() {
			if _, err := l.Compact(now, cfg.compactOptions()); err != nil {
				return struct{}{}, err
			}
		}
		return struct{}{}, nil
	})
	return err
}
