package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/vfs"
)

func readAll(fsys vfs.FS, name string, version int) ([]string, error) {
	var entries []string
	err := Read(fsys, name, version, func(e string) error {
		entries = append(entries, e)
		return nil
	})
	return entries, err
}

func newMemDir(t *testing.T) (*vfs.MemFS, string) {
	t.Helper()
	m := vfs.NewMem()
	require.NoError(t, m.MkdirAll("/d", 0o755))
	require.NoError(t, vfs.SyncDir(m, "/")) // make /d itself durable, as a data directory is
	return m, "/d"
}

func putFile(t *testing.T, fsys vfs.FS, name, content string) {
	t.Helper()
	require.NoError(t, vfs.WriteFileAtomic(fsys, name, []byte(content)))
}

func TestWriteThenRead(t *testing.T) {
	for _, tc := range []struct {
		fs   string
		fsys vfs.FS
		dir  string
	}{
		{"os", vfs.Default, t.TempDir()},
		{"mem", vfs.NewMem(), "/"},
	} {
		t.Run(tc.fs, func(t *testing.T) {
			name := filepath.Join(tc.dir, "cp")
			require.NoError(t, Write(tc.fsys, name, 0, []string{"0 0", "3 17"}))
			got, err := readAll(tc.fsys, name, 0)
			require.NoError(t, err)
			require.Equal(t, []string{"0 0", "3 17"}, got)

			require.NoError(t, Write(tc.fsys, name, 0, nil), "rewriting with no entries")
			got, err = readAll(tc.fsys, name, 0)
			require.NoError(t, err)
			require.Empty(t, got)

			names, err := tc.fsys.List(tc.dir)
			require.NoError(t, err)
			require.Equal(t, []string{"cp"}, names, "no temporary file is left behind")
		})
	}
}

func TestWriteIsKafkasFormat(t *testing.T) {
	m, dir := newMemDir(t)
	name := dir + "/leader-epoch-checkpoint"
	require.NoError(t, Write(m, name, 0, []string{"0 0", "1 250"}))
	require.Equal(t, "0\n2\n0 0\n1 250\n", string(mustRead(t, m, name)))
}

func mustRead(t *testing.T, fsys vfs.FS, name string) []byte {
	t.Helper()
	b, err := vfs.ReadFile(fsys, name)
	require.NoError(t, err)
	return b
}

func TestReadMissingFileIsNotExist(t *testing.T) {
	m, dir := newMemDir(t)
	_, err := readAll(m, dir+"/none", 0)
	require.ErrorIs(t, err, fs.ErrNotExist)
	_, err = ReadOffsets(vfs.Default, filepath.Join(t.TempDir(), "none"))
	require.ErrorIs(t, err, fs.ErrNotExist)
}

