// StrandHarness runs Kafka's own assignors on groups read from stdin, for
// Strand's differential test (examples/kafkaassign). It lives in Kafka's
// consumer package to reach StickyAssignor's user data encoder.
//
// Input, one group, tab-separated lines:
//   A <range|roundrobin|sticky|cooperative-sticky|uniform|server-range>
//   T <topic> <partitions> <id msb> <id lsb> <racks: "-" or "a,b;c;..." per partition>
//   M <id> <instance or -> <rack or -> <generation> <topics "a,b" or -> <owned "t:0,1;u:3" or ->
//   E
// Output: one "R <member> <owned format or ->" line per member, or
// "X <exception>", then "E".
//
// The group is given to Kafka as its own callers build it: the consumer
// leader's HashMap of subscriptions filled in JoinGroup order
// (ConsumerCoordinator.onLeaderElected) and AbstractPartitionAssignor.assign;
// for the group coordinator, a HashMap of member specs filled in the order
// given (TargetAssignmentBuilder.build), each member's subscription the set of
// ids of the names in a HashSet<String> built from its list (TopicIds over
// ConsumerGroupMember.subscribedTopicNames), its assignment a HashMap filled
// in the order given with a HashSet<Integer> per topic (Assignment.fromRecord),
// and the subscription type from the subscribed names (ModernGroup.subscriptionType).
package org.apache.kafka.clients.consumer;

import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.GroupSubscription;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Subscription;
import org.apache.kafka.clients.consumer.internals.AbstractStickyAssignor.MemberData;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.coordinator.group.api.assignor.ConsumerGroupPartitionAssignor;
import org.apache.kafka.coordinator.group.api.assignor.GroupAssignment;
import org.apache.kafka.coordinator.group.api.assignor.GroupSpec;
import org.apache.kafka.coordinator.group.api.assignor.MemberAssignment;
import org.apache.kafka.coordinator.group.api.assignor.MemberSubscription;
import org.apache.kafka.coordinator.group.api.assignor.SubscribedTopicDescriber;
import org.apache.kafka.coordinator.group.api.assignor.SubscriptionType;
import org.apache.kafka.coordinator.group.assignor.UniformAssignor;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.AbstractSet;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;

public final class StrandHarness {
    private static final class TopicSpec {
        String name;
        int partitions;
        Uuid id;
        List<List<String>> racks = new ArrayList<>();
    }

    private static final class MemberSpec {
        String id;
        String instance;
        String rack;
        int generation;
        List<String> topics = new ArrayList<>();
        LinkedHashMap<String, List<Integer>> owned = new LinkedHashMap<>();
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        String assignor = null;
        List<TopicSpec> topics = new ArrayList<>();
        List<MemberSpec> members = new ArrayList<>();
        for (String line; (line = in.readLine()) != null; ) {
            String[] f = line.split("\t", -1);
            switch (f[0]) {
                case "A":
                    assignor = f[1];
                    topics.clear();
                    members.clear();
                    break;
                case "T":
                    topics.add(topic(f));
                    break;
                case "M":
                    members.add(member(f));
                    break;
                case "E":
                    try {
                        Map<String, Map<String, List<Integer>>> plan = assignor.equals("uniform") || assignor.equals("server-range")
                            ? server(assignor, topics, members) : client(assignor, topics, members);
                        for (MemberSpec m : members) {
                            out.println("R\t" + m.id + "\t" + format(plan.getOrDefault(m.id, Map.of())));
                        }
                    } catch (Throwable t) {
                        String where = t.getStackTrace().length > 0 ? " at " + t.getStackTrace()[0] : "";
                        out.println("X\t" + (t + where).replace('\n', ' ').replace('\t', ' '));
                    }
                    out.println("E");
                    out.flush();
                    break;
                default:
                    throw new IllegalArgumentException("bad line: " + line);
            }
        }
    }

    private static TopicSpec topic(String[] f) {
        TopicSpec t = new TopicSpec();
        t.name = f[1];
        t.partitions = Integer.parseInt(f[2]);
        t.id = new Uuid(Long.parseLong(f[3]), Long.parseLong(f[4]));
        if (!f[5].equals("-")) {
            for (String p : f[5].split(";", -1)) {
                List<String> racks = new ArrayList<>();
                if (!p.isEmpty()) {
                    Collections.addAll(racks, p.split(","));
                }
                t.racks.add(racks);
            }
        }
        return t;
    }

    private static MemberSpec member(String[] f) {
        MemberSpec m = new MemberSpec();
        m.id = f[1];
        m.instance = f[2].equals("-") ? null : f[2];
        m.rack = f[3].equals("-") ? null : f[3];
        m.generation = Integer.parseInt(f[4]);
        if (!f[5].equals("-")) {
            Collections.addAll(m.topics, f[5].split(","));
        }
        if (!f[6].equals("-")) {
            for (String tp : f[6].split(";")) {
                String[] kv = tp.split(":");
                List<Integer> ps = new ArrayList<>();
                for (String p : kv[1].split(",")) {
                    ps.add(Integer.parseInt(p));
                }
                m.owned.put(kv[0], ps);
            }
        }
        return m;
    }

