package kafkarecords

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/segment"
)

var (
	kafkaSrc = flag.String("kafka-src", os.Getenv("KAFKA_SRC"), "a checkout of apache/kafka to compile the record classes from (default $KAFKA_SRC)")
	lz4Jar   = flag.String("lz4-jar", envOr("LZ4_JAR", "/usr/share/java/lz4-java.jar"), "lz4-java's jar, which Kafka's LZ4 codec needs (default $LZ4_JAR or Debian's liblz4-java)")
	cases    = flag.Int("cases", 300, "random batches per test")
	seed     = flag.Uint64("seed", 1, "random seed")
)

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// classes holds Kafka's record classes once compiled, for every test of the run.
var classes struct {
	once sync.Once
	dir  string
	err  error
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if classes.dir != "" {
		os.RemoveAll(classes.dir)
	}
	os.Exit(code)
}

// harness builds (once) and starts Kafka's record classes, or skips the
// test saying why it cannot.
func harness(t *testing.T) *Harness {
	t.Helper()
	if *kafkaSrc == "" {
		t.Skip("skipped: no Kafka source; set KAFKA_SRC or -kafka-src to a checkout of apache/kafka")
	}
	for _, tool := range []string{"javac", "java"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipped: %s not found: %v", tool, err)
		}
	}
	if _, err := os.Stat(*lz4Jar); err != nil {
		t.Skipf("skipped: no lz4-java jar for Kafka's LZ4 codec (apt-get install liblz4-java, or set LZ4_JAR or -lz4-jar): %v", err)
	}
	classes.once.Do(func() {
		if classes.dir, classes.err = os.MkdirTemp("", "kafkarecords"); classes.err != nil {
			return
		}
		start := time.Now()
		classes.err = Build(*kafkaSrc, "harness", *lz4Jar, classes.dir)
		t.Logf("compiled Kafka's record classes from %s in %v", *kafkaSrc, time.Since(start).Round(time.Second))
	})
	if classes.err != nil {
		t.Fatal(classes.err)
	}
	h, err := Start(classes.dir, *lz4Jar)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// codecs are the codecs Strand writes.
var codecs = []segment.Codec{segment.CodecNone, segment.CodecGzip, segment.CodecLZ4}

// fields draws keys, values and header values: null, empty, a few bytes,
// or now and then a run of 64 KiB to 300 KiB, which spans several LZ4
// blocks, up to about 1 MiB of such runs per batch.
type fields struct {
	r     *rand.Rand
	large int
}

func (f *fields) next() []byte {
	switch k := f.r.IntN(100); {
	case k < 25:
		return nil
	case k < 40:
		return []byte{}
	case k < 99 || f.large > 1<<20:
		b := make([]byte, f.r.IntN(64))
		fill(f.r, b)
		return b
	default:
		b := make([]byte, 64<<10+f.r.IntN(236<<10))
		f.large += len(b)
		fill(f.r, b)
		return b
	}
}

// fill writes random bytes, half the time from a small alphabet so that
// compression has something to find.
func fill(r *rand.Rand, b []byte) {
	alphabet := 256
	if r.IntN(2) == 0 {
		alphabet = 4
	}
	for i := range b {
		b[i] = byte(r.IntN(alphabet))
	}
}

// headerKey draws a header key: Kafka's header keys are Java Strings, so
// they are valid UTF-8, some of it beyond ASCII.
func headerKey(r *rand.Rand) string {
	runes := []rune{'a', 'b', 'z', '-', '.', 'é', 'ß', '日', '本', '🙂', 0}
	var b strings.Builder
	for range r.IntN(12) {
		b.WriteRune(runes[r.IntN(len(runes))])
	}
	return b.String()
}

// records draws records with the timestamps ts gives, and says whether a
// field is over 64 KiB.
func records(r *rand.Rand, ts func() int64) ([]segment.Record, bool) {
	n := 1 + r.IntN(40)
	if r.IntN(20) == 0 {
		n = 100 + r.IntN(400)
	}
	recs := make([]segment.Record, n)
	f := fields{r: r}
	for i := range recs {
		rec := &recs[i]
		rec.Timestamp = ts()
		rec.Key = f.next()
		rec.Value = f.next()
		for range r.IntN(4) {
			rec.Headers = append(rec.Headers, segment.Header{Key: headerKey(r), Value: f.next()})
		}
	}
	return recs, f.large > 0
}

