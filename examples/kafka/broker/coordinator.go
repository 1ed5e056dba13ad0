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
