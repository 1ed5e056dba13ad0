package index_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/strandlog/strand/index"
	"github.com/strandlog/strand/vfs"
)

// Example indexes three batches of a segment starting at offset 100, finds
// where to start reading offset 125 and the first offset at or after a
// timestamp, then seals both indexes as a roll does.
func Example() {
	dir, err := os.MkdirTemp("", "index")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	const base = 100
	offsets, err := index.OpenOffset(vfs.Default, filepath.Join(dir, "00000000000000000100.index"), base, 10<<20, true)
	if err != nil {
		log.Fatal(err)
	}
	defer offsets.Close()
	times, err := index.OpenTime(vfs.Default, filepath.Join(dir, "00000000000000000100.timeindex"), base, 10<<20, true)
	if err != nil {
		log.Fatal(err)
	}
	defer times.Close()

	// Each entry maps a batch's last offset to the position where the
	// batch starts, and the largest timestamp so far to its offset.
	for _, b := range []struct {
		lastOffset int64
		position   uint32
		maxTime    int64
	}{
		{109, 4200, 1_700_000_000_000},
		{119, 8400, 1_700_000_001_000},
		{129, 12600, 1_700_000_002_000},
	} {
		if err := offsets.Append(b.lastOffset, b.position); err != nil {
			log.Fatal(err)
		}
		if err := times.MaybeAppend(b.maxTime, b.lastOffset, false); err != nil {
			log.Fatal(err)
		}
	}

	fmt.Println("scan for offset 125 from", offsets.Lookup(125))
	fmt.Println("scan for time 1_700_000_001_500 from", times.Lookup(1_700_000_001_500))

	if err := offsets.Seal(); err != nil {
		log.Fatal(err)
	}
	if err := times.Seal(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("sealed sizes:", offsets.SizeBytes(), times.SizeBytes())
	// Output:
	// scan for offset 125 from {119 8400}
	// scan for time 1_700_000_001_500 from {1700000001000 119}
	// sealed sizes: 24 36
}
