// A stand-in for Kafka's JoinGroupRequest, whose real class needs the
// generated protocol message classes: ConsumerGroupMetadata, which the
// assignor interface names, reads only these two constants.
package org.apache.kafka.common.requests;

public final class JoinGroupRequest {
    public static final int UNKNOWN_GENERATION_ID = -1;
    public static final String UNKNOWN_MEMBER_ID = "";

    private JoinGroupRequest() { }
}
