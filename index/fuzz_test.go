package index

import (
	"errors"
	"testing"

	"github.com/strandlog/strand/vfs"
)

// FuzzOpenOffset opens arbitrary bytes as an offset index file. Open must
// not panic; it either fails with ErrCorrupt or yields an index whose
// entries obey the rules, whose lookups agree with them, and which reopens
// to the same entries after an append.
func FuzzOpenOffset(f *testing.F) {
	f.Add([]byte{}, false)
	f.Add(offsetBytes(10, 4100, 20, 8200), true)
	f.Add(cat(offsetBytes(10, 4100, 20, 8200), zeros(64)), true)
	f.Add(cat(offsetBytes(10, 4100), zeros(8), offsetBytes(30, 9000)), false)
	f.Add(offsetBytes(10, 4100, 5, 8200), true)
	f.Add(offsetBytes(0x80000000, 1), false)
	f.Add([]byte{1, 2, 3}, true)
	f.Fuzz(func(t *testing.T, data []byte, active bool) {
		const base, name = 1000, "/f.index"
		fsys := vfs.NewMem()
		writeFile(t, fsys, name, data)
		x, err := OpenOffset(fsys, name, base, 256, active)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("open: %v is not ErrCorrupt", err)
			}
			return
		}
		entries := x.all()
		prev := OffsetPosition{Offset: base}
		for i, e := range entries {
			if e.Offset < prev.Offset || (i > 0 && e.Offset == prev.Offset) || e.Position <= prev.Position {
				t.Fatalf("entry %d %+v does not follow %+v", i, e, prev)
			}
			if got := x.Lookup(e.Offset); got != e {
				t.Fatalf("Lookup(%d) = %+v, want entry %d %+v", e.Offset, got, i, e)
			}
			if got := x.Lookup(e.Offset - 1); got != prev {
				t.Fatalf("Lookup(%d) = %+v, want %+v", e.Offset-1, got, prev)
			}
			prev = e
		}
		if got := x.Lookup(1 << 62); got != prev {
			t.Fatalf("Lookup(max) = %+v, want last %+v", got, prev)
		}
		if err := x.Unseal(); err != nil {
			t.Fatal(err)
		}
		if !x.IsFull() {
			next := OffsetPosition{prev.Offset + 1, prev.Position + 1}
			if err := x.Append(next.Offset, next.Position); err != nil && !errors.Is(err, ErrOffsetOverflow) && !errors.Is(err, ErrInvalidPosition) {
				t.Fatal(err)
			} else if err == nil {
				entries = append(entries, next)
			}
		}
		if err := x.Close(); err != nil {
			t.Fatal(err)
		}
		y, err := OpenOffset(fsys, name, base, 256, false)
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		defer y.Close()
		if got := y.all(); len(got) != len(entries) || (len(got) > 0 && got[len(got)-1] != entries[len(entries)-1]) {
			t.Fatalf("reopened with %v, want %v", got, entries)
		}
	})
}

// FuzzOpenTime is FuzzOpenOffset for the time index.
func FuzzOpenTime(f *testing.F) {
	f.Add([]byte{}, false)
	f.Add(cat(timeBytes(1000, 5), timeBytes(2000, 5)), true)
	f.Add(cat(timeBytes(1000, 5), zeros(36)), true)
	f.Add(cat(timeBytes(1000, 5), zeros(12), timeBytes(3000, 9)), false)
	f.Add(cat(timeBytes(1000, 5), timeBytes(900, 6)), true)
	f.Add(timeBytes(-1, 0), false)
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, true)
	f.Fuzz(func(t *testing.T, data []byte, active bool) {
		const base, name = 1000, "/f.timeindex"
		fsys := vfs.NewMem()
		writeFile(t, fsys, name, data)
		x, err := OpenTime(fsys, name, base, 240, active)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("open: %v is not ErrCorrupt", err)
			}
			return
		}
		entries := x.all()
		prev := TimestampOffset{NoTimestamp, base}
		for i, e := range entries {
			if e.Timestamp <= prev.Timestamp || e.Offset < prev.Offset {
				t.Fatalf("entry %d %+v does not follow %+v", i, e, prev)
			}
			if got := x.Lookup(e.Timestamp); got != e {
				t.Fatalf("Lookup(%d) = %+v, want entry %d %+v", e.Timestamp, got, i, e)
			}
			if got := x.Lookup(e.Timestamp - 1); got != prev {
				t.Fatalf("Lookup(%d) = %+v, want %+v", e.Timestamp-1, got, prev)
			}
			prev = e
		}
		if got := x.LastEntry(); got != prev {
			t.Fatalf("LastEntry() = %+v, want %+v", got, prev)
		}
		if err := x.Unseal(); err != nil {
			t.Fatal(err)
		}
		if prev.Timestamp < 1<<62 {
			next := TimestampOffset{prev.Timestamp + 1, prev.Offset + 1}
			if err := x.MaybeAppend(next.Timestamp, next.Offset, true); err == nil {
				entries = append(entries, next)
			} else if !errors.Is(err, ErrOffsetOverflow) && !errors.Is(err, ErrIndexFull) {
				t.Fatal(err)
			}
		}
		if err := x.Close(); err != nil {
			t.Fatal(err)
		}
		y, err := OpenTime(fsys, name, base, 240, false)
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		defer y.Close()
		if got := y.all(); len(got) != len(entries) || (len(got) > 0 && got[len(got)-1] != entries[len(entries)-1]) {
			t.Fatalf("reopened with %v, want %v", got, entries)
		}
	})
}
