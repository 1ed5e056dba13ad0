package vfs

import (
	"os"

	"golang.org/x/sys/unix"
)

// datasync is fdatasync(2): the file's data and what reading it back
// needs, without the timestamps fsync(2) also writes.
func datasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }

// fallocate backs n bytes at off with blocks, keeping the file's size.
func fallocate(f *os.File, off, n int64) error {
	return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, off, n)
}
