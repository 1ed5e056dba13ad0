// A stand-in for a generated message class: see NotGenerated.
package org.apache.kafka.common.message;

import org.apache.kafka.common.protocol.Readable;

public class DefaultPrincipalData extends NotGenerated {
    public static final short LOWEST_SUPPORTED_VERSION = 0;
    public static final short HIGHEST_SUPPORTED_VERSION = 0;

    public DefaultPrincipalData() { }

    public DefaultPrincipalData(Readable readable, short version) { super(readable, version); }

    public DefaultPrincipalData setType(String v) { throw unused(); }
    public DefaultPrincipalData setName(String v) { throw unused(); }
    public DefaultPrincipalData setTokenAuthenticated(boolean v) { throw unused(); }
    public String type() { throw unused(); }
    public String name() { throw unused(); }
    public boolean tokenAuthenticated() { throw unused(); }
}
