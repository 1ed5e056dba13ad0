// Package kafkarecords runs Apache Kafka's own record classes
// (MemoryRecords, MemoryRecordsBuilder, DefaultRecordBatch, EndTransactionMarker),
// compiled from Kafka's source with javac, beside Strand's package segment,
// so that a test can check on many random batches that what Strand writes
// Kafka reads, and what Kafka writes Strand reads, field for field. Kafka's
// source is not part of this module: point the test at a checkout of
// apache/kafka (see README.md).
package kafkarecords

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/strandlog/strand/segment"
)

// KafkaError is an exception Kafka's code threw.
type KafkaError struct{ Class, Message string }

func (e *KafkaError) Error() string { return "kafkarecords: Kafka threw " + e.Class + ": " + e.Message }

// sourceDir is the source root, relative to a Kafka checkout, that holds the
// record classes and what they use.
const sourceDir = "clients/src/main/java"

// mainClass is the harness's driver, in this module's harness directory.
const mainClass = "org.strandlog.kafkarecords.Harness"

// Build compiles the harness (this module's harness directory, which also
// holds the stand-ins for the libraries Kafka's classes would pull in) and,
// through it, Kafka's record classes from the checkout at kafkaSrc into out.
// lz4Jar is lz4-java's jar, which Kafka's LZ4 codec needs.
func Build(kafkaSrc, harnessDir, lz4Jar, out string) error {
	if _, err := os.Stat(filepath.Join(kafkaSrc, sourceDir)); err != nil {
		return fmt.Errorf("kafkarecords: %s is not a Kafka checkout: %w", kafkaSrc, err)
	}
	main := filepath.Join(harnessDir, filepath.FromSlash(strings.ReplaceAll(mainClass, ".", "/"))+".java")
	path := harnessDir + string(os.PathListSeparator) + filepath.Join(kafkaSrc, sourceDir)
	cmd := exec.Command("javac", "-nowarn", "-encoding", "UTF-8", "-d", out, "-cp", lz4Jar, "-sourcepath", path, main)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kafkarecords: javac: %w\n%s", err, msg)
	}
	return nil
}

// Harness is a running JVM with Kafka's record classes.
type Harness struct {
	cmd *exec.Cmd
	in  *bufio.Writer
	inc io.Closer
	out *bufio.Scanner
}

// Start starts the harness on the classes Build wrote.
func Start(classes, lz4Jar string) (*Harness, error) {
	cmd := exec.Command("java", "-cp", classes+string(os.PathListSeparator)+lz4Jar, mainClass)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("kafkarecords: starting java: %w", err)
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<28)
	return &Harness{cmd: cmd, in: bufio.NewWriterSize(in, 1<<20), inc: in, out: sc}, nil
}

// Close stops the JVM.
func (h *Harness) Close() error {
	h.inc.Close()
	return h.cmd.Wait()
}

// call sends one request and returns the answer's lines, up to "E".
func (h *Harness) call(request string) ([][]string, error) {
	if _, err := h.in.WriteString(request); err != nil {
		return nil, fmt.Errorf("kafkarecords: writing to java: %w", err)
	}
	if err := h.in.Flush(); err != nil {
		return nil, fmt.Errorf("kafkarecords: writing to java: %w", err)
	}
	var lines [][]string
	for h.out.Scan() {
		f := strings.Split(h.out.Text(), "\t")
		switch f[0] {
		case "E":
			if len(lines) == 1 && lines[0][0] == "X" {
				return nil, &KafkaError{Class: lines[0][1], Message: lines[0][2]}
			}
			return lines, nil
		default:
			lines = append(lines, f)
		}
	}
	if err := h.out.Err(); err != nil {
		return nil, fmt.Errorf("kafkarecords: reading from java: %w", err)
	}
	return nil, errors.New("kafkarecords: java exited")
}

// View is what a reader reports of one batch: its header fields, its
// records, and for a control batch what each record's control key and
// value say. Kafka's and Strand's views of the same bytes must be equal.
type View struct {
	Fields
	Records []segment.Record

	// Markers holds, per record of a control batch, "COMMIT <epoch>" or
	// "ABORT <epoch>" for a transaction marker, or what else the reader
	// made of it.
	Markers []string
}

// Fields are a batch's header fields, as the reader reports them.
type Fields struct {
	BaseOffset           int64
	Size                 int
	PartitionLeaderEpoch int32
	Magic                int8
	CRC                  uint32
	Codec                segment.Codec
	LogAppendTime        bool
	Transactional        bool
	Control              bool
	DeleteHorizon        string // the horizon in ms, or "-" for none
	LastOffset           int64
	BaseTimestamp        int64
	MaxTimestamp         int64
	ProducerID           int64
	ProducerEpoch        int16
	BaseSequence         int32
	NumRecords           int32
}

