package vfs_test

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/strandlog/strand/vfs"
)

// An ErrorFS fails the second sync of any .log file once, as a disk that
// loses a write-back would, and lets everything else through.
func ExampleErrorFS() {
	fs := vfs.NewErrorFS(vfs.NewMem())
	fs.Inject(vfs.Fault{Ops: []vfs.OpKind{vfs.OpSync}, Path: "*.log", After: 1, Times: 1})
	f, _ := fs.Create("/0.log")
	defer f.Close()
	for i := range 3 {
		err := f.Sync()
		fmt.Println(i, err, errors.Is(err, vfs.ErrInjected), errors.Is(err, syscall.EIO))
	}
	// Output:
	// 0 <nil> false false
	// 1 sync /0.log: injected input/output error true true
	// 2 <nil> false false
}
