package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// readChunk is what every reader asks for at a time: Kafka's default
// max.partition.fetch.bytes, and the raw reader's buffer.
const readChunk = 1 << 20

// compareReadAndReopen builds a large and a small log, times reopening
// each after a clean Close, then reads the large one whole from the page
// cache beside a raw sequential read of its segment files.
func compareReadAndReopen(shape logShape, payloads [][]byte) (cmps []comparison, err error) {
	if shape.bigLogSkipped != "" {
		fmt.Printf("the %s log is %s instead: %s\n", sizeName(fullBigLog), sizeName(shape.bigLog), shape.bigLogSkipped)
	}
	parent, err := tempDir()
	if err != nil {
		return nil, err
	}
	defer removeAfter(parent, &err)
	big, small := filepath.Join(parent, "big-0"), filepath.Join(parent, "small-0")
	records, err := buildLog(big, payloads, shape.bigLog)
	if err != nil {
		return nil, err
	}
	if _, err := buildLog(small, payloads, shape.smallLog); err != nil {
		return nil, err
	}

	c, err := compareReopen(shape, big, small)
	if err != nil {
		return nil, err
	}
	cmps = append(cmps, c)
	cs, err := compareRead(shape, big, records)
	if err != nil {
		return nil, err
	}
	return append(cmps, cs...), nil
}

// buildLog writes at least size bytes of the payloads in batches to a new
// log in dir without fsync and closes it cleanly; it returns the number
// of records.
func buildLog(dir string, payloads [][]byte, size int64) (int64, error) {
	l, err := log.Open(dir, log.Options{Fsync: log.FsyncNever()})
	if err != nil {
		return 0, err
	}
	recs := valueRecords(payloads)
	for l.Stats().Bytes < size {
		if _, err := l.Append(recs); err != nil {
			return 0, errors.Join(err, l.Close())
		}
	}
	return l.LogEndOffset(), l.Close()
}

// compareReopen times log.Open of the big and the small log after a clean
// Close; the ratio is the big log's time over the small one's.
func compareReopen(shape logShape, big, small string) (comparison, error) {
	const opensPerRun = 4
	var opens, withClose [2][]time.Duration
	for range shape.reps * opensPerRun {
		for i, dir := range []string{big, small} {
			start := time.Now()
			l, err := log.Open(dir, log.Options{Fsync: log.FsyncNever()})
			if err != nil {
				return comparison{}, err
			}
			opened := time.Since(start)
			if err := l.Close(); err != nil {
				return comparison{}, err
			}
			opens[i] = append(opens[i], opened)
			withClose[i] = append(withClose[i], time.Since(start))
		}
	}
	median := func(ds []time.Duration) time.Duration { slices.Sort(ds); return ds[len(ds)/2] }
	fmt.Printf("%-24s %-22s %12s %12s\n", "reopen after Close", "log", "Open", "Open+Close")
	for i, size := range []int64{shape.bigLog, shape.smallLog} {
		fmt.Printf("%-24s %-22s %12s %12s\n", "", sizeName(size), median(opens[i]).Round(time.Microsecond), median(withClose[i]).Round(time.Microsecond))
	}
	return comparison{
		name:  fmt.Sprintf("reopen-%s-vs-%s", sizeName(shape.bigLog), sizeName(shape.smallLog)),
		value: float64(median(opens[0])) / float64(median(opens[1])),
		bound: 2, atMost: true,
	}, nil
}

// compareRead reads the whole log in dir, which holds records records:
// raw, through the log three ways, and decoded by franz-go's kmsg. The
// first ratio takes the log's ReadAt path, which does what the raw read
// does (copy the file's bytes into a 1 MiB buffer) and walks the batch
// headers to know where to read next; the second sets the log's record
// iterator against kmsg decoding the same batches as franz-go's consumer
// does (CRC checked, every record decoded), both from the page cache.
func compareRead(shape logShape, dir string, records int64) ([]comparison, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*"+segment.LogSuffix))
	if err != nil {
		return nil, err
	}
	l, err := log.Open(dir, log.Options{Fsync: log.FsyncNever()})
	if err != nil {
		return nil, err
	}
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return nil, errors.Join(err, l.Close())
	}
	buf := make([]byte, readChunk)
	run := func(read func() (int64, error)) func() (sample, error) {
		return func() (sample, error) {
			start := time.Now()
			n, err := read()
			s := sample{records: n, elapsed: time.Since(start)}
			if err == nil && n != records {
				err = fmt.Errorf("read %d records of %d", n, records)
			}
			return s, err
		}
	}
	raw := func() (int64, error) {
		_, err := readFiles(files, buf)
		return records, err
	}
	// Warm the page cache: the issue compares reads from it.
	if _, err := raw(); err != nil {
		return nil, errors.Join(err, devNull.Close(), l.Close())
	}
	var decoded int64 // kmsg's records, counted apart: readLog counts offsets
	ss, err := medians(shape.reps,
		run(raw),
		run(func() (int64, error) { return readLog(l, readAtInto(buf)) }),
		run(func() (int64, error) { return readLog(l, sendTo(devNull)) }),
		run(func() (int64, error) { return countRecords(l) }),
		run(func() (int64, error) { decoded = 0; return readLog(l, kmsgDecode(buf, &decoded)) }),
	)
	if err == nil && decoded != records {
		err = fmt.Errorf("kmsg decoded %d records of %d", decoded, records)
	}
	if err := errors.Join(err, devNull.Close(), l.Close()); err != nil {
		return nil, err
	}
	const test = "read whole log, cached"
	note := fmt.Sprintf("%s in %d segment files", sizeName(shape.bigLog), len(files))
	printRate(test, "raw read 1 MiB", ss[0], recordSize, note)
	printRate(test, "strand Read+ReadAt", ss[1], recordSize, "Read(1 MiB), ReadAt into 1 MiB, walk headers")
	printRate(test, "strand Read+sendfile", ss[2], recordSize, "Read(1 MiB), WriteTo(/dev/null), walk headers")
	printRate(test, "strand Records", ss[3], recordSize, "every record decoded, every CRC checked")
	printRate(test, "franz-go kmsg", ss[4], recordSize, "Read(1 MiB), ReadAt, kmsg batch and records, CRC checked")
	return []comparison{
		{name: "log-read-vs-raw-read", value: ss[1].perSec() / ss[0].perSec(), bound: 0.8},
		{name: "log-records-vs-kmsg-decode", value: ss[3].perSec() / ss[4].perSec(), bound: 1},
	}, nil
}

