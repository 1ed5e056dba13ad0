// A stand-in for Jackson's JsonNode so that Kafka's MessageUtil compiles
// without Jackson: the harness converts no messages to or from JSON, and
// nothing makes a JsonNode.
package com.fasterxml.jackson.databind;

import java.io.IOException;

public abstract class JsonNode {
    public abstract boolean isInt();
    public abstract boolean isLong();
    public abstract boolean isTextual();
    public abstract boolean isFloatingPointNumber();
    public abstract int asInt();
    public abstract long asLong();
    public abstract double asDouble();
    public abstract String asText();
    public abstract Object getNodeType();
    public abstract byte[] binaryValue() throws IOException;
}
