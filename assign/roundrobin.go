package assign

// RoundRobin is Kafka's client-side "roundrobin" assignor (RoundRobinAssignor):
// all partitions of all subscribed topics, by topic then partition, are dealt
// in turn to the members in MemberInfo order, skipping members not subscribed
// to a partition's topic; the turn carries over from one topic to the next.
// Results are bit-exact with Kafka's.
var RoundRobin Assignor = roundRobinAssignor{}

type roundRobinAssignor struct{}

func (roundRobinAssignor) Name() string { return "roundrobin" }

func (roundRobinAssignor) Assign(members []Member, topics map[string]Topic) (Plan, error) {
	g, err := newGroup(members, topics)
	if err != nil {
		return nil, err
	}
	b := newPlanBuilder(g)
	order := g.memberOrder()
	next := 0
	for t := range g.names {
		for p := range g.counts[t] {
			// Some member subscribes to every numbered topic, so this ends.
			for !g.subscribes(order[next], int32(t)) {
				next = (next + 1) % len(order)
			}
			b.add(order[next], int32(t), p)
			next = (next + 1) % len(order)
		}
	}
	return b.plan(true), nil
}