// anyTimestamp draws a timestamp as Strand may write it: -1 (none), or one
// within 2^47 ms of the epoch either side, so that deltas between records are
// negative as often as not.
func anyTimestamp(r *rand.Rand) func() int64 {
	return func() int64 {
		if r.IntN(16) == 0 {
			return -1
		}
		return r.Int64N(1<<48) - 1<<47
	}
}

// producerTimestamp draws a timestamp a Kafka producer may write: -1, or
// at or after the epoch (MemoryRecordsBuilder refuses other negative ones),
// records of a batch near each other but not in order.
func producerTimestamp(r *rand.Rand) func() int64 {
	base := r.Int64N(1 << 45)
	return func() int64 {
		if r.IntN(16) == 0 {
			return -1
		}
		return max(0, base+r.Int64N(20000)-10000)
	}
}

// gapOffsets gives the records offsets from base on with random gaps, as
// compaction leaves them.
func gapOffsets(r *rand.Rand, recs []segment.Record, base int64) {
	next := base + r.Int64N(3)
	for i := range recs {
		recs[i].Offset = next
		next += 1 + r.Int64N(4)
	}
}

// strandBatch draws a batch as Strand writes one: a producer's (plain,
// idempotent or transactional, with every codec), a log's transaction
// marker, or compaction's rewrite with gaps in the offsets; then stamped as
// a log stamps it (base offset, leader epoch, sometimes LogAppendTime).
func strandBatch(r *rand.Rand) (raw []byte, shape string, recs []segment.Record) {
	base := []int64{0, r.Int64N(1 << 20), r.Int64N(1 << 50)}[r.IntN(3)]
	var err error
	switch r.IntN(8) {
	case 0:
		shape = "transaction marker"
		m := idempotence.Marker{Type: idempotence.MarkerAbort, CoordinatorEpoch: randInt32(r)}
		if r.IntN(2) == 0 {
			m.Type = idempotence.MarkerCommit
		}
		raw, err = idempotence.AppendMarkerBatch(nil, r.Int64N(1<<40), int16(r.IntN(math.MaxInt16+1)), m, anyTimestamp(r)())
		if err != nil {
			panic(err)
		}
		segment.Batch(raw).SetBaseOffset(base)
		segment.Batch(raw).SetPartitionLeaderEpoch(r.Int32N(1000))
		b, _, _ := segment.ParseBatch(raw)
		for rec := range b.Records() {
			recs = append(recs, rec)
		}
		return raw, shape, recs
	default:
		opts := segment.BuildOptions{BaseOffset: base, Codec: codecs[r.IntN(len(codecs))]}
		shape = "plain"
		switch r.IntN(3) {
		case 1:
			shape = "idempotent"
			opts.Producer = randProducer(r)
		case 2:
			shape = "transactional"
			opts.Producer = randProducer(r)
			opts.Transactional = true
		}
		var large bool
		recs, large = records(r, anyTimestamp(r))
		if large {
			shape += ", a field over 64 KiB"
		}
		if r.IntN(4) == 0 {
			shape += ", offsets with gaps"
			opts.KeepOffsets = true
			gapOffsets(r, recs, base)
		}
		shape += ", " + opts.Codec.String()
		if raw, err = segment.AppendBatch(nil, recs, opts); err != nil {
			panic(err)
		}
	}
	b := segment.Batch(raw)
	if r.IntN(2) == 0 {
		b.SetPartitionLeaderEpoch(r.Int32N(1 << 20))
	}
	if r.IntN(6) == 0 {
		shape += ", LogAppendTime"
		b.SetLogAppendTime(r.Int64N(1 << 45))
	}
	return raw, shape, recs
}

func randInt32(r *rand.Rand) int32 { return int32(r.Uint32()) }

func randProducer(r *rand.Rand) *segment.ProducerFields {
	p := &segment.ProducerFields{ID: r.Int64N(1 << 50), Epoch: int16(r.IntN(math.MaxInt16 + 1)), BaseSequence: r.Int32N(1000)}
	if r.IntN(4) == 0 {
		// Near the wrap of sequence numbers past MaxInt32 to 0.
		p.BaseSequence = math.MaxInt32 - r.Int32N(50)
	}
	return p
}

// kinds counts outcomes by kind and prints them in order of first sight.
type kinds struct {
	order []string
	count map[string]int
	first map[string]string
}

func (k *kinds) add(kind, example string) {
	if k.count == nil {
		k.count, k.first = map[string]int{}, map[string]string{}
	}
	if k.count[kind]++; k.count[kind] == 1 {
		k.order = append(k.order, kind)
		k.first[kind] = example
	}
}