// readFiles reads files whole, in order, through buf.
func readFiles(files []string, buf []byte) (int64, error) {
	var total int64
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return total, err
		}
		for {
			n, err := f.Read(buf)
			total += int64(n)
			if err == io.EOF {
				break
			}
			if err != nil {
				return total, errors.Join(err, f.Close())
			}
		}
		if err := f.Close(); err != nil {
			return total, err
		}
	}
	return total, nil
}

// readLog reads l from its start to its end in Read calls of readChunk
// bytes, handing each result to consume, which returns the offset after
// the last batch it got. It returns the number of offsets read.
func readLog(l *log.Log, consume func(*log.Batches) (int64, error)) (int64, error) {
	start := l.LogStartOffset()
	next := start
	for {
		bs, err := l.Read(next, readChunk, log.ReadLogEnd)
		if err != nil {
			return next - start, err
		}
		if bs.Len() == 0 {
			return next - start, bs.Close()
		}
		next, err = consume(bs)
		if err := errors.Join(err, bs.Close()); err != nil {
			return next - start, err
		}
	}
}

// readAtInto copies the batches into buf and walks them.
func readAtInto(buf []byte) func(*log.Batches) (int64, error) {
	return func(bs *log.Batches) (int64, error) {
		if bs.Len() > int64(len(buf)) {
			return 0, fmt.Errorf("a read of %d bytes does not fit the %d-byte buffer", bs.Len(), len(buf))
		}
		data := buf[:bs.Len()]
		if n, err := bs.ReadAt(data, 0); n < len(data) {
			return 0, err
		}
		var next int64
		for len(data) > 0 {
			b, rest, err := segment.ParseBatch(data)
			if err != nil {
				return 0, err
			}
			next, data = b.LastOffset()+1, rest
		}
		return next, nil
	}
}

// kmsgDecode copies the batches into buf and decodes them with franz-go's
// kmsg as its consumer does: each batch's CRC-32C checked over the bytes
// after the CRC field, then every record read. It counts the records in n.
//
// kmsg's RecordBatch.ReadFrom does not check the CRC; franz-go's consumer
// (kgo) checks it over the same bytes, and so does this, as Log.Records
// does. Both sides read each chunk into one reused buffer and decode
// records that alias it (Log.Records documents it), and neither
// allocates per record: the same work on the same batches.
func kmsgDecode(buf []byte, n *int64) func(*log.Batches) (int64, error) {
	var batch kmsg.RecordBatch
	var rec kmsg.Record
	return func(bs *log.Batches) (int64, error) {
		data := buf[:bs.Len()]
		if got, err := bs.ReadAt(data, 0); got < len(data) {
			return 0, err
		}
		var next int64
		for len(data) > 0 {
			size := 12 + int(binary.BigEndian.Uint32(data[8:]))
			if err := batch.ReadFrom(data[:size]); err != nil {
				return 0, err
			}
			if crc32.Checksum(data[21:size], castagnoli) != uint32(batch.CRC) {
				return 0, fmt.Errorf("batch at offset %d: CRC mismatch", batch.FirstOffset)
			}
			raw := batch.Records
			for range batch.NumRecords {
				length, lenSize := binary.Varint(raw)
				if err := rec.ReadFrom(raw); err != nil {
					return 0, err
				}
				raw = raw[lenSize+int(length):]
				*n++
			}
			next, data = batch.FirstOffset+int64(batch.LastOffsetDelta)+1, data[size:]
		}
		return next, nil
	}
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// sendTo sends the batches to w (with sendfile if w is a file) and reads
// their headers to find where they end.
func sendTo(w io.Writer) func(*log.Batches) (int64, error) {
	hdr := make([]byte, segment.HeaderSize)
	return func(bs *log.Batches) (int64, error) {
		if _, err := bs.WriteTo(w); err != nil {
			return 0, err
		}
		var next int64
		for pos := int64(0); pos < bs.Len(); {
			if _, err := bs.ReadAt(hdr, pos); err != nil && err != io.EOF {
				return 0, err
			}
			b, err := segment.ParseBatchHeader(hdr)
			if err != nil {
				return 0, err
			}
			next, pos = b.LastOffset()+1, pos+int64(b.Size())
		}
		return next, nil
	}
}

// countRecords iterates over every record of l.
func countRecords(l *log.Log) (int64, error) {
	var n int64
	for r, err := range l.Records(l.LogStartOffset(), log.ReadLogEnd) {
		if err != nil {
			return n, err
		}
		if len(r.Value) != recordSize {
			return n, fmt.Errorf("record %d has a %d-byte value", r.Offset, len(r.Value))
		}
		n++
	}
	return n, nil
}
