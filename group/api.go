package group

import "time"

// RequestID names a request so that its response can be matched to it. The
// owner chooses ids; the coordinator only copies them into responses.
type RequestID uint64

// Response is the answer to one request, delivered through Ready. It is one
// of *JoinGroupResponse, *SyncGroupResponse, *HeartbeatResponse,
// *LeaveGroupResponse, *OffsetCommitResponse, *OffsetFetchResponse,
// *OffsetDeleteResponse or *DeleteGroupResponse.
type Response interface {
	Request() RequestID
}

// JoinGroup API versions whose rules differ (JoinGroupRequest.java).
const (
	// JoinVersionMemberIDRequired is the first version whose dynamic
	// members get MEMBER_ID_REQUIRED on their first join (KIP-394).
	JoinVersionMemberIDRequired = 4
	// JoinVersionSkipAssignment is the first version whose rejoining static
	// leader may be told to skip the assignment (KIP-814).
	JoinVersionSkipAssignment = 9
	// JoinVersionLatest is the version an in-process member speaks.
	JoinVersionLatest = 9
)

// OffsetCommitVersionGroupIDNotFound is the first OffsetCommit API version
// that answers a commit to a missing group GROUP_ID_NOT_FOUND rather than
// ILLEGAL_GENERATION.
const OffsetCommitVersionGroupIDNotFound = 9

// Protocol is one assignment protocol a member supports, with its metadata
// (for consumers, a ConsumerProtocolSubscription).
type Protocol struct {
	Name     string
	Metadata []byte
}

// JoinGroupRequest asks to join a classic group or to rejoin it for a new
// generation.
type JoinGroupRequest struct {
	Version         int16  // JoinGroup API version of the client
	GroupID         string // group.id
	MemberID        string // "" on a first join
	GroupInstanceID string // group.instance.id of a static member; "" if dynamic
	ClientID        string
	ClientHost      string
	SessionTimeout  time.Duration
	// RebalanceTimeout is how long the group waits for this member to
	// rejoin; zero means SessionTimeout, as for JoinGroup v0.
	RebalanceTimeout time.Duration
	ProtocolType     string     // "consumer" for consumers
	Protocols        []Protocol // in order of preference
}

// JoinGroupMember is one member as the leader sees it in JoinGroupResponse.
type JoinGroupMember struct {
	MemberID        string
	GroupInstanceID string
	Metadata        []byte // for the selected protocol
}

// JoinGroupResponse answers a JoinGroupRequest. The leader gets every member
// in Members and runs the assignor, unless SkipAssignment is set.
type JoinGroupResponse struct {
	ID             RequestID
	Err            error
	GenerationID   int32
	ProtocolType   string
	ProtocolName   string
	Leader         string
	SkipAssignment bool
	MemberID       string
	Members        []JoinGroupMember
}

// SyncGroupRequest sends the leader's assignment, or asks a follower's.
type SyncGroupRequest struct {
	GroupID         string
	GenerationID    int32
	MemberID        string
	GroupInstanceID string
	ProtocolType    string // "" to skip the check
	ProtocolName    string // "" to skip the check
	Assignments     []SyncGroupAssignment
}

// SyncGroupAssignment is the leader's assignment for one member.
type SyncGroupAssignment struct {
	MemberID   string
	Assignment []byte
}

// SyncGroupResponse answers a SyncGroupRequest with the member's assignment.
type SyncGroupResponse struct {
	ID           RequestID
	Err          error
	ProtocolType string
	ProtocolName string
	Assignment   []byte
}

// HeartbeatRequest keeps a member's session alive.
type HeartbeatRequest struct {
	GroupID         string
	GenerationID    int32
	MemberID        string
	GroupInstanceID string
}

// HeartbeatResponse answers a HeartbeatRequest; REBALANCE_IN_PROGRESS tells
// the member to rejoin.
type HeartbeatResponse struct {
	ID  RequestID
	Err error
}

// LeaveGroupRequest removes members (LeaveGroup v3+ is batched). A member
// with MemberID "" and a GroupInstanceID removes that static member, as
// kafka-consumer-groups --delete does.
type LeaveGroupRequest struct {
	GroupID string
	Members []LeaveGroupMember
}

// LeaveGroupMember is one member to remove.
type LeaveGroupMember struct {
	MemberID        string
	GroupInstanceID string
}

