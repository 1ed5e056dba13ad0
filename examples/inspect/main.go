// Command inspect is Strand's kafka-dump-log: it lists the partitions and
// segments of a Strand (or Kafka) log directory, prints batches and records,
// and checks everything it reads. It never writes: files are opened
// read-only and nothing is recovered, truncated or rebuilt.
//
// Usage:
//
//	go run ./examples/inspect [flags] PATH...
//
// PATH is a data directory (holding <topic>-<partition>/ folders), one
// partition directory, or a segment file (.log, .index or .timeindex; the
// segment's other files are read beside it).
//
//	go run ./examples/inspect /var/lib/strand                  # partitions, segments, checkpoints
//	go run ./examples/inspect -batches orders-0                # one line per batch
//	go run ./examples/inspect -records 00000000000000000000.log # and one line per record
//	go run ./examples/inspect -indexes orders-0                # and every index entry
//
// Flags:
//
//	-batches        print one line per batch: offsets, position, size, CRC,
//	                codec, timestamps, producer, flags, leader epoch
//	-records        also print one line per record (implies -batches)
//	-indexes        print the entries of .index and .timeindex files
//	-max-bytes N    show at most N bytes of each key, value and header value
//	                (default 32; -1 shows them whole)
//
// The records of the partitions of __consumer_offsets are decoded with
// group.Decode, and after the partitions inspect prints every group the
// topic holds (its generation, protocol and members, from the latest group
// record) and each committed offset with its lag: the log end offset of the
// partition, if inspect read it, minus the committed offset. A transactional
// commit is shown as written, whether or not its transaction committed.
//
// The checks always run:
//
//   - every batch's framing (length, magic) and CRC-32C, and its records'
//     encoding (record count, lengths, offsets within the batch);
//   - offsets strictly increasing across batches and segments, and every
//     batch's offsets within reach of its file's base offset (the file name);
//   - in a directory Strand wrote, segments that follow each other: the
//     first at or below the log start offset, each next one where the one
//     before ends, except for gaps the log recorded making
//     (segment-gap-checkpoint); a segment deleted by hand is a problem;
//   - every segment file a regular file (a FIFO or device is reported, not
//     opened);
//   - leader epochs never decreasing, and matching leader-epoch-checkpoint;
//   - each .index entry points at the start of a batch whose last offset is
//     the entry's offset; each .timeindex entry names an offset in a batch
//     whose max timestamp is the entry's, with no earlier batch later in
//     time; both obey Kafka's ordering rules, with only zeros after the
//     last entry;
//   - checkpoint files are well formed and agree with the log end offset.
//
// Problems are printed to standard error, each with its file and byte
// position, and the exit status is 1. Damage that opening the log would
// repair by itself (a torn write past the recovery point after an unclean
// shutdown, an index the log rebuilds) is printed as a note instead and does
// not change the exit status. Status 2 means bad usage or an unreadable
// PATH; 0 means every check passed.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit statuses.
const (
	exitClean   = 0
	exitCorrupt = 1
	exitUsage   = 2
)

// options are the command-line flags.
type options struct {
	batches  bool
	records  bool
	indexes  bool
	maxBytes int
}

// run inspects the paths in args and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.BoolVar(&o.batches, "batches", false, "print one line per batch")
	fs.BoolVar(&o.records, "records", false, "print one line per record (implies -batches)")
	fs.BoolVar(&o.indexes, "indexes", false, "print the entries of .index and .timeindex files")
	fs.IntVar(&o.maxBytes, "max-bytes", 32, "bytes of each key, value and header value to show; -1 for all")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: inspect [flags] DATA-DIR | PARTITION-DIR | SEGMENT-FILE ...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitClean
		}
		return exitUsage
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return exitUsage
	}
	o.batches = o.batches || o.records

	in := &inspector{out: stdout, opts: o}
	for _, path := range fs.Args() {
		if err := in.inspectPath(path); err != nil {
			fmt.Fprintf(stderr, "inspect: %v\n", err)
			return exitUsage
		}
	}
	in.printGroups()
	return in.finish(stdout, stderr)
}

// inspector walks the paths, printing what it reads and collecting the
// findings of its checks.
type inspector struct {
	out      io.Writer
	opts     options
	problems []string
	notes    []string
	groups   groups // what the offsets topic's partitions hold
}

// problem records corruption: the exit status becomes 1.
func (in *inspector) problem(file string, format string, args ...any) {
	in.problems = append(in.problems, file+": "+fmt.Sprintf(format, args...))
}

// note records something worth knowing that is not corruption.
func (in *inspector) note(file string, format string, args ...any) {
	in.notes = append(in.notes, file+": "+fmt.Sprintf(format, args...))
}

// finish prints the findings and returns the exit status.
func (in *inspector) finish(stdout, stderr io.Writer) int {
	for _, n := range in.notes {
		fmt.Fprintln(stdout, "note:", n)
	}
	if len(in.problems) == 0 {
		fmt.Fprintln(stdout, "no problems found")
		return exitClean
	}
	for _, p := range in.problems {
		fmt.Fprintln(stderr, "PROBLEM:", p)
	}
	fmt.Fprintf(stderr, "inspect: %d problem(s) found\n", len(in.problems))
	return exitCorrupt
}

func (in *inspector) printf(format string, args ...any) {
	fmt.Fprintf(in.out, format, args...)
}
