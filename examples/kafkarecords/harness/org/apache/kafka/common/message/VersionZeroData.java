// VersionZeroData is the part the two generated data messages the harness
// provides (EndTxnMarker, ControlRecordTypeSchema) have in common: valid
// versions 0 only, no flexible versions.
package org.apache.kafka.common.message;

abstract class VersionZeroData extends NotGenerated {
    public static final short LOWEST_SUPPORTED_VERSION = 0;
    public static final short HIGHEST_SUPPORTED_VERSION = 0;

    @Override
    public short lowestSupportedVersion() { return LOWEST_SUPPORTED_VERSION; }

    @Override
    public short highestSupportedVersion() { return HIGHEST_SUPPORTED_VERSION; }
}
