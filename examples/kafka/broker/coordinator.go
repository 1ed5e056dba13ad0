package broker

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/kafkaerr"
)

// coordinator returns the broker that coordinates a group (type 0) or a
// transactional id (type 1).
func (b *Broker) coordinator(r *request, typ int8, key string) (BrokerAddr, error) {
	var coordinator BrokerAddr
	var err error
	switch typ {
	case 0: // group: the leader of the group's offsets partition
		var ok bool
		if err = b.deny(r, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeGroup, key); err != nil {
			break
		}
		if coordinator, ok = b.brokerAddr(r.session, b.cluster.GroupCoordinator(key)); !ok {
			err = fmt.Errorf("%w: no live broker coordinates group %q", kafkaerr.ErrCoordinatorNotAvailable, key)
		}
	case 1: // transaction: the leader of the id's state partition
		rt, ok := b.cluster.(ReplicatedTransactions)
		if err = b.deny(r, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTransactionalId, key); err != nil {
			break
		}
		if !ok {
			err = errNoTransactions
		} else if coordinator, ok = b.brokerAddr(r.session, rt.TransactionCoordinatorFor(key)); !ok {
			err = fmt.Errorf("%w: no live broker coordinates transactional id %q", kafkaerr.ErrCoordinatorNotAvailable, key)
		}
	default:
		err = fmt.Errorf("%w: coordinator type %d", kafkaerr.ErrInvalidRequest, typ)
	}
	if err != nil {
		b.logger.Info("broker: FindCoordinator refused", "type", typ, "key", key, "client", r.clientID, "err", err)
	}
	return coordinator, err
}