    private static String format(Map<String, List<Integer>> plan) {
        StringBuilder sb = new StringBuilder();
        for (Map.Entry<String, List<Integer>> e : new TreeMap<>(plan).entrySet()) {
            List<Integer> ps = new ArrayList<>(e.getValue());
            if (ps.isEmpty()) {
                continue;
            }
            Collections.sort(ps);
            if (sb.length() > 0) {
                sb.append(';');
            }
            sb.append(e.getKey()).append(':');
            for (int i = 0; i < ps.size(); i++) {
                sb.append(i == 0 ? "" : ",").append(ps.get(i));
            }
        }
        return sb.length() == 0 ? "-" : sb.toString();
    }

    private static Map<String, Map<String, List<Integer>>> client(String name, List<TopicSpec> topics, List<MemberSpec> members) {
        ConsumerPartitionAssignor assignor;
        switch (name) {
            case "range": assignor = new RangeAssignor(); break;
            case "roundrobin": assignor = new RoundRobinAssignor(); break;
            case "sticky": assignor = new StickyAssignor(); break;
            case "cooperative-sticky": assignor = new CooperativeStickyAssignor(); break;
            default: throw new IllegalArgumentException("unknown assignor " + name);
        }
        Map<String, Node> nodes = new HashMap<>();
        List<PartitionInfo> partitions = new ArrayList<>();
        for (TopicSpec t : topics) {
            for (int p = 0; p < t.partitions; p++) {
                List<Node> replicas = new ArrayList<>();
                if (p < t.racks.size()) {
                    for (String rack : t.racks.get(p)) {
                        replicas.add(nodes.computeIfAbsent(rack, r -> new Node(nodes.size(), "broker", 9092, r)));
                    }
                }
                Node[] rs = replicas.toArray(new Node[0]);
                partitions.add(new PartitionInfo(t.name, p, rs.length > 0 ? rs[0] : null, rs, rs));
            }
        }
        Cluster cluster = new Cluster("strand", nodes.values(), partitions, Set.of(), Set.of());
        Map<String, Subscription> subscriptions = new HashMap<>();
        for (MemberSpec m : members) {
            List<TopicPartition> owned = new ArrayList<>();
            m.owned.forEach((t, ps) -> ps.forEach(p -> owned.add(new TopicPartition(t, p))));
            Optional<String> rack = Optional.ofNullable(m.rack);
            Subscription s;
            if (name.equals("sticky")) {
                // The eager assignor reads what a member owned from its user
                // data, which a consumer sends once it has had an assignment
                // (StickyAssignor.subscriptionUserData).
                ByteBuffer userData = owned.isEmpty() && m.generation < 0 ? null
                    : StickyAssignor.serializeTopicPartitionAssignment(new MemberData(owned, Optional.of(m.generation)));
                s = new Subscription(m.topics, userData, List.of(), m.generation, rack);
            } else {
                s = new Subscription(m.topics, null, owned, m.generation, rack);
            }
            if (m.instance != null) {
                s.setGroupInstanceId(Optional.of(m.instance));
            }
            subscriptions.put(m.id, s);
        }
        Map<String, Map<String, List<Integer>>> plan = new HashMap<>();
        assignor.assign(cluster, new GroupSubscription(subscriptions)).groupAssignment().forEach((id, a) -> {
            Map<String, List<Integer>> tps = new HashMap<>();
            for (TopicPartition tp : a.partitions()) {
                tps.computeIfAbsent(tp.topic(), t -> new ArrayList<>()).add(tp.partition());
            }
            plan.put(id, tps);
        });
        return plan;
    }

    /** TopicIds: the ids of the subscribed names that exist, a view over the names. */
    private static final class TopicIdSet extends AbstractSet<Uuid> {
        private final Set<String> names;
        private final Map<String, Uuid> ids;
        private final Map<Uuid, String> byId;

        TopicIdSet(Set<String> names, Map<String, Uuid> ids, Map<Uuid, String> byId) {
            this.names = names;
            this.ids = ids;
            this.byId = byId;
        }

        @Override
        public int size() {
            return names.size();
        }

        @Override
        public boolean contains(Object o) {
            String name = byId.get(o);
            return name != null && names.contains(name);
        }