func (k *kinds) print(t *testing.T, title string) {
	if len(k.order) == 0 {
		return
	}
	fmt.Printf("%s:\n", title)
	for _, kind := range k.order {
		fmt.Printf("    %5d  %s\n", k.count[kind], kind)
		if k.first[kind] != "" {
			t.Logf("%s, first: %s", kind, k.first[kind])
		}
	}
}

// addTags counts each of a shape's comma-separated tags.
func (k *kinds) addTags(shape string) {
	for _, tag := range strings.Split(shape, ", ") {
		k.add(tag, "")
	}
}

// diff lists where Kafka's view of a batch differs from Strand's. A header
// key that is not valid UTF-8 is not compared: Kafka's Header.key() is a
// Java String, which replaces such bytes, while Strand keeps them; notes
// says when that happened.
func diff(kafka, strand *View) (diffs []string, notes []string) {
	if kafka.Fields != strand.Fields {
		diffs = append(diffs, fmt.Sprintf("header: Kafka %+v, Strand %+v", kafka.Fields, strand.Fields))
	}
	if len(kafka.Records) != len(strand.Records) {
		return append(diffs, fmt.Sprintf("Kafka read %d records, Strand %d", len(kafka.Records), len(strand.Records))), notes
	}
	for i, kr := range kafka.Records {
		sr := strand.Records[i]
		if kr.Offset != sr.Offset || kr.Timestamp != sr.Timestamp {
			diffs = append(diffs, fmt.Sprintf("record %d: Kafka offset %d timestamp %d, Strand %d %d", i, kr.Offset, kr.Timestamp, sr.Offset, sr.Timestamp))
		}
		if !sameBytes(kr.Key, sr.Key) || !sameBytes(kr.Value, sr.Value) {
			diffs = append(diffs, fmt.Sprintf("record %d: key or value differ: Kafka %s/%s, Strand %s/%s", i,
				short(kr.Key), short(kr.Value), short(sr.Key), short(sr.Value)))
		}
		if len(kr.Headers) != len(sr.Headers) {
			diffs = append(diffs, fmt.Sprintf("record %d: Kafka %d headers, Strand %d", i, len(kr.Headers), len(sr.Headers)))
			continue
		}
		for j, kh := range kr.Headers {
			shd := sr.Headers[j]
			if !utf8.ValidString(shd.Key) {
				notes = append(notes, "header key not valid UTF-8 (Kafka's String replaces the bytes, Strand keeps them)")
			} else if kh.Key != shd.Key {
				diffs = append(diffs, fmt.Sprintf("record %d header %d: key Kafka %q, Strand %q", i, j, kh.Key, shd.Key))
			}
			if !sameBytes(kh.Value, shd.Value) {
				diffs = append(diffs, fmt.Sprintf("record %d header %d: value Kafka %s, Strand %s", i, j, short(kh.Value), short(shd.Value)))
			}
		}
	}
	for i := range strand.Markers {
		if strings.HasPrefix(strand.Markers[i], "refused: ") {
			notes = append(notes, "control record Strand's ParseMarker refuses, Kafka reads as "+kafka.Markers[i])
		} else if i >= len(kafka.Markers) || kafka.Markers[i] != strand.Markers[i] {
			diffs = append(diffs, fmt.Sprintf("control record %d: Kafka %q, Strand %q", i, kafka.Markers, strand.Markers[i]))
		}
	}
	return diffs, notes
}

