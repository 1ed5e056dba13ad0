package log

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/strandlog/strand/vfs"
)

// producerIDFile, in the data directory, holds the first producer id not
// yet reserved, in decimal.
const producerIDFile = ".producer-ids"

// producerIDBlock is how many producer ids one write of producerIDFile
// reserves, as Kafka's ProducerIdManager takes blocks of 1000 ids from the
// controller: a restart skips the rest of the block, and never hands out
// an id twice.
const producerIDBlock = 1000

// producerIDs hands out the producer ids of a Dir's idempotent producers.
type producerIDs struct {
	mu        sync.Mutex
	next, end int64 // ids next..end-1 are reserved and not handed out
	loaded    bool
}

// NewProducerID returns a producer id no producer of this data directory had
// before, across restarts, as Kafka's ProducerIdManager hands one to each
// InitProducerId: for a broker serving idempotent producers over the network,
// or a transaction coordinator's AllocateProducerID.
func (d *Dir) NewProducerID() (int64, error) { return d.newProducerID() }

// newProducerID returns a producer id no producer of this data directory
// had before, across restarts. The block it comes from is durable before
// the id is returned.
func (d *Dir) newProducerID() (int64, error) {
	a := &d.pids
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.next < a.end {
		a.next++
		return a.next - 1, nil
	}
	name := filepath.Join(d.path, producerIDFile)
	start := a.end
	if !a.loaded {
		data, err := vfs.ReadFile(d.fs, name)
		switch {
		case errors.Is(err, iofs.ErrNotExist):
			start = 0
		case err != nil:
			return 0, fmt.Errorf("log: producer ids: %w", err)
		default:
			start, err = strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
			if err != nil || start < 0 {
				return 0, fmt.Errorf("%w: %s holds %q, not a producer id", ErrCorrupt, name, data)
			}
		}
	}
	if start > math.MaxInt64-producerIDBlock {
		return 0, fmt.Errorf("log: producer ids: %s: every producer id is used", name)
	}
	end := start + producerIDBlock
	if err := vfs.WriteFileAtomic(d.fs, name, []byte(strconv.FormatInt(end, 10)+"\n")); err != nil {
		return 0, fmt.Errorf("log: producer ids: %w", err)
	}
	a.loaded, a.next, a.end = true, start+1, end
	return start, nil
}
