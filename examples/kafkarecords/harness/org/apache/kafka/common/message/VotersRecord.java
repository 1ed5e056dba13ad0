// A stand-in for a generated message class: see NotGenerated.
package org.apache.kafka.common.message;

import org.apache.kafka.common.protocol.Readable;

public class VotersRecord extends NotGenerated {
    public VotersRecord() { }

    public VotersRecord(Readable readable, short version) { super(readable, version); }
}
