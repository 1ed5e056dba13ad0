package main

import (
	"context"
	"fmt"
	"net/rpc"
	"slices"
	"time"

	"github.com/strandlog/strand/cluster"
	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/internal/loopback"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/segment"
)

// The application's own calls, which it routes as a Kafka client does:
// to the node the metadata names leader or coordinator.

type Produce struct {
	TxnID string // empty: not transactional
	Batch []byte
}

type Txn struct {
	ID       string
	Producer idempotence.ProducerIDAndEpoch
	Commit   bool
}

const topic, groupID, txnID = "orders", "billing", "payments"

func (s *Node) Metadata(_ struct{}, md *cluster.Metadata) error {
	*md = *s.n.Metadata()
	return nil
}

func (s *Node) CreateTopic(name string, _ *struct{}) error {
	return s.n.CreateTopic(context.Background(), name, cluster.TopicSpec{Partitions: 1, ReplicationFactor: 3})
}

func (s *Node) Produce(p Produce, offset *int64) error {
	ctx := context.Background()
	var r replica.ProduceResult
	var err error
	if p.TxnID == "" {
		r, err = s.n.Produce(ctx, topic, 0, replica.AcksAll, p.Batch)
	} else {
		r, err = s.n.ProduceTransactional(ctx, p.TxnID, true, topic, 0, replica.AcksAll, p.Batch)
	}
	*offset = r.BaseOffset
	return err
}

func (s *Node) Coordinators(_ struct{}, ids *[2]replica.NodeID) error {
	*ids = [2]replica.NodeID{s.n.GroupCoordinator(groupID), s.n.TransactionCoordinator(txnID)}
	return nil
}

func (s *Node) Commit(offset int64, _ *struct{}) error {
	r, err := s.n.Groups().OffsetCommit(context.Background(), group.OffsetCommitRequest{Version: 9, GroupID: groupID, GenerationID: -1,
		Topics: []group.OffsetCommitTopic{{Name: topic, Partitions: []group.OffsetCommitPartition{{Offset: offset, LeaderEpoch: -1}}}}})
	if err == nil {
		err = cmpErr(r.Err, r.Topics[0].Partitions[0].Err)
	}
	return err
}

func (s *Node) Committed(_ struct{}, offset *int64) error {
	r, err := s.n.Groups().OffsetFetch(context.Background(), group.OffsetFetchRequest{GroupID: groupID, RequireStable: true,
		Topics: []group.OffsetFetchTopic{{Name: topic, Partitions: []int32{0}}}})
	if err == nil {
		*offset, err = r.Topics[0].Partitions[0].Offset, cmpErr(r.Err, r.Topics[0].Partitions[0].Err)
	}
	return err
}

func (s *Node) Transaction(t Txn, next *idempotence.ProducerIDAndEpoch) (err error) {
	if t.Producer == (idempotence.ProducerIDAndEpoch{}) {
		*next, err = s.n.Transactions().InitProducerID(t.ID, time.Minute)
	} else {
		*next, err = s.n.Transactions().EndTxn(t.ID, t.Producer, t.Commit)
	}
	return err
}

// ReadCommitted reads the partition up to its last stable offset, without
// the records of aborted transactions; a Read returns the batches of one
// segment at most, so it reads on from where the last one ended.
func (s *Node) ReadCommitted(_ struct{}, values *[]string) error {
	for next := int64(0); ; {
		bs, err := s.n.Read(context.Background(), topic, 0, next, 1<<20, log.ReadCommitted)
		if err != nil {
			return err
		}
		from := next
		filter := idempotence.NewAbortedFilter(bs.Aborted)
		for b, err := range bs.All() {
			info, ierr := idempotence.InfoOf(b)
			if err = cmpErr(err, ierr); err != nil {
				bs.Close()
				return err
			}
			next = b.LastOffset() + 1
			if b.Control() || filter.Skip(info) {
				continue
			}
			for rec, err := range b.Records() {
				if err != nil {
					bs.Close()
					return err
				}
				*values = append(*values, string(rec.Value))
			}
		}
		bs.Close()
		if next == from {
			return nil
		}
	}
}

func cmpErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// demo runs the three nodes and the application across a leader's kill.
func demo(dir string) error {
	addrs, err := loopback.Addrs(3)
	if err != nil {
		return err
	}
	c := &cluster3{dir: dir, peers: addrs}
	defer c.stop()
	for id := range replica.NodeID(3) {
		if err := c.start(id + 1); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// at calls method on the node pick names, again until it succeeds: a
	// node that is starting, or no longer leads, refuses.
	at := func(pick func(*cluster.Metadata) replica.NodeID, method string, args, reply any) error {
		for {
			var md cluster.Metadata
			for _, addr := range c.peers {
				if cl, err := rpc.Dial("tcp", addr); err == nil {
					err = cl.Call("Node.Metadata", struct{}{}, &md)
					cl.Close()
					if err == nil && len(md.Brokers) == 3 {
						break
					}
				}
			}
			err := fmt.Errorf("no metadata")
			if to := pick(&md); to >= 1 && to <= 3 {
				var cl *rpc.Client
				if cl, err = rpc.Dial("tcp", c.peers[to-1]); err == nil {
					err = cl.Call(method, args, reply)
					cl.Close()
					if err == nil {
						return nil
					}
				}
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s: %w (last: %v)", method, ctx.Err(), err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	killed := replica.NoNode
	anyNode := func(*cluster.Metadata) replica.NodeID { return max(1, (killed%3)+1) } // a live one
	leader := func(md *cluster.Metadata) replica.NodeID {
		if p := md.Partition(topic, 0); p != nil {
			return p.Leader
		}
		return replica.NoNode
	}
	coordinator := func(which int) func(*cluster.Metadata) replica.NodeID {
		return func(md *cluster.Metadata) replica.NodeID {
			var ids [2]replica.NodeID
			at(anyNode, "Node.Coordinators", struct{}{}, &ids)
			return ids[which]
		}
	}
	if err := at(anyNode, "Node.CreateTopic", topic, new(struct{})); err != nil {
		return err
	}
	// An idempotent producer: a retry the leader has is not appended twice.
	producer := &segment.Producer{ID: 1}
	var want []string
	produce := func(n int) error {
		for range n {
			v := fmt.Sprint("order-", len(want))
			b, err := segment.AppendBatch(nil, []segment.Record{{Value: []byte(v)}}, segment.BuildOptions{Producer: producer})
			if err != nil {
				return err
			}
			if err := at(leader, "Node.Produce", Produce{Batch: b}, new(int64)); err != nil {
				return err
			}
			producer.BaseSequence++
			want = append(want, v)
		}
		return nil
	}
	if err := produce(10); err != nil {
		return err
	}
	if err := at(coordinator(0), "Node.Commit", int64(5), new(struct{})); err != nil {
		return err
	}
	var pe idempotence.ProducerIDAndEpoch
	if err := at(coordinator(1), "Node.Transaction", Txn{ID: txnID}, &pe); err != nil {
		return err
	}
	txnBatch, err := segment.AppendBatch(nil, []segment.Record{{Value: []byte("paid")}}, segment.BuildOptions{Transactional: true,
		Producer: &segment.Producer{ID: pe.ProducerID, Epoch: pe.Epoch}})
	if err == nil {
		err = at(leader, "Node.Produce", Produce{TxnID: txnID, Batch: txnBatch}, new(int64))
	}
	if err != nil {
		return err
	}

	var md cluster.Metadata
	at(anyNode, "Node.Metadata", struct{}{}, &md)
	killed = leader(&md)
	fmt.Printf("SIGKILL node %d, the leader of %s-0, with a transaction open\n", killed, topic)
	c.kill(killed)
	if err := at(coordinator(1), "Node.Transaction", Txn{ID: txnID, Producer: pe, Commit: true}, new(idempotence.ProducerIDAndEpoch)); err != nil {
		return err
	}
	want = append(want, "paid")
	if err := produce(10); err != nil {
		return err
	}
	var committed int64
	var got []string
	if err := at(coordinator(0), "Node.Committed", struct{}{}, &committed); err != nil {
		return err
	}
	// The last stable offset passes the transaction once its marker is on
	// the new leader: the coordinator writes it again until it is.
	for deadline := time.Now().Add(30 * time.Second); len(got) < len(want) && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		got = nil
		if err := at(leader, "Node.ReadCommitted", struct{}{}, &got); err != nil {
			return err
		}
	}
	at(anyNode, "Node.Metadata", struct{}{}, &md)
	fmt.Printf("new leader node %d: %d records read committed, group %s at offset %d\n", leader(&md), len(got), groupID, committed)
	if !slices.Equal(got, want) || committed != 5 {
		return fmt.Errorf("read %q, want %q; committed offset %d, want 5", got, want, committed)
	}
	fmt.Println("every acknowledged record once, the transaction committed, the group's offset kept")
	return nil
}
