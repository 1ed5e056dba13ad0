// Package checkpoint reads and writes Kafka's text checkpoint files, such as
// recovery-point-offset-checkpoint and leader-epoch-checkpoint.
//
// A checkpoint file is a version line, a count line and that many entry
// lines, each ended by a newline (apache/kafka:
// server-common/src/main/java/org/apache/kafka/server/common/CheckpointFile.java):
//
//	0
//	2
//	orders 0 1042
//	orders 1 977
//
// Write replaces a file atomically: it writes name.tmp, syncs it, renames it
// over name and syncs the directory, so that after a crash the file holds
// either its old entries or its new ones, never a mix, and a file that was
// once written is never missing.
package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/strandlog/strand/vfs"
)

// ErrCorrupt is matched (errors.Is) by the error Read returns for a file
// that is not a well-formed checkpoint of the expected version. The error's
// message names the file and the line.
var ErrCorrupt = errors.New("checkpoint: corrupt file")

// ErrInvalidEntry is matched by the error Write returns for an entry that
// cannot be stored on one line: an empty entry or one holding a line break.
var ErrInvalidEntry = errors.New("checkpoint: invalid entry")

// Write atomically replaces the checkpoint file name with one holding
// version and entries. It returns only once the new content and its name
// are durable. If it fails, the file holds its old or its new content.
func Write(fs vfs.FS, name string, version int, entries []string) error {
	var buf bytes.Buffer
	buf.WriteString(strconv.Itoa(version))
	buf.WriteByte('\n')
	buf.WriteString(strconv.Itoa(len(entries)))
	buf.WriteByte('\n')
	for i, e := range entries {
		if e == "" || strings.ContainsAny(e, "\r\n") {
			return fmt.Errorf("%w %q for %s (entry %d)", ErrInvalidEntry, e, name, i)
		}
		buf.WriteString(e)
		buf.WriteByte('\n')
	}

	return vfs.WriteFileAtomic(fs, name, buf.Bytes())
}

// Read reads the checkpoint file name and calls parse with each entry, in
// file order. A missing file is reported with an error matching
// fs.ErrNotExist, so that callers can treat it as empty.
//
// A file that is not a well-formed checkpoint of the given version, and an
// entry that parse rejects, are reported with an error matching ErrCorrupt
// (and, for parse, also matching parse's error) that names the file and
// line.
//
// An empty file has no entries: Kafka creates checkpoint files empty before
// it first writes them. Unlike Kafka, Read rejects a file with a version but
// no count, and a last line without its newline: Write never leaves either,
// so they mean the file was damaged.
func Read(fs vfs.FS, name string, version int, parse func(entry string) error) error {
	data, err := vfs.ReadFile(fs, name)
	if err != nil {
		return err
	}
	if len(data) == 0 {
		return nil
	}
	corrupt := func(line int, format string, args ...any) error {
		return fmt.Errorf("%w %s: line %d: %s", ErrCorrupt, name, line, fmt.Sprintf(format, args...))
	}
	text := string(data)
	if !strings.HasSuffix(text, "\n") {
		return corrupt(strings.Count(text, "\n")+1, "no newline at end of file")
	}
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	for i, l := range lines {
		// Kafka writes the platform's line separator, \r\n on Windows.
		lines[i] = strings.TrimSuffix(l, "\r")
	}

	v, err := strconv.Atoi(lines[0])
	if err != nil {
		return corrupt(1, "version %q is not a number", lines[0])
	}
	if v != version {
		return corrupt(1, "version %d, want %d", v, version)
	}
	if len(lines) < 2 {
		return corrupt(2, "missing entry count")
	}
	count, err := strconv.Atoi(lines[1])
	if err != nil || count < 0 {
		return corrupt(2, "entry count %q is not a non-negative number", lines[1])
	}
	entries := lines[2:]
	if len(entries) != count {
		return corrupt(2, "entry count %d, but the file has %d entries", count, len(entries))
	}
	for i, e := range entries {
		line := i + 3
		if e == "" {
			return corrupt(line, "empty entry")
		}
		if strings.Contains(e, "\r") {
			return corrupt(line, "carriage return inside an entry")
		}
		if err := parse(e); err != nil {
			return fmt.Errorf("%w %s: line %d: %w", ErrCorrupt, name, line, err)
		}
	}
	return nil
}
