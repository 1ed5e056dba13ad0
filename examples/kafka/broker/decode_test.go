package broker

import (
	"encoding/binary"
	"io"
	"log/slog"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// FuzzDecode feeds arbitrary frames to the request decoder, which must
// return a request, an error response or an error, never panic: a frame
// comes from whoever connects.
func FuzzDecode(f *testing.F) {
	formatter := kmsg.NewRequestFormatter(kmsg.FormatterClientID("fuzz"))
	for key, a := range servedAPIs() {
		for _, v := range []int16{a.min, a.max} {
			req := kmsg.RequestForKey(key)
			req.SetVersion(v)
			f.Add(formatter.AppendRequest(nil, req, 1)[4:])
		}
	}
	f.Add(binary.BigEndian.AppendUint16([]byte{0, 99, 0, 0, 0, 0, 0, 1}, 0xffff))
	b := &Broker{logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) < 8 {
			return // readFrame refuses frames shorter than a header
		}
		r, resp, err := b.decode(frame, "127.0.0.1")
		if err == nil && resp == nil && r.body == nil {
			t.Fatalf("no request, response or error for %x", frame)
		}
		if resp != nil {
			appendResponse(nil, r.header, resp)
		}
	})
}
