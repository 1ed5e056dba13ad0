// Package kafkaassign runs Apache Kafka's own assignors, compiled from
// Kafka's source with javac, beside Strand's package assign, so that a test
// can compare them on many random groups. Kafka's source is not part of this
// module: point the test at a checkout of apache/kafka (see README.md).
package kafkaassign

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/strandlog/strand/assign"
)

// ErrTimeout reports a group on which Kafka's assignor did not return in time.
var ErrTimeout = errors.New("kafkaassign: Kafka's assignor did not return in time")

// KafkaError is an exception Kafka's assignor threw.
type KafkaError struct{ Message string }

func (e *KafkaError) Error() string { return "kafkaassign: Kafka threw " + e.Message }

// sourceDirs are the source roots, relative to a Kafka checkout, that hold
// the assignors and what they use.
var sourceDirs = []string{
	"clients/src/main/java",
	"group-coordinator/src/main/java",
	"group-coordinator/group-coordinator-api/src/main/java",
	"server-common/src/main/java",
}

// Build compiles the harness (this module's harness directory, which also
// holds the stand-ins for the libraries Kafka's classes would pull in) and,
// through it, Kafka's assignors from the checkout at kafkaSrc into out.
func Build(kafkaSrc, harnessDir, out string) error {
	for _, d := range sourceDirs {
		if _, err := os.Stat(filepath.Join(kafkaSrc, d)); err != nil {
			return fmt.Errorf("kafkaassign: %s is not a Kafka checkout: %w", kafkaSrc, err)
		}
	}
	path := []string{harnessDir}
	for _, d := range sourceDirs {
		path = append(path, filepath.Join(kafkaSrc, d))
	}
	main := filepath.Join(harnessDir, "org/apache/kafka/clients/consumer/StrandHarness.java")
	cmd := exec.Command("javac", "-nowarn", "-encoding", "UTF-8", "-d", out,
		"-sourcepath", strings.Join(path, string(os.PathListSeparator)), main)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kafkaassign: javac: %w\n%s", err, msg)
	}
	return nil
}

// Harness is a running JVM with Kafka's assignors.
type Harness struct {
	classes string
	timeout time.Duration
	cmd     *exec.Cmd
	in      io.WriteCloser
	lines   chan string
}

// Start starts the harness on the classes Build wrote. A group that takes
// longer than timeout fails with ErrTimeout, and the JVM is restarted.
func Start(classes string, timeout time.Duration) (*Harness, error) {
	h := &Harness{classes: classes, timeout: timeout}
	return h, h.start()
}

func (h *Harness) start() error {
	h.cmd = exec.Command("java", "-Xss16m", "-cp", h.classes, "org.apache.kafka.clients.consumer.StrandHarness")
	var err error
	if h.in, err = h.cmd.StdinPipe(); err != nil {
		return err
	}
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	h.cmd.Stderr = os.Stderr
	if err := h.cmd.Start(); err != nil {
		return fmt.Errorf("kafkaassign: starting java: %w", err)
	}
	lines := make(chan string, 64)
	h.lines = lines
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<26)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return nil
}

// Close stops the JVM.
func (h *Harness) Close() error {
	h.in.Close()
	return h.cmd.Wait()
}

func (h *Harness) restart() error {
	h.cmd.Process.Kill()
	h.cmd.Wait()
	return h.start()
}

// Assign runs Kafka's assignor of the given protocol name ("range",
// "roundrobin", "sticky", "cooperative-sticky", or "uniform" and
// "server-range" for the group coordinator's) on the group, as Strand's
// assign package takes it.
func (h *Harness) Assign(name string, members []assign.Member, topics map[string]assign.Topic) (assign.Plan, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "A\t%s\n", name)
	for _, tn := range sortedKeys(topics) {
		t := topics[tn]
		racks := "-"
		if t.Racks != nil {
			parts := make([]string, t.Partitions)
			for p := range parts {
				if p < len(t.Racks) {
					parts[p] = strings.Join(t.Racks[p], ",")
				}
			}
			racks = strings.Join(parts, ";")
		}
		msb := int64(beUint64(t.ID[:8]))
		lsb := int64(beUint64(t.ID[8:]))
		fmt.Fprintf(&b, "T\t%s\t%d\t%d\t%d\t%s\n", tn, t.Partitions, msb, lsb, racks)
	}
	for _, m := range members {
		fmt.Fprintf(&b, "M\t%s\t%s\t%s\t%d\t%s\t%s\n", m.ID, dash(m.InstanceID), dash(m.Rack), m.Generation,
			dash(strings.Join(m.Topics, ",")), dash(formatOwned(m.Owned)))
	}
	b.WriteString("E\n")
	if _, err := io.WriteString(h.in, b.String()); err != nil {
		return nil, fmt.Errorf("kafkaassign: writing to java: %w", err)
	}
	plan := assign.Plan{}
	timer := time.NewTimer(h.timeout)
	defer timer.Stop()
	for {
		select {
		case line, ok := <-h.lines:
			if !ok {
				return nil, errors.New("kafkaassign: java exited")
			}
			f := strings.Split(line, "\t")
			switch f[0] {
			case "R":
				plan[f[1]] = parseOwned(f[2])
			case "X":
				// Read up to the group's end before reporting.
				for l := range h.lines {
					if l == "E" {
						break
					}
				}
				return nil, &KafkaError{f[1]}
			case "E":
				return plan, nil
			}
		case <-timer.C:
			if err := h.restart(); err != nil {
				return nil, err
			}
			return nil, ErrTimeout
		}
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func beUint64(b []byte) uint64 {
	var x uint64
	for _, c := range b {
		x = x<<8 | uint64(c)
	}
	return x
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// formatOwned writes owned partitions as "t:0,1;u:3", topics in name order
// and partitions ascending, the order Strand's assign package assumes for a
// member's owned partitions.
func formatOwned(owned map[string][]int32) string {
	var parts []string
	for _, t := range sortedKeys(owned) {
		ps := slices.Clone(owned[t])
		slices.Sort(ps)
		ps = slices.Compact(ps)
		if len(ps) == 0 {
			continue
		}
		s := make([]string, len(ps))
		for i, p := range ps {
			s[i] = strconv.Itoa(int(p))
		}
		parts = append(parts, t+":"+strings.Join(s, ","))
	}
	return strings.Join(parts, ";")
}

func parseOwned(s string) map[string][]int32 {
	out := map[string][]int32{}
	if s == "-" || s == "" {
		return out
	}
	for _, tp := range strings.Split(s, ";") {
		t, ps, _ := strings.Cut(tp, ":")
		for _, p := range strings.Split(ps, ",") {
			n, _ := strconv.Atoi(p)
			out[t] = append(out[t], int32(n))
		}
	}
	return out
}
