package broker

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/log"
)

// fetchResponse is a FetchResponse whose record sets are still in the
// segment files. kmsg encodes it with a sentinel in place of each record set;
// write swaps each sentinel, and the length kmsg gave it, for the record
// set's length and its bytes, which Batches.WriteTo sends from the file with
// sendfile when the connection is a socket (else it copies). So the wire
// bytes are kmsg's encoding, and the batches never pass through user space.
type fetchResponse struct {
	*kmsg.FetchResponse
	sentinel []byte
	sets     []*log.Batches // the record sets, in the order they are encoded
}

// sentinelSize makes a sentinel unlike any bytes of a response: 16 random
// bytes.
const sentinelSize = 16

func newSentinel() []byte {
	s := make([]byte, sentinelSize)
	rand.Read(s)
	return s
}

// close releases the segments of the record sets.
func (f *fetchResponse) close() {
	for _, s := range f.sets {
		s.Close()
	}
}

// write frames and writes the response to w, the record sets from their
// files, and returns buf for reuse.
func (f *fetchResponse) write(w io.Writer, h header, buf []byte) ([]byte, error) {
	buf = appendResponse(buf[:0], h, f.FetchResponse)
	flexible := f.IsFlexible()
	// Records are nullable bytes: an int32 length, or in flexible versions
	// an unsigned varint of length+1.
	lengthOf := func(n int64) []byte {
		if flexible {
			return binary.AppendUvarint(nil, uint64(n)+1)
		}
		return binary.BigEndian.AppendUint32(nil, uint32(n))
	}
	stub := lengthOf(sentinelSize)
	type piece struct {
		b   []byte
		set *log.Batches
	}
	var pieces []piece
	total, pos := int64(len(buf)), 0
	for _, set := range f.sets {
		i := bytes.Index(buf[pos:], f.sentinel)
		if i < 0 || i < len(stub) || !bytes.Equal(buf[pos+i-len(stub):pos+i], stub) {
			return buf, fmt.Errorf("broker: fetch response: record set %d of %d not found in kmsg's encoding", len(pieces)/3, len(f.sets))
		}
		start := pos + i - len(stub)
		length := lengthOf(set.Len())
		pieces = append(pieces, piece{b: buf[pos:start]}, piece{b: length}, piece{set: set})
		total += int64(len(length)-len(stub)-sentinelSize) + set.Len()
		pos += i + sentinelSize
	}
	pieces = append(pieces, piece{b: buf[pos:]})
	if total-4 > math.MaxInt32 {
		return buf, fmt.Errorf("broker: fetch response of %d bytes", total)
	}
	binary.BigEndian.PutUint32(buf, uint32(total-4))
	for _, p := range pieces {
		var err error
		if p.set != nil {
			_, err = p.set.WriteTo(w)
		} else if len(p.b) > 0 {
			_, err = w.Write(p.b)
		}
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}
