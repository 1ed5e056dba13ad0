package cluster

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// flightRecorder keeps the last lines the nodes logged, at every level,
// for a simulator seed that fails to show what led up to it: a seed
// replays its faults but not its goroutines' interleaving, so a rare
// failure may not come back.
type flightRecorder struct {
	began time.Time
	mu    sync.Mutex
	lines []string
	next  int
	full  bool
}

func newFlightRecorder(capacity int) *flightRecorder {
	return &flightRecorder{began: time.Now(), lines: make([]string, capacity)}
}

func (r *flightRecorder) add(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines[r.next] = line
	r.next = (r.next + 1) % len(r.lines)
	r.full = r.full || r.next == 0
}

// last returns the recorded lines, oldest first.
func (r *flightRecorder) last() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.full {
		return append([]string(nil), r.lines[:r.next]...)
	}
	return append(append([]string(nil), r.lines[r.next:]...), r.lines[:r.next]...)
}

// logger returns a logger whose records the recorder keeps.
func (r *flightRecorder) logger() *slog.Logger {
	return slog.New(&flightHandler{r: r})
}

// flightHandler formats a record as slog's text handler would, with the
// time since the recorder began in place of the wall clock.
type flightHandler struct {
	r *flightRecorder
	// scope replays the handler's WithAttrs and WithGroup, in order.
	scope []func(slog.Handler) slog.Handler
}

func (h *flightHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *flightHandler) Handle(_ context.Context, rec slog.Record) error {
	var buf bytes.Buffer
	text := slog.Handler(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.String("at", rec.Time.Sub(h.r.began).Round(time.Microsecond).String())
			}
			return a
		},
	}))
	for _, f := range h.scope {
		text = f(text)
	}
	if err := text.Handle(context.Background(), rec); err != nil {
		return err
	}
	h.r.add(string(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))))
	return nil
}

func (h *flightHandler) with(f func(slog.Handler) slog.Handler) slog.Handler {
	return &flightHandler{r: h.r, scope: append(h.scope[:len(h.scope):len(h.scope)], f)}
}

func (h *flightHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return h.with(func(t slog.Handler) slog.Handler { return t.WithAttrs(attrs) })
}

func (h *flightHandler) WithGroup(name string) slog.Handler {
	return h.with(func(t slog.Handler) slog.Handler { return t.WithGroup(name) })
}

func TestFlightRecorderKeepsTheLastLinesInOrder(t *testing.T) {
	r := newFlightRecorder(3)
	log := r.logger().With("node", 1)
	for i := range 5 {
		log.Debug("line", "i", i)
	}
	got := r.last()
	require.Len(t, got, 3)
	for i, line := range got {
		require.Contains(t, line, fmt.Sprintf("level=DEBUG msg=line node=1 i=%d", i+2))
		require.True(t, strings.HasPrefix(line, "at="), line)
	}
}
