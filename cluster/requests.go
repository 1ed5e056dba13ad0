package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"

	"github.com/strandlog/strand/assign"
	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
)

// A request goes by Transport.Call as its kind's byte and its fields; its
// answer as an error code and message, then answer's fields.
type requestKind uint8

const (
	kindRegister requestKind = iota + 1
	kindHeartbeat
	kindShutdown
	kindCreateTopic
	kindDeleteTopic
	kindAlterConfigs
	kindElect
	kindTxnAdd
	kindTxnMarker
	kindReassign
	kindVerifyReassignment
	kindCancelReassignment
	kindAssignment
	kindConsumerGroupHeartbeat
	kindOffsetCommit
	kindOffsetFetch
	kindFetch
	kindProduce
	kindTxnEnd
	kindAlterScram
	kindAlterACLs
)

// request is any request a node serves.
type request interface {
	kind() requestKind
	encode(e *encoder)
	decode(d *decoder)
}

// controllerRequest is a request the active controller decides: the node
// that has it runs decide on its Controller and answers once the records
// decide wrote are committed.
type controllerRequest interface {
	request
	decide(c *controller.Controller, rng *rand.Rand, a *answer) error
}

// nodeRequest is a request a node serves itself: one a transaction
// coordinator or a partition's leader answers.
type nodeRequest interface {
	request
	serve(ctx context.Context, n *Node) error
}

// dataRequest is a request a node serves itself whose answer is data with
// its own errors in it (a group coordinator's responses, a read), carried
// as the answer's Payload.
type dataRequest interface {
	request
	answer(ctx context.Context, n *Node) []byte
}

// answer is what a request's answer carries besides its error: each
// request fills the fields it has.
type answer struct {
	BrokerEpoch int64             // register
	CanStop     bool              // heartbeat
	Configs     map[string]string // alter configs: the topic's configs after
	// Payload is what a request answers that the fields above do not hold,
	// in the request's own encoding.
	Payload []byte
}

// registerRequest registers a broker incarnation (Kafka's
// BrokerRegistration).
type registerRequest struct {
	Node        replica.NodeID
	Incarnation uint64
	controller.Registration
}

func (*registerRequest) kind() requestKind { return kindRegister }
func (r *registerRequest) encode(e *encoder) {
	e.int(int64(r.Node))
	e.uint(r.Incarnation)
	e.bool(r.Clean)
	e.strings(r.Synced)
	e.partitions(r.Offline)
}
func (r *registerRequest) decode(d *decoder) {
	r.Node, r.Incarnation = replica.NodeID(d.int32()), d.uint()
	r.Clean, r.Synced, r.Offline = d.bool(), d.strings(), d.partitions()
}
func (r *registerRequest) decide(c *controller.Controller, _ *rand.Rand, a *answer) error {
	if r.Incarnation == 0 {
		return fmt.Errorf("%w: node %d registers incarnation 0", replica.ErrInvalidRequest, r.Node)
	}
	var err error
	a.BrokerEpoch, err = c.RegisterWith(r.Node, r.Incarnation, r.Registration)
	return err
}

// heartbeatRequest renews a broker's session (Kafka's BrokerHeartbeat),
// with the replicas whose logs failed.
type heartbeatRequest struct {
	Node    replica.NodeID
	Epoch   int64
	Offline []controller.TopicPartition
}

func (*heartbeatRequest) kind() requestKind { return kindHeartbeat }
func (r *heartbeatRequest) encode(e *encoder) {
	e.int(int64(r.Node))
	e.int(r.Epoch)
	e.partitions(r.Offline)
}
func (r *heartbeatRequest) decode(d *decoder) {
	r.Node, r.Epoch, r.Offline = replica.NodeID(d.int32()), d.int(), d.partitions()
}
func (r *heartbeatRequest) decide(c *controller.Controller, _ *rand.Rand, a *answer) error {
	// The offline replicas first, so that the heartbeat's unfencing
	// elects none of them.
	if err := c.ReportOffline(r.Node, r.Epoch, r.Offline); err != nil {
		return err
	}
	var err error
	a.CanStop, err = c.Heartbeat(r.Node, r.Epoch)
	return err
}

// shutdownRequest starts a broker's controlled shutdown.
type shutdownRequest struct {
	Node  replica.NodeID
	Epoch int64
}

