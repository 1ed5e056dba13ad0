package broker

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// groupAPIs are the requests only a group's coordinator serves (Kafka's
// GroupCoordinator answers them NOT_COORDINATOR elsewhere).
var groupAPIs = map[int16]bool{
	8: true, 9: true, 11: true, 12: true, 13: true, 14: true, 15: true, 28: true, 68: true,
}

// notCoordinator answers a group request that reached a broker the
// cluster does not name coordinator (Cluster.GroupCoordinator) with
// NOT_COORDINATOR in every error code of its response, so that the client
// looks the coordinator up again, as Kafka answers; nil if this broker
// coordinates. Without it a member left on a former coordinator would
// keep a second copy of its group there.
func (b *Broker) notCoordinator(r *request) kmsg.Response {
	if _, ok := b.cluster.(ReplicatedGroups); ok {
		// Its Service refuses the groups of partitions led elsewhere.
		return nil
	}
	c := b.cluster.GroupCoordinator()
	if !groupAPIs[r.key] || c == b.cfg.NodeID {
		return nil
	}
	err := fmt.Errorf("%w: broker %d coordinates groups, this is broker %d", kerr.NotCoordinator, c, b.cfg.NodeID)
	b.logger.Info("broker: group request refused", "key", r.key, "name", kmsg.NameForKey(r.key), "client", r.clientID, "err", err)
	resp := r.body.ResponseKind()
	resp.SetVersion(r.version)
	setErrorCodes(r.body, resp, kerr.NotCoordinator.Code)
	switch req := r.body.(type) {
	case *kmsg.OffsetCommitRequest:
		resp := resp.(*kmsg.OffsetCommitResponse)
		for _, t := range req.Topics {
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rt.Partitions = append(rt.Partitions, kmsg.OffsetCommitResponseTopicPartition{Partition: p.Partition, ErrorCode: kerr.NotCoordinator.Code})
			}
			resp.Topics = append(resp.Topics, rt)
		}
	case *kmsg.OffsetFetchRequest:
		resp := resp.(*kmsg.OffsetFetchResponse)
		for _, g := range req.Groups {
			og := kmsg.NewOffsetFetchResponseGroup()
			og.Group, og.ErrorCode = g.Group, kerr.NotCoordinator.Code
			resp.Groups = append(resp.Groups, og)
		}
	case *kmsg.DescribeGroupsRequest:
		resp := resp.(*kmsg.DescribeGroupsResponse)
		for _, id := range req.Groups {
			g := kmsg.NewDescribeGroupsResponseGroup()
			g.Group, g.ErrorCode = id, kerr.NotCoordinator.Code
			resp.Groups = append(resp.Groups, g)
		}
	}
	return resp
}

// coordinator returns the broker that coordinates a group (type 0) or a
// transactional id (type 1).
func (b *Broker) coordinator(r *request, typ int8, key string) (BrokerAddr, error) {
	var coordinator BrokerAddr
	var err error
	switch typ {
	case 0: // group: the group.Service of the broker the cluster names
		id := b.cluster.GroupCoordinator()
		if rg, ok := b.cluster.(ReplicatedGroups); ok {
			id = rg.GroupCoordinatorFor(key)
		}
		var ok bool
		if coordinator, ok = b.brokerAddr(id); !ok {
			err = fmt.Errorf("%w: no live broker coordinates group %q", kerr.CoordinatorNotAvailable, key)
		}
	case 1: // transaction: the leader of the id's state partition, or the Dir's log.Transactions
		if rt, ok := b.cluster.(ReplicatedTransactions); ok {
			var ok bool
			if coordinator, ok = b.brokerAddr(rt.TransactionCoordinatorFor(key)); !ok {
				err = fmt.Errorf("%w: no live broker coordinates transactional id %q", kerr.CoordinatorNotAvailable, key)
			}
		} else if _, err = b.dirTxns(); err == nil {
			coordinator, _ = b.brokerAddr(b.cfg.NodeID)
		}
	default:
		err = fmt.Errorf("%w: coordinator type %d", kerr.InvalidRequest, typ)
	}
	if err != nil {
		b.logger.Info("broker: FindCoordinator refused", "type", typ, "key", key, "client", r.clientID, "err", err)
	}
	return coordinator, err
}
