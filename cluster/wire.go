package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
)

// ErrBadRequest means bytes handed to Node.Serve or Node.Receive that do
// not decode as one of the library's messages.
var ErrBadRequest = errors.New("cluster: bad request")

// encoder appends a message's fields: integers as varints, strings and
// byte slices with their length first.
type encoder struct{ b []byte }

func (e *encoder) int(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *encoder) uint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) bool(v bool) {
	if v {
		e.uint(1)
	} else {
		e.uint(0)
	}
}
func (e *encoder) bytes(p []byte) { e.uint(uint64(len(p))); e.b = append(e.b, p...) }
func (e *encoder) string(s string) {
	e.uint(uint64(len(s)))
	e.b = append(e.b, s...)
}

func (e *encoder) strings(ss []string) {
	e.uint(uint64(len(ss)))
	for _, s := range ss {
		e.string(s)
	}
}

func (e *encoder) nodes(ns []replica.NodeID) {
	e.uint(uint64(len(ns)))
	for _, n := range ns {
		e.int(int64(n))
	}
}

func (e *encoder) stringMap(m map[string]string) {
	e.uint(uint64(len(m)))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		e.string(k)
		e.string(m[k])
	}
}

func (e *encoder) partitions(tps []controller.TopicPartition) {
	e.uint(uint64(len(tps)))
	for _, tp := range tps {
		e.string(tp.Topic)
		e.int(int64(tp.Partition))
	}
}

// decoder reads what encoder wrote; the first failure sticks, and every
// read after it returns zero values. Lengths are checked against what
// is left, so that no input allocates more than its own size.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s does not decode", ErrBadRequest, what)
	}
}

func (d *decoder) int() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("an integer")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) uint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("an integer")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) int32() int32 {
	v := d.int()
	if v != int64(int32(v)) {
		d.fail("a 32-bit integer")
		return 0
	}
	return int32(v)
}

func (d *decoder) int8() int8 {
	v := d.int()
	if v != int64(int8(v)) {
		d.fail("an 8-bit integer")
		return 0
	}
	return int8(v)
}

func (d *decoder) bool() bool {
	switch d.uint() {
	case 0:
		return false
	case 1:
		return true
	}
	d.fail("a boolean")
	return false
}

// count reads a length and checks that at least min bytes per item are
// left for that many items.
func (d *decoder) count(min int) int {
	n := d.uint()
	if d.err == nil && n > uint64(len(d.b)/min) {
		d.fail("a length")
		return 0
	}
	return int(n)
}

func (d *decoder) bytes() []byte {
	n := d.count(1)
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) string() string { return string(d.bytes()) }

func (d *decoder) strings() []string {
	var ss []string
	for range d.count(1) {
		ss = append(ss, d.string())
	}
	return ss
}

func (d *decoder) nodes() []replica.NodeID {
	var ns []replica.NodeID
	for range d.count(1) {
		ns = append(ns, replica.NodeID(d.int32()))
	}
	return ns
}

func (d *decoder) stringMap() map[string]string {
	n := d.count(2)
	if n == 0 {
		return nil
	}
	m := make(map[string]string, n)
	for range n {
		k := d.string()
		m[k] = d.string()
	}
	return m
}

func (d *decoder) partitions() []controller.TopicPartition {
	var tps []controller.TopicPartition
	for range d.count(2) {
		tps = append(tps, controller.TopicPartition{Topic: d.string(), Partition: d.int32()})
	}
	return tps
}

func (d *decoder) finish() error {
	if d.err == nil && len(d.b) > 0 {
		d.err = fmt.Errorf("%w: %d bytes past the end", ErrBadRequest, len(d.b))
	}
	return d.err
}