func (*shutdownRequest) kind() requestKind { return kindShutdown }
func (r *shutdownRequest) encode(e *encoder) {
	e.int(int64(r.Node))
	e.int(r.Epoch)
}
func (r *shutdownRequest) decode(d *decoder) { r.Node, r.Epoch = replica.NodeID(d.int32()), d.int() }
func (r *shutdownRequest) decide(c *controller.Controller, _ *rand.Rand, _ *answer) error {
	return c.Shutdown(r.Node, r.Epoch)
}

// createTopicRequest creates a topic, its replicas given or placed.
type createTopicRequest struct {
	Name string
	TopicSpec
}

func (*createTopicRequest) kind() requestKind { return kindCreateTopic }
func (r *createTopicRequest) encode(e *encoder) {
	e.string(r.Name)
	e.int(int64(r.Partitions))
	e.int(int64(r.ReplicationFactor))
	e.uint(uint64(len(r.Assignment)))
	for _, replicas := range r.Assignment {
		e.nodes(replicas)
	}
	e.bool(r.Unclean)
	e.stringMap(r.Configs)
}
func (r *createTopicRequest) decode(d *decoder) {
	r.Name, r.Partitions, r.ReplicationFactor = d.string(), d.int32(), d.int32()
	for range d.count(1) {
		r.Assignment = append(r.Assignment, d.nodes())
	}
	r.Unclean, r.Configs = d.bool(), d.stringMap()
}
func (r *createTopicRequest) decide(c *controller.Controller, rng *rand.Rand, _ *answer) error {
	// Kafka draws the topic's id, and where the first partition's leader
	// goes; the controller takes the draws from its caller to stay
	// deterministic.
	spec := controller.TopicSpec{Unclean: r.Unclean, Configs: r.Configs}
	for i := range spec.ID {
		spec.ID[i] = byte(rng.Uint32())
	}
	if r.Assignment != nil {
		return c.CreateTopic(r.Name, r.Assignment, spec)
	}
	start := rng.IntN(max(len(c.State().Brokers), 1))
	return c.PlaceTopic(r.Name, int(r.Partitions), int(r.ReplicationFactor), start, spec)
}

// deleteTopicRequest deletes a topic.
type deleteTopicRequest struct{ Name string }

func (*deleteTopicRequest) kind() requestKind   { return kindDeleteTopic }
func (r *deleteTopicRequest) encode(e *encoder) { e.string(r.Name) }
func (r *deleteTopicRequest) decode(d *decoder) { r.Name = d.string() }
func (r *deleteTopicRequest) decide(c *controller.Controller, _ *rand.Rand, _ *answer) error {
	return c.DeleteTopic(r.Name)
}

// alterConfigsRequest changes a topic's configs: incrementally, or
// replacing them all (Kafka's IncrementalAlterConfigs and AlterConfigs).
type alterConfigsRequest struct {
	Topic        string
	Ops          []controller.ConfigOp
	Replace      bool
	ValidateOnly bool
}

func (*alterConfigsRequest) kind() requestKind { return kindAlterConfigs }
func (r *alterConfigsRequest) encode(e *encoder) {
	e.string(r.Topic)
	e.uint(uint64(len(r.Ops)))
	for _, op := range r.Ops {
		e.int(int64(op.Op))
		e.string(op.Name)
		e.string(op.Value)
	}
	e.bool(r.Replace)
	e.bool(r.ValidateOnly)
}
func (r *alterConfigsRequest) decode(d *decoder) {
	r.Topic = d.string()
	for range d.count(3) {
		r.Ops = append(r.Ops, controller.ConfigOp{Op: controller.ConfigOpType(d.int32()), Name: d.string(), Value: d.string()})
	}
	r.Replace, r.ValidateOnly = d.bool(), d.bool()
}
func (r *alterConfigsRequest) decide(c *controller.Controller, _ *rand.Rand, a *answer) error {
	var err error
	if r.Replace {
		configs := map[string]string{}
		for _, op := range r.Ops {
			configs[op.Name] = op.Value
		}
		err = c.ReplaceTopicConfigs(r.Topic, configs, r.ValidateOnly)
	} else {
		err = c.AlterTopicConfigs(r.Topic, r.Ops, r.ValidateOnly)
	}
	if t := c.State().Topics[r.Topic]; err == nil && t != nil {
		a.Configs = maps.Clone(t.Configs)
	}
	return err
}

