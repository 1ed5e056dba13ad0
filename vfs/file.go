package vfs

import (
	"io"
	"path/filepath"
)

// TempSuffix is the suffix WriteFileAtomic gives the file it writes before
// renaming it into place. A leftover name.tmp, from a crash during a write,
// is never read and is replaced by the next write.
const TempSuffix = ".tmp"

// WriteFileAtomic replaces the file name with data so that a crash at any
// moment leaves either the old content or the new: it writes name.tmp,
// syncs it, renames it over name and syncs the directory. It returns only
// once the new content and its name are durable.
func WriteFileAtomic(fs FS, name string, data []byte) error {
	tmp := name + TempSuffix
	if err := writeSynced(fs, tmp, data); err != nil {
		// The temporary file is never read; removing it only saves space,
		// so a failure to remove it is not worth reporting over err.
		_ = fs.Remove(tmp)
		return err
	}
	if err := fs.Rename(tmp, name); err != nil {
		return err
	}
	// The rename is durable only once the directory is synced; until then a
	// crash brings back the old file.
	return SyncDir(fs, filepath.Dir(name))
}

func writeSynced(fs FS, name string, data []byte) error {
	f, err := fs.Create(name)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ReadFile returns the whole content of the file name.
func ReadFile(fs FS, name string) ([]byte, error) {
	f, err := fs.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return io.ReadAll(io.NewSectionReader(f, 0, fi.Size()))
}
