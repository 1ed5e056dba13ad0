package group

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/vfs"
)

// Two commits to one offsets partition overlap, as two appends to a log
// do: the second's records are written while the first's fsync still
// runs, and the second is answered only once the first is durable too, in
// log order. A Service that wrote one append at a time would not write the
// second until the first fsync returned.
func TestServicePipelinesCommits(t *testing.T) {
	fs := newMemDataFS(t)
	d, s := openMemService(t, fs, 1, func() time.Time { return epoch })
	defer func() { require.NoError(t, d.Close()) }()
	defer func() { require.NoError(t, s.Close()) }()

	written := make(chan struct{}, 64)
	release := make(chan struct{})
	var blocked atomic.Bool
	fs.SetHook(func(op vfs.Op) error {
		if !strings.Contains(op.Name, OffsetsTopic) || !strings.HasSuffix(op.Name, ".log") {
			return nil
		}
		switch op.Kind {
		case vfs.OpWrite:
			written <- struct{}{}
		case vfs.OpSync:
			if blocked.CompareAndSwap(false, true) {
				<-release // the first fsync takes its time
			}
		}
		return nil
	})
	defer fs.SetHook(nil)

	commit := func(group string) chan error {
		done := make(chan error, 1)
		go func() { done <- serviceCommit(context.Background(), s, group, "", -1, "t", 0, 7) }()
		return done
	}
	first := commit("g1")
	<-written
	second := commit("g2")
	select {
	case <-written:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("the second commit was not written while the first synced")
	}
	select {
	case err := <-second:
		t.Fatalf("the second commit was answered before the first was durable: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	assert.Empty(t, first, "the first commit answered before its fsync")
	close(release)
	require.NoError(t, <-first)
	require.NoError(t, <-second)
}