// sameBytes compares two keys, values or header values, null apart from
// empty.
func sameBytes(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

// dump shows a batch in hex, cut after 4 KiB.
func dump(b []byte) string {
	if len(b) > 4<<10 {
		return fmt.Sprintf("%x... (%d bytes)", b[:4<<10], len(b))
	}
	return fmt.Sprintf("%x", b)
}

func short(b []byte) string {
	if b == nil {
		return "null"
	}
	if len(b) > 16 {
		return fmt.Sprintf("%x...(%d bytes)", b[:16], len(b))
	}
	return fmt.Sprintf("%q", b)
}

// wantRecords checks that Strand reads back the records it was asked to
// write, at the offsets and with the timestamps the batch gives them.
func wantRecords(t *testing.T, i int, v *View, recs []segment.Record, keepOffsets bool) {
	t.Helper()
	if len(v.Records) != len(recs) {
		t.Fatalf("case %d: wrote %d records, read %d", i, len(recs), len(v.Records))
	}
	for j, got := range v.Records {
		want := recs[j]
		want.Offset = v.BaseOffset + int64(j)
		if keepOffsets {
			want.Offset = recs[j].Offset
		}
		if v.LogAppendTime {
			want.Timestamp = v.MaxTimestamp
		}
		if d, _ := diff(&View{Records: []segment.Record{want}}, &View{Records: []segment.Record{got}}); len(d) > 0 {
			t.Fatalf("case %d: record %d written is not read back: %v", i, j, d)
		}
	}
}

// TestStrandWritesKafkaReads builds random batches with Strand's package
// segment, as a producer, a log's transaction coordinator and its cleaner
// write them, and has Kafka read each: Kafka must accept it (ensureValid,
// every record) and read the same header fields, records and markers.
func TestStrandWritesKafkaReads(t *testing.T) {
	h := harness(t)
	r := rand.New(rand.NewPCG(*seed, 1))
	var shapes kinds
	for i := range *cases {
		raw, shape, recs := strandBatch(r)
		shapes.addTags(shape)
		sv, err := StrandView(raw)
		if err != nil {
			t.Fatalf("case %d (%s): Strand refuses its own batch: %v", i, shape, err)
		}
		wantRecords(t, i, sv, recs, strings.Contains(shape, "gaps"))
		kv, err := h.Read(raw)
		if err != nil {
			t.Fatalf("case %d (%s): Kafka refuses Strand's batch: %v\n%s", i, shape, err, dump(raw))
		}
		if d, notes := diff(kv, sv); len(d) > 0 || len(notes) > 0 {
			t.Fatalf("case %d (%s): Kafka reads Strand's batch differently: %v %v", i, shape, d, notes)
		}
	}
	fmt.Printf("Strand writes, Kafka reads: %d batches, all equal\n", *cases)
	shapes.print(t, "  batches by kind (a batch counts under each of its kinds)")
}

// kafkaSpec draws a batch as Kafka's MemoryRecordsBuilder builds one for a
// producer (plain, idempotent, transactional), a broker (LogAppendTime) or
// the log cleaner (offsets with gaps).
func kafkaSpec(r *rand.Rand) (BuildSpec, string) {
	s := BuildSpec{
		Codec:                codecs[r.IntN(len(codecs))],
		BaseOffset:           []int64{0, r.Int64N(1 << 20), r.Int64N(1 << 50)}[r.IntN(3)],
		PartitionLeaderEpoch: -1,
		Producer:             segment.ProducerFields{ID: -1, Epoch: -1, BaseSequence: -1},
		LogAppendTime:        -1,
	}
	shape := "plain"
	switch r.IntN(3) {
	case 1:
		shape = "idempotent"
		s.Producer = *randProducer(r)
	case 2:
		shape = "transactional"
		s.Producer = *randProducer(r)
		s.Transactional = true
	}
	if r.IntN(2) == 0 {
		s.PartitionLeaderEpoch = r.Int32N(1 << 20)
	}
	var large bool
	s.Records, large = records(r, producerTimestamp(r))
	if large {
		shape += ", a field over 64 KiB"
	}
	if r.IntN(4) == 0 {
		shape += ", offsets with gaps"
		s.KeepOffsets = true
		gapOffsets(r, s.Records, s.BaseOffset)
	}
	if r.IntN(6) == 0 {
		shape += ", LogAppendTime"
		s.LogAppendTime = r.Int64N(1 << 45)
	}
	return s, shape + ", " + s.Codec.String()
}

// strandBuild builds with Strand what spec asks Kafka to build.
func strandBuild(s BuildSpec) ([]byte, error) {
	opts := segment.BuildOptions{BaseOffset: s.BaseOffset, Codec: s.Codec, Transactional: s.Transactional, KeepOffsets: s.KeepOffsets}
	if s.Producer.ID >= 0 {
		p := s.Producer
		opts.Producer = &p
	}
	raw, err := segment.AppendBatch(nil, s.Records, opts)
	if err != nil {
		return nil, err
	}
	segment.Batch(raw).SetPartitionLeaderEpoch(s.PartitionLeaderEpoch)
	if s.LogAppendTime >= 0 {
		segment.Batch(raw).SetLogAppendTime(s.LogAppendTime)
	}
	return raw, nil
}

// TestKafkaWritesStrandReads has Kafka's MemoryRecordsBuilder build random
// batches and Strand read them: Strand must accept each and read what Kafka
// reads and what was written. Uncompressed, Strand's own build of the same
// records must be the same bytes.
func TestKafkaWritesStrandReads(t *testing.T) {
	h := harness(t)
	r := rand.New(rand.NewPCG(*seed, 2))
	var shapes kinds
	identical, compressed := 0, 0
	for i := range *cases {
		spec, shape := kafkaSpec(r)
		shapes.addTags(shape)
		raw, err := h.Build(spec)
		if err != nil {
			t.Fatalf("case %d (%s): Kafka cannot build: %v", i, shape, err)
		}
		sv, err := StrandView(raw)
		if err != nil {
			t.Fatalf("case %d (%s): Strand refuses Kafka's batch: %v\n%s", i, shape, err, dump(raw))
		}
		wantRecords(t, i, sv, spec.Records, spec.KeepOffsets)
		kv, err := h.Read(raw)
		if err != nil {
			t.Fatalf("case %d (%s): Kafka refuses its own batch: %v", i, shape, err)
		}
		if d, notes := diff(kv, sv); len(d) > 0 || len(notes) > 0 {
			t.Fatalf("case %d (%s): Strand reads Kafka's batch differently: %v %v", i, shape, d, notes)
		}
		if spec.Codec != segment.CodecNone {
			compressed++
			continue
		}
		ours, err := strandBuild(spec)
		if err != nil {
			t.Fatalf("case %d (%s): Strand cannot build what Kafka built: %v", i, shape, err)
		}
		if !bytes.Equal(ours, raw) {
			t.Fatalf("case %d (%s): Strand's batch differs from Kafka's:\nKafka  %s\nStrand %s", i, shape, dump(raw), dump(ours))
		}
		identical++
	}
	fmt.Printf("Kafka writes, Strand reads: %d batches, all equal; uncompressed %d, byte for byte as Strand builds them; compressed %d\n",
		*cases, identical, compressed)
	shapes.print(t, "  batches by kind (a batch counts under each of its kinds)")
}

// TestTransactionMarkers checks Strand's transaction markers against
// Kafka's: the batch idempotence.AppendMarkerBatch writes (what a log's
// transaction coordinator has each partition append) is byte for byte
// MemoryRecords.withEndTransactionMarker's, Kafka reads its type and
// coordinator epoch, and Strand reads Kafka's.
func TestTransactionMarkers(t *testing.T) {
	h := harness(t)
	r := rand.New(rand.NewPCG(*seed, 3))
	for i := range *cases {
		commit := r.IntN(2) == 0
		m := idempotence.Marker{Type: idempotence.MarkerAbort, CoordinatorEpoch: randInt32(r)}
		if commit {
			m.Type = idempotence.MarkerCommit
		}
		pid, epoch := r.Int64N(1<<50), int16(r.IntN(math.MaxInt16+1))
		ts, base, leaderEpoch := producerTimestamp(r)(), r.Int64N(1<<50), r.Int32N(1<<20)-1
		theirs, err := h.Marker(commit, m.CoordinatorEpoch, base, ts, leaderEpoch, pid, epoch)
		if err != nil {
			t.Fatalf("case %d: Kafka cannot write %v: %v", i, m, err)
		}
		ours, err := idempotence.AppendMarkerBatch(nil, pid, epoch, m, ts)
		if err != nil {
			t.Fatal(err)
		}
		segment.Batch(ours).SetBaseOffset(base)
		segment.Batch(ours).SetPartitionLeaderEpoch(leaderEpoch)
		if !bytes.Equal(ours, theirs) {
			t.Fatalf("case %d: %v marker differs:\nKafka  %x\nStrand %x", i, m, theirs, ours)
		}
		want := fmt.Sprintf("%v %d", m.Type, m.CoordinatorEpoch)
		kv, err := h.Read(ours)
		if err != nil {
			t.Fatalf("case %d: Kafka refuses Strand's marker: %v", i, err)
		}
		sv, err := StrandView(theirs)
		if err != nil {
			t.Fatalf("case %d: Strand refuses Kafka's marker: %v", i, err)
		}
		if !slices.Equal(kv.Markers, []string{want}) || !slices.Equal(sv.Markers, []string{want}) {
			t.Fatalf("case %d: wrote %s; Kafka reads %q, Strand %q", i, want, kv.Markers, sv.Markers)
		}
	}
	fmt.Printf("transaction markers: %d, Strand's and Kafka's byte for byte equal, each read by the other\n", *cases)
}