// electRequest elects a partition's preferred leader, or an unclean one.
type electRequest struct {
	controller.TopicPartition
	Unclean bool
}

func (*electRequest) kind() requestKind { return kindElect }
func (r *electRequest) encode(e *encoder) {
	e.string(r.Topic)
	e.int(int64(r.Partition))
	e.bool(r.Unclean)
}
func (r *electRequest) decode(d *decoder) {
	r.Topic, r.Partition, r.Unclean = d.string(), d.int32(), d.bool()
}
func (r *electRequest) decide(c *controller.Controller, _ *rand.Rand, _ *answer) error {
	if r.Unclean {
		return c.ElectUnclean(r.TopicPartition)
	}
	return c.ElectPreferred(r.TopicPartition)
}

// reassignRequest moves partitions' replicas (kafka-reassign-partitions
// --execute).
type reassignRequest struct{ assign.Reassignment }

func (*reassignRequest) kind() requestKind   { return kindReassign }
func (r *reassignRequest) encode(e *encoder) { encodeReassignment(e, r.Reassignment) }
func (r *reassignRequest) decode(d *decoder) { r.Reassignment = decodeReassignment(d) }
func (r *reassignRequest) decide(c *controller.Controller, _ *rand.Rand, _ *answer) error {
	return c.Execute(r.Reassignment)
}

// verifyReassignmentRequest reports where each partition of a
// reassignment stands (--verify).
type verifyReassignmentRequest struct{ assign.Reassignment }

func (*verifyReassignmentRequest) kind() requestKind   { return kindVerifyReassignment }
func (r *verifyReassignmentRequest) encode(e *encoder) { encodeReassignment(e, r.Reassignment) }
func (r *verifyReassignmentRequest) decode(d *decoder) { r.Reassignment = decodeReassignment(d) }
func (r *verifyReassignmentRequest) decide(c *controller.Controller, _ *rand.Rand, a *answer) error {
	lines, err := c.VerifyAll(r.Reassignment)
	e := &encoder{}
	e.uint(uint64(len(lines)))
	for _, l := range lines {
		e.string(l.Topic)
		e.int(int64(l.Partition))
		e.int(int64(l.Status))
	}
	a.Payload = e.b
	return err
}

func decodePartitionStatuses(b []byte) ([]controller.PartitionStatus, error) {
	d := &decoder{b: b}
	var out []controller.PartitionStatus
	for range d.count(3) {
		out = append(out, controller.PartitionStatus{TopicPartition: controller.TopicPartition{Topic: d.string(), Partition: d.int32()},
			Status: controller.ReassignmentStatus(d.int32())})
	}
	return out, d.finish()
}

// cancelReassignmentRequest cancels the reassignments of partitions.
type cancelReassignmentRequest struct{ Partitions []controller.TopicPartition }

func (*cancelReassignmentRequest) kind() requestKind   { return kindCancelReassignment }
func (r *cancelReassignmentRequest) encode(e *encoder) { e.partitions(r.Partitions) }
func (r *cancelReassignmentRequest) decode(d *decoder) { r.Partitions = d.partitions() }
func (r *cancelReassignmentRequest) decide(c *controller.Controller, _ *rand.Rand, _ *answer) error {
	for _, tp := range r.Partitions {
		if err := c.CancelReassignment(tp); err != nil {
			return err
		}
	}
	return nil
}

// assignmentRequest returns the current replicas of topics, as a
// reassignment file (--generate's current assignment).
type assignmentRequest struct{ Topics []string }

func (*assignmentRequest) kind() requestKind   { return kindAssignment }
func (r *assignmentRequest) encode(e *encoder) { e.strings(r.Topics) }
func (r *assignmentRequest) decode(d *decoder) { r.Topics = d.strings() }
func (r *assignmentRequest) decide(c *controller.Controller, _ *rand.Rand, a *answer) error {
	e := &encoder{}
	encodeReassignment(e, c.Assignment(r.Topics...))
	a.Payload = e.b
	return nil
}

