//go:build linux

package jepsen

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// ErrUnavailable is returned when a fault's mechanism is not there (not
// root, no ip, no mkfs.ext4): the scenario that needs it skips, saying
// why.
var ErrUnavailable = errors.New("fault mechanism unavailable")

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// needRoot returns ErrUnavailable unless the process is root and has the
// commands.
func needRoot(commands ...string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: needs root", ErrUnavailable)
	}
	for _, c := range commands {
		if _, err := exec.LookPath(c); err != nil {
			return fmt.Errorf("%w: no %s", ErrUnavailable, c)
		}
	}
	return nil
}

// Network is one network namespace per node, each joined to a bridge in
// the test's namespace by a veth pair: the test (the clients) at .254 of
// the subnet, node i+1 at .i+1.
type Network struct {
	NS     []string
	bridge string
	subnet string // "10.a.b."
	cut    [][2]int
}

// NewNetwork makes the namespaces, the bridge and the veth pairs.
func NewNetwork(nodes int) (*Network, error) {
	if err := needRoot("ip"); err != nil {
		return nil, err
	}
	id := os.Getpid() % 10000
	n := &Network{bridge: fmt.Sprintf("sjbr%d", id), subnet: fmt.Sprintf("10.213.%d.", id%250)}
	steps := [][]string{
		{"link", "add", n.bridge, "type", "bridge"},
		{"addr", "add", n.subnet + "254/24", "dev", n.bridge},
		{"link", "set", n.bridge, "up"},
	}
	for i := range nodes {
		ns, host, peer := fmt.Sprintf("sj%d-%d", id, i+1), fmt.Sprintf("sjh%d-%d", id, i+1), fmt.Sprintf("sjn%d-%d", id, i+1)
		n.NS = append(n.NS, ns)
		steps = append(steps,
			[]string{"netns", "add", ns},
			[]string{"link", "add", host, "type", "veth", "peer", "name", peer},
			[]string{"link", "set", peer, "netns", ns},
			[]string{"link", "set", host, "master", n.bridge, "up"},
			[]string{"-n", ns, "addr", "add", n.Addr(i) + "/24", "dev", peer},
			[]string{"-n", ns, "link", "set", peer, "up"},
			[]string{"-n", ns, "link", "set", "lo", "up"},
		)
	}
	for _, s := range steps {
		if err := run("ip", s...); err != nil {
			n.Close()
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
	}
	return n, nil
}

// Addr is node i's (from 0) address.
func (n *Network) Addr(i int) string { return fmt.Sprintf("%s%d", n.subnet, i+1) }

// Isolate cuts node i (from 0) off from every other node, both ways, with
// blackhole routes in the namespaces; the clients, on the bridge's
// address, still reach it, as a client on the leader's side of a
// partition does.
func (n *Network) Isolate(i int) error {
	for j := range n.NS {
		if j == i {
			continue
		}
		for _, c := range [][2]int{{i, j}, {j, i}} {
			if err := run("ip", "-n", n.NS[c[0]], "route", "add", "blackhole", n.Addr(c[1])+"/32"); err != nil {
				return err
			}
			n.cut = append(n.cut, c)
		}
	}
	return nil
}

// Heal removes every cut.
func (n *Network) Heal() error {
	var errs []error
	for _, c := range n.cut {
		errs = append(errs, run("ip", "-n", n.NS[c[0]], "route", "del", "blackhole", n.Addr(c[1])+"/32"))
	}
	n.cut = nil
	return errors.Join(errs...)
}

// Close removes the namespaces (their veth ends with them) and the bridge.
func (n *Network) Close() {
	for _, ns := range n.NS {
		run("ip", "netns", "del", ns)
	}
	run("ip", "link", "del", n.bridge)
}

// MountTmpfs mounts a tmpfs of size (mount's size=, "64m") at dir.
func MountTmpfs(dir, size string) error {
	if err := needRoot("mount"); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := run("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir); err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return nil
}

// Unmount unmounts dir, lazily if it is still busy.
func Unmount(dir string) error {
	if err := run("umount", dir); err != nil {
		return run("umount", "-l", dir)
	}
	return nil
}

// Fill writes a file into dir until its file system is full and returns
// the file's path and how many bytes it holds.
func Fill(dir string) (string, int64, error) {
	path := filepath.Join(dir, "jepsen-fill")
	f, err := os.Create(path)
	if err != nil {
		return path, 0, err
	}
	defer f.Close()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err == nil && st.Bavail > 1 {
		// Most of it at once; the writes below take the rest.
		syscall.Fallocate(int(f.Fd()), 0, 0, int64(st.Bavail-1)*st.Bsize)
	}
	chunk := make([]byte, 64<<10)
	off, _ := f.Seek(0, io.SeekEnd)
	for {
		n, err := f.Write(chunk)
		off += int64(n)
		if errors.Is(err, syscall.ENOSPC) {
			return path, off, nil
		}
		if err != nil {
			return path, off, err
		}
	}
}

// Image is an ext4 file system in a file, loop-mounted at a directory:
// a disk whose contents can be copied as a power failure would leave them.
type Image struct {
	Path, Mount string
}

// NewImage makes a sparse image of size bytes with an ext4 file system
// and mounts it.
func NewImage(path, mount string, size int64) (*Image, error) {
	if err := needRoot("mkfs.ext4", "mount", "losetup"); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		return nil, err
	}
	if err := os.Truncate(path, size); err != nil {
		return nil, err
	}
	if err := run("mkfs.ext4", "-q", "-F", path); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if err := os.MkdirAll(mount, 0o755); err != nil {
		return nil, err
	}
	im := &Image{Path: path, Mount: mount}
	if err := im.mount(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return im, nil
}

// mount loop-mounts the image. commit=600 keeps ext4's journal from
// committing by its 5 s timer: with the writers frozen, nothing but an
// fsync commits, so while Snapshot copies, the only writes that can still
// reach the image are the flusher's unordered data writeback, whichever
// of which a real power cut may or may not have let through. (A
// device-mapper suspend would stop even those, but containers seldom
// have device-mapper.)
func (im *Image) mount() error { return run("mount", "-o", "loop,commit=600", im.Path, im.Mount) }

// Snapshot copies the image as it is on the "disk" now: the loop device
// has written to the file what the file system sent it (everything
// fsynced, and whatever writeback flushed), and not the file system's
// dirty page cache. Taken while every process writing to it is frozen.
func (im *Image) Snapshot() (string, error) {
	snap := im.Path + ".power-failure"
	return snap, run("cp", "--sparse=always", im.Path, snap)
}

// Restore unmounts the file system (which flushes its page cache into the
// image, to be thrown away), puts the snapshot in the image's place and
// mounts it again: ext4 replays its journal, as after a power failure.
func (im *Image) Restore(snap string) error {
	if err := Unmount(im.Mount); err != nil {
		return err
	}
	if err := os.Rename(snap, im.Path); err != nil {
		return err
	}
	return im.mount()
}

// Close unmounts the image.
func (im *Image) Close() error { return Unmount(im.Mount) }

// Damage is a way of damaging a replica's files while its node is down.
type Damage string

// The damages.
const (
	// FlipBaseOffset flips bit 44 of a sealed segment's second batch's
	// base offset, outside the CRC-32C (which covers the attributes
	// onward): the 317 stored as 0x100000000000013d.
	FlipBaseOffset Damage = "flip-base-offset"
	// FlipRecordBit flips a bit inside a sealed segment's second batch's
	// records, under the CRC.
	FlipRecordBit Damage = "flip-record-bit"
	// TruncateSealed cuts a sealed segment to half its length.
	TruncateSealed Damage = "truncate-sealed-segment"
	// TruncateIndex cuts a sealed segment's offset index to 5 bytes (not a
	// whole entry).
	TruncateIndex Damage = "truncate-index"
	// GarbleCheckpoint overwrites the partition's leader-epoch checkpoint
	// with garbage.
	GarbleCheckpoint Damage = "garble-epoch-checkpoint"
)

// Apply damages the replica in partDir (a partition's directory in a
// log.Dir) and says what it did.
func (d Damage) Apply(partDir string) (string, error) {
	if d == GarbleCheckpoint {
		path := filepath.Join(partDir, "leader-epoch-checkpoint")
		return path + ": overwritten with garbage", os.WriteFile(path, []byte("0\n2\nxx yy\n"), 0o644)
	}
	seg, err := sealedSegment(partDir)
	if err != nil {
		return "", err
	}
	switch d {
	case TruncateSealed:
		st, err := os.Stat(seg)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s: cut from %d to %d bytes", seg, st.Size(), st.Size()/2), os.Truncate(seg, st.Size()/2)
	case TruncateIndex:
		idx := strings.TrimSuffix(seg, ".log") + ".index"
		return idx + ": cut to 5 bytes", os.Truncate(idx, 5)
	case FlipBaseOffset, FlipRecordBit:
		b, err := os.ReadFile(seg)
		if err != nil {
			return "", err
		}
		// A batch: base offset (8 bytes), batch length (4), then the rest
		// of the header (61 bytes with those two) and the records.
		if len(b) < 12 {
			return "", fmt.Errorf("%s: %d bytes, no batch", seg, len(b))
		}
		second := 12 + int(int32(uint32(b[8])<<24|uint32(b[9])<<16|uint32(b[10])<<8|uint32(b[11])))
		if second+61+1 > len(b) {
			return "", fmt.Errorf("%s: one batch only", seg)
		}
		pos, bit := second+2, byte(1<<4) // bit 44 of the big-endian offset
		if d == FlipRecordBit {
			pos, bit = second+61, 1
		}
		b[pos] ^= bit
		return fmt.Sprintf("%s: flipped bit %#x of byte %d", seg, bit, pos), os.WriteFile(seg, b, 0o644)
	}
	return "", fmt.Errorf("unknown damage %q", d)
}

// sealedSegment returns the oldest segment of a partition that is not its
// active (last) one.
func sealedSegment(partDir string) (string, error) {
	segs, err := filepath.Glob(filepath.Join(partDir, "*.log"))
	if err != nil {
		return "", err
	}
	slices.Sort(segs) // zero-padded base offsets sort as numbers
	if len(segs) < 2 {
		return "", fmt.Errorf("%s: %d segments, none sealed", partDir, len(segs))
	}
	return segs[len(segs)-2], nil
}
