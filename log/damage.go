package log

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"path/filepath"

	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
)

// damagedFile, in a log's directory, records the damage an Open repaired
// (Options.TruncateCorruption) until ClearDamage: a restart before the
// replica refetched what was cut must not take the shorter log for whole.
const damagedFile = "damaged"

// Damage is what Open found damaged in a log opened with
// Options.TruncateCorruption, and how it repaired it: the log was cut
// before its first bad batch and the batch before that (a base offset or
// leader epoch that breaks the order with the next batch may be the
// earlier one's), and the segments after it were removed; a damaged
// checkpoint file is read as holding offset 0, a damaged leader epoch
// checkpoint is rebuilt from the batches. The log is shorter than
// it was, and may be shorter than what its replica acknowledged: the
// caller logs it at level Error, keeps the replica out of the ISR and out
// of leader elections until it has fetched the rest from the leader, and
// then calls ClearDamage.
//
// Damage is kept in a file in the log's directory until ClearDamage, so
// that every Open after the repair reports it too, even after a crash.
// Damage implements error and wraps Err, which wraps ErrCorrupt.
type Damage struct {
	// Dir is the log's directory, the partition's folder.
	Dir string `json:"dir"`
	// File is the first damaged file found, and Position the byte
	// position of its first bad batch, or -1 if the damage is not at a
	// batch of File: a checkpoint, or a segment that does not follow the
	// one before.
	File     string `json:"file"`
	Position int64  `json:"position"`
	// LogEndOffset is the log end offset after the repair: the records
	// from there on were cut (if only a checkpoint was damaged, none
	// were). An Open that crashed while it repaired leaves it for the
	// next Open to set.
	LogEndOffset int64 `json:"logEndOffset"`
	// Err is what was found, every damage joined; in a Damage read back
	// from the record, its text.
	Err error `json:"-"`
}

func (d *Damage) Error() string {
	return fmt.Sprintf("log %s: damaged %s at position %d, cut to end at offset %d: %v", d.Dir, d.File, d.Position, d.LogEndOffset, d.Err)
}

// Unwrap returns what was found.
func (d *Damage) Unwrap() error { return d.Err }

// storedDamage is damagedFile's content.
type storedDamage struct {
	Damage
	Err string `json:"err"`
}

// foundDamage records err, met while loading file, as damage that Open
// repairs, if it is corruption and Options.TruncateCorruption is set;
// otherwise it returns err. The record is durable before the repair
// changes anything.
func (l *Log) foundDamage(err error, file string) error {
	if !l.opts.TruncateCorruption || !errors.Is(err, ErrCorrupt) {
		return err
	}
	if l.found == nil {
		l.found = &Damage{Dir: l.dir, File: file, Position: -1, LogEndOffset: -1, Err: err}
		var pe *segment.PositionError
		if errors.As(err, &pe) {
			l.found.File, l.found.Position = pe.File, pe.Position
		}
	} else {
		l.found.Err = errors.Join(l.found.Err, err)
	}
	return l.writeDamage(l.found)
}

func (l *Log) writeDamage(d *Damage) error {
	text := d.Err.Error()
	if e, ok := d.Err.(*earlierDamage); ok {
		text = e.text
	}
	data, err := json.Marshal(storedDamage{Damage: *d, Err: text})
	if err != nil {
		return err
	}
	if err := vfs.WriteFileAtomic(l.fs, filepath.Join(l.dir, damagedFile), data); err != nil {
		return fmt.Errorf("log %s: recording damage: %w", l.dir, err)
	}
	return nil
}

// readDamage reads the record of an earlier repair, if there is one.
func (l *Log) readDamage() (*Damage, error) {
	name := filepath.Join(l.dir, damagedFile)
	f, err := l.fs.Open(name)
	if errors.Is(err, iofs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("log %s: %w", l.dir, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("log %s: read %s: %w", l.dir, name, err)
	}
	var sd storedDamage
	if err := json.Unmarshal(data, &sd); err != nil {
		// The record itself is damaged; what it said is lost, not that
		// the log was repaired.
		sd = storedDamage{Damage: Damage{File: name, Position: -1, LogEndOffset: -1}, Err: err.Error()}
	}
	d := sd.Damage
	d.Dir = l.dir
	d.Err = &earlierDamage{text: sd.Err}
	return &d, nil
}

// earlierDamage is the error of a Damage read back from its record: the
// text of what an earlier Open found.
type earlierDamage struct{ text string }

func (e *earlierDamage) Error() string { return "repaired by an earlier Open: " + e.text }

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *earlierDamage) Is(target error) bool { return target == ErrCorrupt }

// recordDamage makes what this Open found and repaired, and what earlier
// ones did, the log's Damage, durably, once the log ends at leo; an
// earlier record left by an Open that crashed while it repaired gets its
// log end offset.
func (l *Log) recordDamage(leo int64) error {
	switch {
	case l.found != nil:
		if l.damage != nil {
			l.found.Err = errors.Join(l.found.Err, l.damage.Err)
		}
		l.found.LogEndOffset = leo
		l.damage = l.found
	case l.damage != nil && l.damage.LogEndOffset < 0:
		l.damage.LogEndOffset = leo
	default:
		return nil
	}
	return l.writeDamage(l.damage)
}

// Damage returns the damage that Open repaired, in this Open or an
// earlier one, since the last ClearDamage; nil if none. See
// Options.TruncateCorruption.
func (l *Log) Damage() *Damage {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.damage == nil {
		return nil
	}
	d := *l.damage
	return &d
}

// ClearDamage forgets the damage Open repaired, once the caller has made
// up for it (a replica fetched from its leader what the repair cut, and
// is back in the ISR): later Opens no longer report it.
func (l *Log) ClearDamage() error {
	if err := l.lockWriter(true); err != nil {
		return err
	}
	defer l.wmu.Unlock()
	if err := l.fs.Remove(filepath.Join(l.dir, damagedFile)); err != nil && !errors.Is(err, iofs.ErrNotExist) {
		return fmt.Errorf("log %s: %w", l.dir, err)
	}
	if err := vfs.SyncDir(l.fs, l.dir); err != nil {
		return l.fail(err)
	}
	l.mu.Lock()
	l.damage = nil
	l.mu.Unlock()
	return nil
}
