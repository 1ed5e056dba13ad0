//go:build unix && !linux

package vfs

import (
	"errors"
	"os"
)

// datasync is os.File.Sync: these systems have no fdatasync in
// golang.org/x/sys, and on macOS Sync is fcntl(F_FULLFSYNC), which, unlike
// fsync(2) there, flushes the drive's cache too.
func datasync(f *os.File) error { return f.Sync() }

// fallocate is not offered here; Allocate writes zeros instead.
func fallocate(*os.File, int64, int64) error { return errors.ErrUnsupported }