func encodeReassignment(e *encoder, ra assign.Reassignment) {
	e.int(int64(ra.Version))
	e.uint(uint64(len(ra.Partitions)))
	for _, p := range ra.Partitions {
		e.string(p.Topic)
		e.int(int64(p.Partition))
		e.uint(uint64(len(p.Replicas)))
		for _, r := range p.Replicas {
			e.int(int64(r))
		}
		e.strings(p.LogDirs)
	}
}

func decodeReassignment(d *decoder) assign.Reassignment {
	ra := assign.Reassignment{Version: int(d.int32())}
	for range d.count(3) {
		p := assign.PartitionReplicas{Topic: d.string(), Partition: d.int32()}
		for range d.count(1) {
			p.Replicas = append(p.Replicas, d.int32())
		}
		p.LogDirs = d.strings()
		ra.Partitions = append(ra.Partitions, p)
	}
	return ra
}

// newRequest returns an empty request of kind k, or nil.
func newRequest(k requestKind) request {
	switch k {
	case kindRegister:
		return &registerRequest{}
	case kindHeartbeat:
		return &heartbeatRequest{}
	case kindShutdown:
		return &shutdownRequest{}
	case kindCreateTopic:
		return &createTopicRequest{}
	case kindDeleteTopic:
		return &deleteTopicRequest{}
	case kindAlterConfigs:
		return &alterConfigsRequest{}
	case kindElect:
		return &electRequest{}
	case kindTxnAdd:
		return &txnAddRequest{}
	case kindTxnMarker:
		return &markerRequest{}
	case kindReassign:
		return &reassignRequest{}
	case kindVerifyReassignment:
		return &verifyReassignmentRequest{}
	case kindCancelReassignment:
		return &cancelReassignmentRequest{}
	case kindAssignment:
		return &assignmentRequest{}
	case kindConsumerGroupHeartbeat:
		return &consumerHeartbeatRequest{}
	case kindOffsetCommit:
		return &offsetCommitRequest{}
	case kindOffsetFetch:
		return &offsetFetchRequest{}
	case kindFetch:
		return &fetchRequest{}
	case kindProduce:
		return &produceRequest{}
	case kindTxnEnd:
		return &txnEndRequest{}
	case kindAlterScram:
		return &alterScramRequest{}
	case kindAlterACLs:
		return &alterACLsRequest{}
	}
	return nil
}

func encodeRequest(r request) []byte {
	e := &encoder{b: []byte{byte(r.kind())}}
	r.encode(e)
	return e.b
}

func decodeRequest(b []byte) (request, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrBadRequest)
	}
	r := newRequest(requestKind(b[0]))
	if r == nil {
		return nil, fmt.Errorf("%w: unknown kind %d", ErrBadRequest, b[0])
	}
	d := &decoder{b: b[1:]}
	r.decode(d)
	return r, d.finish()
}

// encodeAnswer is an answer's bytes: err's code and message, then a's
// fields.
func encodeAnswer(a *answer, err error) []byte {
	e := &encoder{}
	e.int(int64(replica.CodeOf(err)))
	if err != nil {
		e.string(err.Error())
	} else {
		e.string("")
	}
	e.int(a.BrokerEpoch)
	e.bool(a.CanStop)
	e.stringMap(a.Configs)
	e.bytes(a.Payload)
	return e.b
}

// decodeAnswer returns an answer and its error, a *RemoteError whose
// code's sentinel errors.Is matches.
func decodeAnswer(b []byte) (*answer, error) {
	d := &decoder{b: b}
	code, msg := kafkaerr.Code(d.int()), d.string()
	a := &answer{BrokerEpoch: d.int(), CanStop: d.bool(), Configs: d.stringMap(), Payload: d.bytes()}
	if err := d.finish(); err != nil {
		return nil, fmt.Errorf("%w (an answer)", err)
	}
	if code != kafkaerr.None {
		return a, &RemoteError{Code: code, Message: msg}
	}
	return a, nil
}

// RemoteError is an error another node answered with: its code, which it
// matches with errors.Is (every package's sentinel of that code), and its
// message there.
type RemoteError struct {
	Code    kafkaerr.Code
	Message string
}

func (e *RemoteError) Error() string { return e.Message }
func (e *RemoteError) Unwrap() error { return e.Code.Err() }

// ErrUnreachable means a call that got no answer: the node is down, cut
// off, or slower than the caller's deadline.
var ErrUnreachable = errors.New("cluster: node unreachable")