        @Override
        public Iterator<Uuid> iterator() {
            Iterator<String> it = names.iterator();
            return new Iterator<>() {
                Uuid next;

                @Override
                public boolean hasNext() {
                    while (next == null && it.hasNext()) {
                        next = ids.get(it.next());
                    }
                    return next != null;
                }

                @Override
                public Uuid next() {
                    if (!hasNext()) {
                        throw new NoSuchElementException();
                    }
                    Uuid id = next;
                    next = null;
                    return id;
                }
            };
        }
    }

    private static final class ServerMember implements MemberSubscription, MemberAssignment {
        final MemberSpec spec;
        final Set<Uuid> topicIds;
        final Map<Uuid, Set<Integer>> assignment;

        ServerMember(MemberSpec spec, Set<Uuid> topicIds, Map<Uuid, Set<Integer>> assignment) {
            this.spec = spec;
            this.topicIds = topicIds;
            this.assignment = assignment;
        }

        @Override
        public Optional<String> rackId() {
            return Optional.ofNullable(spec.rack);
        }

        @Override
        public Optional<String> instanceId() {
            return Optional.ofNullable(spec.instance);
        }

        @Override
        public Set<Uuid> subscribedTopicIds() {
            return topicIds;
        }

        @Override
        public Map<Uuid, Set<Integer>> partitions() {
            return assignment;
        }
    }

    private static Map<String, Map<String, List<Integer>>> server(String name, List<TopicSpec> topics, List<MemberSpec> members) {
        ConsumerGroupPartitionAssignor assignor = name.equals("uniform")
            ? new UniformAssignor() : new org.apache.kafka.coordinator.group.assignor.RangeAssignor();
        Map<String, Uuid> ids = new HashMap<>();
        Map<Uuid, String> byId = new HashMap<>();
        Map<Uuid, TopicSpec> specs = new HashMap<>();
        for (TopicSpec t : topics) {
            ids.put(t.name, t.id);
            byId.put(t.id, t.name);
            specs.put(t.id, t);
        }
        Map<String, ServerMember> memberSpecs = new HashMap<>();
        Map<Uuid, Map<Integer, String>> inverted = new HashMap<>();
        Map<String, Integer> subscribers = new HashMap<>();
        for (MemberSpec m : members) {
            Set<String> names = new HashSet<>(m.topics);
            names.forEach(n -> subscribers.merge(n, 1, Integer::sum));
            Map<Uuid, Set<Integer>> assignment = new HashMap<>();
            m.owned.forEach((t, ps) -> {
                Uuid id = ids.get(t);
                if (id != null) {
                    assignment.put(id, new HashSet<>(ps));
                    ps.forEach(p -> inverted.computeIfAbsent(id, x -> new HashMap<>()).put(p, m.id));
                }
            });
            memberSpecs.put(m.id, new ServerMember(m, new TopicIdSet(names, ids, byId), Collections.unmodifiableMap(assignment)));
        }
        SubscriptionType type = SubscriptionType.HOMOGENEOUS;
        for (int n : subscribers.values()) {
            if (n != members.size()) {
                type = SubscriptionType.HETEROGENEOUS;
            }
        }
        final SubscriptionType subscriptionType = type;
        Map<String, ServerMember> view = Collections.unmodifiableMap(memberSpecs);
        GroupSpec spec = new GroupSpec() {
            @Override
            public Collection<String> memberIds() {
                return view.keySet();
            }

            @Override
            public SubscriptionType subscriptionType() {
                return subscriptionType;
            }

            @Override
            public boolean isPartitionAssigned(Uuid topicId, int partitionId) {
                Map<Integer, String> owners = inverted.get(topicId);
                return owners != null && owners.containsKey(partitionId);
            }

            @Override
            public boolean isPartitionAssignable(Uuid topicId, int partitionId) {
                return true;
            }

            @Override
            public MemberSubscription memberSubscription(String memberId) {
                return view.get(memberId);
            }

            @Override
            public MemberAssignment memberAssignment(String memberId) {
                ServerMember m = view.get(memberId);
                return m != null ? m : () -> Map.of();
            }
        };
        SubscribedTopicDescriber describer = new SubscribedTopicDescriber() {
            @Override
            public int numPartitions(Uuid topicId) {
                TopicSpec t = specs.get(topicId);
                return t == null ? -1 : t.partitions;
            }

            @Override
            public Set<String> racksForPartition(Uuid topicId, int partition) {
                TopicSpec t = specs.get(topicId);
                return t == null || partition >= t.racks.size() ? Set.of() : new HashSet<>(t.racks.get(partition));
            }
        };
        GroupAssignment result = assignor.assign(spec, describer);
        Map<String, Map<String, List<Integer>>> plan = new HashMap<>();
        result.members().forEach((id, a) -> {
            Map<String, List<Integer>> tps = new HashMap<>();
            a.partitions().forEach((t, ps) -> tps.put(byId.get(t), new ArrayList<>(ps)));
            plan.put(id, tps);
        });
        return plan;
    }
}