// LeaveGroupResponse answers a LeaveGroupRequest: Err for the whole request,
// else one result per member.
type LeaveGroupResponse struct {
	ID      RequestID
	Err     error
	Members []LeaveGroupMemberResult
}

// LeaveGroupMemberResult is the outcome of one member's leave.
type LeaveGroupMemberResult struct {
	MemberID        string
	GroupInstanceID string
	Err             error
}

// OffsetCommitRequest commits offsets for a group. GenerationID -1 with
// MemberID "" is a commit from outside group management (a "simple"
// consumer or an admin), accepted only while the group is Empty.
type OffsetCommitRequest struct {
	Version         int16 // OffsetCommit API version of the client
	GroupID         string
	GenerationID    int32
	MemberID        string
	GroupInstanceID string
	// Retention, when positive, sets the offsets' own expiry, as
	// OffsetCommit v2-v4's retentionTimeMs does; zero uses the broker's.
	Retention time.Duration
	Topics    []OffsetCommitTopic
}

// OffsetCommitTopic holds the partitions of one topic to commit.
type OffsetCommitTopic struct {
	Name       string
	Partitions []OffsetCommitPartition
}

// OffsetCommitPartition is one offset to commit. LeaderEpoch is -1 when
// unknown.
type OffsetCommitPartition struct {
	Partition   int32
	Offset      int64
	LeaderEpoch int32
	Metadata    string
}

// OffsetCommitResponse answers an OffsetCommitRequest: Err for the whole
// request, else one result per partition in request order.
type OffsetCommitResponse struct {
	ID     RequestID
	Err    error
	Topics []TopicResult
}

// OffsetDeleteRequest deletes committed offsets of topics the group does
// not consume (kafka-consumer-groups --delete-offsets).
type OffsetDeleteRequest struct {
	GroupID string
	Topics  []OffsetFetchTopic
}

// OffsetDeleteResponse answers an OffsetDeleteRequest: Err for the whole
// request, else one result per partition in request order.
type OffsetDeleteResponse struct {
	ID     RequestID
	Err    error
	Topics []TopicResult
}

// TopicResult holds the results of one topic's partitions.
type TopicResult struct {
	Name       string
	Partitions []PartitionResult
}

// PartitionResult is the outcome for one partition.
type PartitionResult struct {
	Partition int32
	Err       error
}

// OffsetFetchRequest reads committed offsets. Nil Topics reads every
// committed offset of the group. RequireStable (KIP-447) asks for offsets no
// open transaction may still change: a partition with a transactional commit
// pending gets UNSTABLE_OFFSET_COMMIT, and the client retries later.
//
// A member of a consumer group (KIP-848) may give its MemberID and
// MemberEpoch, which are checked as a commit's are (STALE_MEMBER_EPOCH);
// without a MemberID nothing is checked.
type OffsetFetchRequest struct {
	GroupID       string
	Topics        []OffsetFetchTopic
	RequireStable bool
	MemberID      string
	MemberEpoch   int32
}

// OffsetFetchTopic names the partitions of one topic to read.
type OffsetFetchTopic struct {
	Name       string
	Partitions []int32
}

// OffsetFetchResponse answers an OffsetFetchRequest. A partition without a
// committed offset has Offset -1, LeaderEpoch -1 and Metadata "".
type OffsetFetchResponse struct {
	ID     RequestID
	Err    error
	Topics []OffsetFetchTopicResult
}

// OffsetFetchTopicResult holds the committed offsets of one topic.
type OffsetFetchTopicResult struct {
	Name       string
	Partitions []FetchedOffset
}

// FetchedOffset is one committed offset.
type FetchedOffset struct {
	Partition   int32
	Offset      int64
	LeaderEpoch int32
	Metadata    string
	Err         error
}

// DeleteGroupResponse answers DeleteGroup.
type DeleteGroupResponse struct {
	ID  RequestID
	Err error
}

// Request returns the id of the request r answers.
func (r *JoinGroupResponse) Request() RequestID    { return r.ID }
func (r *SyncGroupResponse) Request() RequestID    { return r.ID }
func (r *HeartbeatResponse) Request() RequestID    { return r.ID }
func (r *LeaveGroupResponse) Request() RequestID   { return r.ID }
func (r *OffsetCommitResponse) Request() RequestID { return r.ID }
func (r *OffsetFetchResponse) Request() RequestID  { return r.ID }
func (r *OffsetDeleteResponse) Request() RequestID { return r.ID }
func (r *DeleteGroupResponse) Request() RequestID  { return r.ID }