// Read has Kafka read raw as one batch (see the harness's R request).
func (h *Harness) Read(raw []byte) (*View, error) {
	lines, err := h.call("R\t" + hex.EncodeToString(raw) + "\n")
	if err != nil {
		return nil, err
	}
	var v View
	p := parser{}
	for _, f := range lines {
		switch f[0] {
		case "B":
			if len(f) != 18 {
				return nil, fmt.Errorf("kafkarecords: batch line with %d fields", len(f))
			}
			v.BaseOffset = p.int(f[1], 64)
			v.Size = int(p.int(f[2], 32))
			v.PartitionLeaderEpoch = int32(p.int(f[3], 32))
			v.Magic = int8(p.int(f[4], 8))
			v.CRC = uint32(p.int(f[5], 64))
			v.Codec = segment.Codec(p.int(f[6], 8))
			v.LogAppendTime, v.Transactional, v.Control = f[7] == "1", f[8] == "1", f[9] == "1"
			v.DeleteHorizon = f[10]
			v.LastOffset = p.int(f[11], 64)
			v.BaseTimestamp = p.int(f[12], 64)
			v.MaxTimestamp = p.int(f[13], 64)
			v.ProducerID = p.int(f[14], 64)
			v.ProducerEpoch = int16(p.int(f[15], 16))
			v.BaseSequence = int32(p.int(f[16], 32))
			v.NumRecords = int32(p.int(f[17], 32))
		case "r":
			r := segment.Record{Offset: p.int(f[1], 64), Timestamp: p.int(f[2], 64), Key: p.bytes(f[3]), Value: p.bytes(f[4])}
			for i := 5; i+1 < len(f); i += 2 {
				r.Headers = append(r.Headers, segment.Header{Key: string(p.bytes(f[i])), Value: p.bytes(f[i+1])})
			}
			v.Records = append(v.Records, r)
		case "c":
			v.Markers = append(v.Markers, f[1]+" "+f[2])
		}
	}
	return &v, p.err
}

// BuildSpec is a batch for Kafka's MemoryRecordsBuilder to build.
type BuildSpec struct {
	Codec                segment.Codec
	BaseOffset           int64
	PartitionLeaderEpoch int32
	Producer             segment.ProducerFields // all -1 for none
	Transactional        bool
	LogAppendTime        int64 // -1 for CreateTime
	// KeepOffsets appends each record at its Offset (appendWithOffset)
	// rather than at the next offset (append).
	KeepOffsets bool
	Records     []segment.Record
}

// Build has Kafka's MemoryRecordsBuilder build the batch spec describes.
func (h *Harness) Build(spec BuildSpec) ([]byte, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "W\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%d\n", spec.Codec, spec.BaseOffset, spec.PartitionLeaderEpoch,
		spec.Producer.ID, spec.Producer.Epoch, spec.Producer.BaseSequence, bit(spec.Transactional), spec.LogAppendTime)
	for _, r := range spec.Records {
		offset := int64(-1)
		if spec.KeepOffsets {
			offset = r.Offset
		}
		fmt.Fprintf(&b, "r\t%d\t%d\t%s\t%s", offset, r.Timestamp, hexOrNull(r.Key), hexOrNull(r.Value))
		for _, hd := range r.Headers {
			fmt.Fprintf(&b, "\t%x\t%s", hd.Key, hexOrNull(hd.Value))
		}
		b.WriteString("\n")
	}
	b.WriteString("E\n")
	return h.built(b.String())
}

// Marker has Kafka's MemoryRecords.withEndTransactionMarker write a
// transaction marker batch: commit or abort, for producer (id, epoch).
func (h *Harness) Marker(commit bool, coordinatorEpoch int32, baseOffset, timestamp int64, leaderEpoch int32, producerID int64, producerEpoch int16) ([]byte, error) {
	typ := "ABORT"
	if commit {
		typ = "COMMIT"
	}
	return h.built(fmt.Sprintf("M\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", typ, coordinatorEpoch, baseOffset, timestamp, leaderEpoch, producerID, producerEpoch))
}

func (h *Harness) built(request string) ([]byte, error) {
	lines, err := h.call(request)
	if err != nil {
		return nil, err
	}
	if len(lines) != 1 || lines[0][0] != "H" {
		return nil, fmt.Errorf("kafkarecords: unexpected answer %q", lines)
	}
	return hex.DecodeString(lines[0][1])
}

func bit(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func hexOrNull(b []byte) string {
	if b == nil {
		return "-"
	}
	return hex.EncodeToString(b)
}

// parser reads the harness's fields, keeping the first error.
type parser struct{ err error }

func (p *parser) int(s string, bits int) int64 {
	v, err := strconv.ParseInt(s, 10, 64)
	if err == nil && bits < 64 && (v < -1<<(bits-1) || v >= 1<<bits) {
		err = fmt.Errorf("%d out of range", v)
	}
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("kafkarecords: field %q: %w", s, err)
	}
	return v
}

func (p *parser) bytes(s string) []byte {
	if s == "-" {
		return nil
	}
	b, err := hex.DecodeString(s)
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("kafkarecords: field %q: %w", s, err)
	}
	if b == nil {
		b = []byte{}
	}
	return b
}
