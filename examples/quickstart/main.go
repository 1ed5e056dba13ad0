// Command quickstart writes records into one Strand segment, Kafka's
// on-disk format, and reads them back by offset and by timestamp.
//
//	go run ./examples/quickstart -dir /tmp/strand-quickstart
//
// The segment's files (.log, .index, .timeindex) stay in the directory.
package main

import (
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/strandlog/strand/segment"
)

func main() {
	dir := flag.String("dir", "", "directory for the segment files (default: a new folder under the OS temp dir)")
	records := flag.Int("records", 5000, "records to write")
	perBatch := flag.Int("batch", 250, "records per batch")
	flag.Parse()
	if err := run(*dir, *records, *perBatch); err != nil {
		log.Fatal(err)
	}
}

func run(dir string, records, perBatch int) error {
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "strand-quickstart-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	fmt.Println("segment directory:", dir)

	seg, err := segment.Create(dir, 0, segment.Options{})
	if err != nil {
		return err
	}
	defer seg.Close()

	// Write: every other batch is LZ4-compressed, as a Kafka producer with
	// compression.type=lz4 would send it. Timestamps rise 1 ms a record.
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixMilli()
	var buf []byte
	batches, compressed := 0, 0
	for off := 0; off < records; off += perBatch {
		n := min(perBatch, records-off)
		recs := make([]segment.Record, n)
		for i := range recs {
			o := off + i
			recs[i] = segment.Record{
				Timestamp: start + int64(o),
				Key:       fmt.Appendf(nil, "user-%d", o%97),
				Value:     fmt.Appendf(nil, `{"event":%d,"amount":%d}`, o, o*7%1000),
				Headers:   []segment.Header{{Key: "source", Value: []byte("quickstart")}},
			}
		}
		codec := segment.CodecNone
		if batches%2 == 1 {
			codec = segment.CodecLZ4
			compressed++
		}
		if buf, err = segment.AppendBatch(buf[:0], recs, segment.BuildOptions{BaseOffset: int64(off), Codec: codec}); err != nil {
			return err
		}
		if err := seg.Append(segment.Batch(buf)); err != nil {
			return err
		}
		batches++
	}
	if err := seg.Sync(); err != nil {
		return err
	}
	fmt.Printf("wrote %d records in %d batches (%d lz4-compressed): %d bytes, offsets 0 to %d\n",
		records, batches, compressed, seg.Size(), seg.NextOffset()-1)

	// Read by offset: the batch holding offset 1234, then its record.
	target := int64(min(1234, records-1))
	sl, err := seg.Read(target, math.MaxInt64, 1)
	if err != nil {
		return err
	}
	var r segment.Record
	if err := eachRecord(sl, func(rec segment.Record) bool { r = rec; return rec.Offset < target }); err != nil {
		return err
	}
	fmt.Printf("offset %d: key=%s value=%s headers=%s=%s\n", r.Offset, r.Key, r.Value, r.Headers[0].Key, r.Headers[0].Value)

	// Read by time: the first record at or after start+3s.
	at := start + min(3000, int64(records-1))
	off, ok, err := seg.FindTimestamp(at)
	if err != nil || !ok {
		return fmt.Errorf("find timestamp %d: found %v, %v", at, ok, err)
	}
	fmt.Printf("first record at or after %s: offset %d\n", time.UnixMilli(at).UTC().Format(time.RFC3339Nano), off)

	// Everything back, checked.
	all, err := seg.Read(0, math.MaxInt64, math.MaxInt32)
	if err != nil {
		return err
	}
	n := 0
	if err := eachRecord(all, func(segment.Record) bool { n++; return true }); err != nil {
		return err
	}
	fmt.Printf("read back %d records, every batch's CRC checked\n", n)
	if err := seg.Seal(); err != nil {
		return err
	}
	names, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, name := range names {
		fi, err := os.Stat(name)
		if err == nil {
			fmt.Printf("  %s  %d bytes\n", filepath.Base(name), fi.Size())
		}
	}
	return nil
}

// eachRecord validates the batches of sl and calls fn with each record
// until fn returns false.
func eachRecord(sl segment.Slice, fn func(segment.Record) bool) error {
	data, err := sl.Bytes()
	if err != nil {
		return err
	}
	for len(data) > 0 {
		var b segment.Batch
		if b, data, err = segment.ParseBatch(data); err != nil {
			return err
		}
		if err := b.Validate(); err != nil {
			return err
		}
		for r, err := range b.Records() {
			if err != nil {
				return err
			}
			if !fn(r) {
				return nil
			}
		}
	}
	return nil
}
