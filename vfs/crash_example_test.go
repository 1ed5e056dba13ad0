package vfs_test

import (
	"fmt"

	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/vfs"
)

// An application checks what a power cut leaves of its log: it appends on
// a MemFS, crashes it, and reopens the log on what the crash left. With
// FsyncAlways every acknowledged record survives; with FsyncNever the
// records the operating system had not yet written are lost.
func ExampleMemFS_Crash() {
	for _, fsync := range []log.FsyncPolicy{log.FsyncAlways(), log.FsyncNever()} {
		fs := vfs.NewMem()
		l, err := log.Open("/data/orders-0", log.Options{FS: fs, Fsync: fsync})
		if err != nil {
			panic(err)
		}
		for i := range 3 {
			if _, err := l.Append([]log.Record{log.NewRecord(nil, fmt.Appendf(nil, "order %d", i))}); err != nil {
				panic(err)
			}
		}

		// The power goes: the process never closes its log.
		after := fs.Crash(vfs.CrashOptions{})
		l, err = log.Open("/data/orders-0", log.Options{FS: after})
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: %d of 3 records survived\n", fsync, l.LogEndOffset())
		l.Close()
	}
	// Output:
	// always: 3 of 3 records survived
	// never: 0 of 3 records survived
}
