// Harness runs Kafka's own record classes on requests read from stdin, for
// Strand's differential test (examples/kafkarecords). It calls Kafka's
// classes; it does not encode or decode anything itself beyond hex and the
// text of this protocol.
//
// Requests, tab-separated lines; bytes are hex, "-" is null, "" is empty:
//   R <batch>
//       Kafka reads the bytes as a consumer or broker would:
//       MemoryRecords.readableRecords, its one batch, ensureValid, then every
//       record through the batch's iterator, and for a control batch every
//       record's control type (and, for COMMIT and ABORT, the marker).
//   W <codec> <baseOffset> <leaderEpoch> <producerId> <producerEpoch> <baseSequence> <transactional 0|1> <logAppendTime or -1>
//   r <offset or -1> <timestamp> <key> <value> [<header key> <header value>]...
//   E
//       MemoryRecordsBuilder builds a batch of the records, as a producer's
//       accumulator does (append), or with the given offsets as compaction
//       does (appendWithOffset) when the first record has one.
//   M <COMMIT|ABORT> <coordinatorEpoch> <baseOffset> <timestamp> <leaderEpoch> <producerId> <producerEpoch>
//       MemoryRecords.withEndTransactionMarker, as a partition leader writes
//       a transaction marker.
// Answers: for R, a "B" line with the batch's header fields, an "r" line per
// record and a "c" line per control record; for W and M, "H <batch>"; then
// "E". If Kafka throws, "X <exception class> <message>" and "E".
package org.strandlog.kafkarecords;

import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.record.internal.CompressionType;
import org.apache.kafka.common.record.internal.ControlRecordType;
import org.apache.kafka.common.record.internal.DefaultRecordBatch;
import org.apache.kafka.common.record.internal.EndTransactionMarker;
import org.apache.kafka.common.record.internal.MemoryRecords;
import org.apache.kafka.common.record.internal.MemoryRecordsBuilder;
import org.apache.kafka.common.record.internal.MutableRecordBatch;
import org.apache.kafka.common.record.internal.Record;
import org.apache.kafka.common.record.internal.RecordBatch;

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.Iterator;
import java.util.List;

public final class Harness {
    private static final HexFormat HEX = HexFormat.of();

