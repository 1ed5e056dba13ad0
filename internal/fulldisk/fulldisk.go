//go:build linux

// Package fulldisk gives tests a real file system that runs out of space:
// a small tmpfs or loop-mounted ext4, mounted for the test and filled on
// demand.
package fulldisk

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// PageBytes is the unit in which tmpfs hands out space.
const PageBytes = 4096

// Mount mounts a tmpfs of size bytes on a new directory and returns it,
// unmounting it when the test ends. Where the kernel refuses the mount
// (the test does not run as root), it skips the test and says why.
func Mount(t testing.TB, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("this test needs to mount a tmpfs (as root): mount -t tmpfs -o size=%d tmpfs %s: %v", size, dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// MountExt4 makes an ext4 file system of size bytes in an image file and
// loop-mounts it on a new directory, unmounting it when the test ends.
// Where mkfs.ext4 is missing or the mount is refused, it skips the test
// and says why.
func MountExt4(t testing.TB, size int) string {
	t.Helper()
	tmp := t.TempDir()
	img, dir := filepath.Join(tmp, "ext4.img"), filepath.Join(tmp, "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, int64(size)); err != nil {
		t.Fatal(err)
	}
	// 4 KiB blocks, as pages; no blocks reserved for root, who runs this.
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-b", "4096", "-m", "0", img).CombinedOutput(); err != nil {
		t.Skipf("this test needs mkfs.ext4 (e2fsprogs): %v %s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, dir).CombinedOutput(); err != nil {
		t.Skipf("this test needs to loop-mount an ext4 image (as root): mount -o loop %s %s: %v %s", img, dir, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

// Fill writes zeros to a new file name until its file system is full.
func Fill(t testing.TB, name string) {
	t.Helper()
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page := make([]byte, PageBytes)
	for {
		if _, err := f.Write(page); err != nil {
			if err, ok := err.(*os.PathError); !ok || err.Err != syscall.ENOSPC {
				t.Fatalf("fill %s: %v, want ENOSPC", name, err)
			}
			return
		}
	}
}

// FreePages returns how many pages the file system holding dir has free.
func FreePages(t testing.TB, dir string) int {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int(st.Bavail) * int(st.Bsize) / PageBytes
}
