package replica_test

import (
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
)

// The adapter's side of the simulator's reassignments and leader
// rebalances (simreassign_test.go).

var _ replica.SimReassigner = (*simController)(nil)

func (sc *simController) Reassign(target []replica.NodeID) error { return sc.c.Reassign(simTP, target) }
func (sc *simController) CancelReassignment() error              { return sc.c.CancelReassignment(simTP) }
func (sc *simController) Rebalance() error                       { return sc.c.Rebalance() }

// Changes returns the partition's states that the store accepted from its
// record from on, and where the next call starts.
func (sc *simController) Changes(from int) ([]replica.SimPartitionChange, int) {
	var out []replica.SimPartitionChange
	for _, r := range sc.store.records[from:] {
		if p, ok := r.(*controller.PartitionRecord); ok && p.Topic == simTopic {
			out = append(out, replica.SimPartitionChange{
				SimPartition: replica.SimPartition{
					Leader: p.Leader, LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch,
					Replicas: p.Replicas, ISR: p.ISR, ELR: p.ELR,
				},
				Adding: p.Adding, Removing: p.Removing,
			})
		}
	}
	return out, len(sc.store.records)
}