    private Harness() { }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8), 1 << 20);
        PrintWriter out = new PrintWriter(new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8), 1 << 20));
        String line;
        while ((line = in.readLine()) != null) {
            String[] f = line.split("\t", -1);
            List<String> answer = new ArrayList<>();
            try {
                switch (f[0]) {
                    case "R":
                        read(bytes(f[1]), answer);
                        break;
                    case "W":
                        List<String[]> records = new ArrayList<>();
                        String r;
                        while (!(r = in.readLine()).equals("E"))
                            records.add(r.split("\t", -1));
                        answer.add("H\t" + hex(build(f, records)));
                        break;
                    case "M":
                        answer.add("H\t" + hex(marker(f)));
                        break;
                    default:
                        throw new IllegalArgumentException("unknown request " + f[0]);
                }
            } catch (Exception | StackOverflowError | OutOfMemoryError e) {
                answer.clear();
                answer.add("X\t" + e.getClass().getName() + "\t" + oneLine(e));
            }
            for (String a : answer)
                out.println(a);
            out.println("E");
            out.flush();
        }
    }

    private static String oneLine(Throwable e) {
        StringBuilder b = new StringBuilder(String.valueOf(e.getMessage()));
        for (Throwable c = e.getCause(); c != null; c = c.getCause())
            b.append(" (caused by ").append(c.getClass().getName()).append(": ").append(c.getMessage()).append(")");
        return b.toString().replace('\t', ' ').replace('\n', ' ');
    }

    private static byte[] bytes(String s) {
        return s.equals("-") ? null : HEX.parseHex(s);
    }

    private static String hex(ByteBuffer b) {
        if (b == null)
            return "-";
        byte[] a = new byte[b.remaining()];
        b.duplicate().get(a);
        return HEX.formatHex(a);
    }

    private static String hex(byte[] b) {
        return b == null ? "-" : HEX.formatHex(b);
    }

    // read reports what Kafka reads from one batch. Everything a consumer or
    // a broker's validation would read is read before anything is answered,
    // so an exception anywhere answers only X.
    private static void read(byte[] raw, List<String> answer) {
        MemoryRecords records = MemoryRecords.readableRecords(ByteBuffer.wrap(raw));
        Iterator<MutableRecordBatch> batches = records.batches().iterator();
        if (!batches.hasNext())
            throw new IllegalStateException("no complete batch in " + raw.length + " bytes");
        MutableRecordBatch batch = batches.next();
        if (batches.hasNext())
            throw new IllegalStateException("more than one batch");
        if (batch.sizeInBytes() != raw.length)
            throw new IllegalStateException("batch of " + batch.sizeInBytes() + " bytes in " + raw.length);
        batch.ensureValid();
        CompressionType codec = batch.compressionType();
        answer.add(String.join("\t", "B",
            Long.toString(batch.baseOffset()),
            Integer.toString(batch.sizeInBytes()),
            Integer.toString(batch.partitionLeaderEpoch()),
            Byte.toString(batch.magic()),
            Long.toString(batch.checksum()),
            Integer.toString(codec.id),
            batch.timestampType() == TimestampType.LOG_APPEND_TIME ? "1" : "0",
            batch.isTransactional() ? "1" : "0",
            batch.isControlBatch() ? "1" : "0",
            batch.deleteHorizonMs().isPresent() ? Long.toString(batch.deleteHorizonMs().getAsLong()) : "-",
            Long.toString(batch.lastOffset()),
            Long.toString(((DefaultRecordBatch) batch).baseTimestamp()),
            Long.toString(batch.maxTimestamp()),
            Long.toString(batch.producerId()),
            Short.toString(batch.producerEpoch()),
            Integer.toString(batch.baseSequence()),
            String.valueOf(batch.countOrNull())));
        List<String> control = new ArrayList<>();
        for (Record r : batch) {
            StringBuilder b = new StringBuilder("r\t").append(r.offset()).append('\t').append(r.timestamp())
                .append('\t').append(hex(r.key())).append('\t').append(hex(r.value()));
            for (Header h : r.headers())
                b.append('\t').append(hex(h.key().getBytes(StandardCharsets.UTF_8))).append('\t').append(hex(h.value()));
            answer.add(b.toString());
            if (batch.isControlBatch())
                control.add(controlRecord(r));
        }
        answer.addAll(control);
    }

    // controlRecord reads a control record's type and, for an end-transaction
    // marker, the marker, as the consumer (CompletedFetch) and the broker's
    // producer state (ProducerAppendInfo) do; what Kafka refuses is reported
    // on the line, since the batch itself is readable.
    private static String controlRecord(Record r) {
        ControlRecordType type;
        try {
            type = ControlRecordType.parse(r.key());
        } catch (RuntimeException e) {
            return "c\tX\t" + e.getClass().getName();
        }
        if (type != ControlRecordType.COMMIT && type != ControlRecordType.ABORT)
            return "c\t" + type + "\t-";
        try {
            return "c\t" + type + "\t" + EndTransactionMarker.deserialize(r).coordinatorEpoch();
        } catch (RuntimeException e) {
            return "c\t" + type + "\tX " + e.getClass().getName();
        }
    }

    private static Compression compression(String name) {
        return Compression.of(CompressionType.forName(name)).build();
    }

    // build builds a batch as a producer does (MemoryRecordsBuilder, the
    // RecordAccumulator's ProducerBatch), with LogAppendTime as a broker
    // stamps it, or with the records' own offsets as the log cleaner does.
    private static ByteBuffer build(String[] f, List<String[]> records) {
        long logAppendTime = Long.parseLong(f[8]);
        TimestampType tsType = logAppendTime == RecordBatch.NO_TIMESTAMP ? TimestampType.CREATE_TIME : TimestampType.LOG_APPEND_TIME;
        ByteBuffer buffer = ByteBuffer.allocate(1024);
        MemoryRecordsBuilder builder = MemoryRecords.builder(buffer, RecordBatch.CURRENT_MAGIC_VALUE, compression(f[1]), tsType,
            Long.parseLong(f[2]), logAppendTime, Long.parseLong(f[4]), Short.parseShort(f[5]), Integer.parseInt(f[6]),
            f[7].equals("1"), Integer.parseInt(f[3]));
        for (String[] r : records) {
            long offset = Long.parseLong(r[1]);
            long ts = Long.parseLong(r[2]);
            Header[] headers = new Header[(r.length - 5) / 2];
            for (int i = 0; i < headers.length; i++)
                headers[i] = new RecordHeader(new String(HEX.parseHex(r[5 + 2 * i]), StandardCharsets.UTF_8), bytes(r[6 + 2 * i]));
            if (offset < 0)
                builder.append(ts, bytes(r[3]), bytes(r[4]), headers);
            else
                builder.appendWithOffset(offset, ts, bytes(r[3]), bytes(r[4]), headers);
        }
        return builder.build().buffer();
    }

    private static ByteBuffer marker(String[] f) {
        ControlRecordType type = ControlRecordType.valueOf(f[1]);
        EndTransactionMarker m = new EndTransactionMarker(type, Integer.parseInt(f[2]));
        return MemoryRecords.withEndTransactionMarker(Long.parseLong(f[3]), Long.parseLong(f[4]), Integer.parseInt(f[5]),
            Long.parseLong(f[6]), Short.parseShort(f[7]), m).buffer();
    }
}