func TestReadAcceptsWhatKafkaWrites(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content string
		want    []string
	}{
		{"empty file, as Kafka creates before its first write", "", nil},
		{"no entries", "0\n0\n", nil},
		{"entries", "0\n2\na\nb c\n", []string{"a", "b c"}},
		{"Windows line separators", "0\r\n1\r\n5 10\r\n", []string{"5 10"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, dir := newMemDir(t)
			putFile(t, m, dir+"/cp", tc.content)
			got, err := readAll(m, dir+"/cp", 0)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestReadRejectsCorruptFiles(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content string
		line    int
	}{
		{"other version", "1\n0\n", 1},
		{"version not a number", "v0\n0\n", 1},
		{"version with spaces", " 0\n0\n", 1},
		{"count missing", "0\n", 2},
		{"count not a number", "0\ntwo\na\nb\n", 2},
		{"count negative", "0\n-1\n", 2},
		{"fewer entries than counted", "0\n3\na\nb\n", 2},
		{"more entries than counted (trailing garbage)", "0\n1\na\nb\n", 2},
		{"empty entry", "0\n2\na\n\n", 4},
		{"last line torn off its newline", "0\n1\n0 12", 3},
		{"binary garbage", "\x00\x01\x02\n", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, dir := newMemDir(t)
			putFile(t, m, dir+"/cp", tc.content)
			_, err := readAll(m, dir+"/cp", 0)
			require.ErrorIs(t, err, ErrCorrupt)
			require.ErrorContains(t, err, fmt.Sprintf("/d/cp: line %d:", tc.line))
		})
	}
}

func TestReadReportsParseErrorsWithTheirLine(t *testing.T) {
	m, dir := newMemDir(t)
	putFile(t, m, dir+"/cp", "0\n3\nok\nok\nbad\n")
	errBad := errors.New("bad entry")
	err := Read(m, dir+"/cp", 0, func(e string) error {
		if e == "bad" {
			return errBad
		}
		return nil
	})
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorIs(t, err, errBad, "the parser's own error stays matchable")
	require.ErrorContains(t, err, "/d/cp: line 5: bad entry")
}

func TestWriteRejectsEntriesThatAreNotOneLine(t *testing.T) {
	m, dir := newMemDir(t)
	for _, e := range []string{"", "a\nb", "a\r"} {
		err := Write(m, dir+"/cp", 0, []string{"ok", e})
		require.ErrorIs(t, err, ErrInvalidEntry, "entry %q", e)
	}
	_, err := m.Stat(dir + "/cp")
	require.ErrorIs(t, err, fs.ErrNotExist, "a rejected write creates nothing")
}

var errStop = errors.New("stopped by test")

// stopAt makes every file-system operation from the n-th on fail, as if the
// process died there; it returns a function reporting how many operations
// were attempted.
func stopAt(m *vfs.MemFS, n int) func() int {
	ops := 0
	m.SetHook(func(vfs.Op) error {
		ops++
		if ops > n {
			return errStop
		}
		return nil
	})
	return func() int { return ops }
}

// A crash at any point of a Write leaves the old file or the new one:
// never a mix, never a missing file once one was written.
func TestCrashDuringWriteLeavesOldOrNew(t *testing.T) {
	old := []string{"0 0", "1 100"}
	next := []string{"0 0", "1 100", "2 250", "3 400"}

	for _, existed := range []bool{false, true} {
		setup := func(t *testing.T) (*vfs.MemFS, string) {
			m, dir := newMemDir(t)
			if existed {
				require.NoError(t, Write(m, dir+"/cp", 0, old))
			}
			return m, dir + "/cp"
		}

		m, name := setup(t)
		total := stopAt(m, 1<<30)
		require.NoError(t, Write(m, name, 0, next))
		nops := total()
		require.Greater(t, nops, 4, "a write is create, write, sync, rename and a directory sync")

		for n := 0; n <= nops; n++ {
			t.Run(fmt.Sprintf("existed=%v/stop-at-op-%d", existed, n), func(t *testing.T) {
				m, name := setup(t)
				stopAt(m, n)
				err := Write(m, name, 0, next)
				if n < nops {
					require.ErrorIs(t, err, errStop)
				} else {
					require.NoError(t, err)
				}
				m.SetHook(nil)

				check := func(fsys vfs.FS, what string) {
					got, err := readAll(fsys, name, 0)
					switch {
					case n == nops:
						require.NoError(t, err, what)
						require.Equal(t, next, got, "%s: a completed write is durable", what)
					case errors.Is(err, fs.ErrNotExist):
						require.False(t, existed, "%s: the file vanished", what)
					default:
						require.NoError(t, err, what)
						if len(got) == len(old) {
							require.Equal(t, old, got, what)
						} else {
							require.Equal(t, next, got, what)
						}
					}
				}
				check(m, "the failed process")
				check(m.Crash(vfs.CrashOptions{}), "crash losing all unsynced data")
				for seed := range uint64(20) {
					crashed := m.Crash(vfs.CrashOptions{Rand: rand.New(rand.NewPCG(seed, uint64(n)))})
					check(crashed, fmt.Sprintf("crash keeping some unsynced data (seed %d)", seed))
				}
			})
		}
	}
}

func FuzzRead(f *testing.F) {
	for _, seed := range []string{
		"",
		"0\n0\n",
		"0\n2\n0 0\n1 250\n",
		"0\n1\norders 3 1042\n",
		"0\r\n1\r\na\r\n",
		"1\n0\n",
		"0\n",
		"0\n1\n",
		"0\n1\n\n",
		"0\n99999999999999999999\n",
		"0\n1\na",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m := vfs.NewMem()
		putFile(t, m, "/cp", string(data))
		entries, err := readAll(m, "/cp", 0)
		if err != nil {
			require.ErrorIs(t, err, ErrCorrupt)
			return
		}
		// Whatever Read accepts, Write must reproduce entry for entry.
		require.NoError(t, Write(m, "/cp", 0, entries))
		again, err := readAll(m, "/cp", 0)
		require.NoError(t, err)
		require.Equal(t, entries, again)
	})
}

func ExampleWrite() {
	fsys := vfs.NewMem()
	if err := Write(fsys, "/leader-epoch-checkpoint", 0, []string{"0 0", "4 1200"}); err != nil {
		fmt.Println(err)
		return
	}
	err := Read(fsys, "/leader-epoch-checkpoint", 0, func(entry string) error {
		fmt.Println(entry)
		return nil
	})
	fmt.Println(err)
	// Output:
	// 0 0
	// 4 1200
	// <nil>
}
