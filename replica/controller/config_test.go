package controller

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/replica"
)

// requireConfigError checks that err refuses the named config as
// INVALID_CONFIG, saying which.
func requireConfigError(t *testing.T, err error, name string) {
	t.Helper()
	require.ErrorIs(t, err, replica.ErrInvalidTopicConfig)
	require.Equal(t, replica.ErrInvalidTopicConfig, replica.CodeOf(err))
	var ce *ConfigError
	require.True(t, errors.As(err, &ce), "%v is a *ConfigError", err)
	require.Equal(t, name, ce.Name)
	require.Contains(t, err.Error(), name)
}

func TestCreateTopicChecksEveryConfigBeforeAnyRecord(t *testing.T) {
	for name, configs := range map[string]map[string]string{
		"no.such.config":                 {"no.such.config": "1"},
		"retention.ms":                   {"retention.ms": "-2"},
		"min.insync.replicas":            {"retention.ms": "1000", "min.insync.replicas": "0"},
		"cleanup.policy":                 {"cleanup.policy": "compact,shred"},
		"segment.bytes":                  {"segment.bytes": "3000000000"}, // an INT: beyond 32 bits
		"min.cleanable.dirty.ratio":      {"min.cleanable.dirty.ratio": "1.5"},
		"unclean.leader.election.enable": {"unclean.leader.election.enable": "yes"},
		"compression.type":               {"compression.type": "brotli"},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, 1, 1, 2, 3)
			before := len(h.store)
			err := h.c.CreateTopic("t", [][]replica.NodeID{{1, 2, 3}}, TopicSpec{Configs: configs})
			requireConfigError(t, err, name)
			h.drain()
			require.Len(t, h.store, before, "no record")
			require.Empty(t, h.c.State().Topics)
		})
	}
}

func TestCreateTopicWritesTheTopicItsConfigsThenItsPartitions(t *testing.T) {
	h := newHarness(t, 1, 1, 2, 3)
	before := len(h.store)
	id := [16]byte{7, 15: 7}
	require.NoError(t, h.c.CreateTopic("t", [][]replica.NodeID{{1, 2, 3}, {2, 3, 1}}, TopicSpec{ID: id,
		Configs: map[string]string{"retention.ms": "60000", "cleanup.policy": "compact", "min.insync.replicas": "2"}}))
	h.drain()
	var kinds []kind
	for _, r := range h.store[before:] {
		kinds = append(kinds, r.kind())
	}
	require.Equal(t, []kind{kindTopic, kindConfig, kindConfig, kindConfig, kindPartition, kindPartition}, kinds)
	topic := h.c.State().Topics["t"]
	require.Equal(t, id, topic.ID)
	require.Equal(t, map[string]string{"retention.ms": "60000", "cleanup.policy": "compact", "min.insync.replicas": "2"}, topic.Configs)
}

// TestAlterTopicConfigsAsKIP339 follows Kafka's
// ConfigurationControlManager.incrementalAlterConfigResource: SET, DELETE,
// APPEND and SUBTRACT of list configs from their value or default, a
// record only for a value that changes, nothing written on a refusal or
// for validateOnly.
func TestAlterTopicConfigsAsKIP339(t *testing.T) {
	h := newHarness(t, 1, 1, 2, 3)
	require.NoError(t, h.c.CreateTopic("t", [][]replica.NodeID{{1, 2, 3}}, TopicSpec{
		Configs: map[string]string{"retention.ms": "1000", "segment.ms": "5000"}}))
	h.drain()
	configs := func() map[string]string { return h.c.State().Topics["t"].Configs }
	alter := func(validateOnly bool, ops ...ConfigOp) (records int, err error) {
		before := len(h.store)
		err = h.c.AlterTopicConfigs("t", ops, validateOnly)
		h.drain()
		return len(h.store) - before, err
	}

	n, err := alter(false, ConfigOp{SetConfig, "retention.ms", "2000"}, ConfigOp{DeleteConfig, "segment.ms", ""},
		ConfigOp{AppendConfig, "cleanup.policy", "compact"})
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Equal(t, map[string]string{"retention.ms": "2000", "cleanup.policy": "delete,compact"}, configs(),
		"APPEND to an unset list starts from its default")

	n, err = alter(false, ConfigOp{SetConfig, "retention.ms", "2000"}, ConfigOp{AppendConfig, "cleanup.policy", "delete"})
	require.NoError(t, err)
	require.Zero(t, n, "values that do not change get no record")

	n, err = alter(false, ConfigOp{SubtractConfig, "cleanup.policy", "delete"})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, "compact", configs()["cleanup.policy"])

	for _, refused := range []struct {
		op   ConfigOp
		name string
	}{
		{ConfigOp{SubtractConfig, "cleanup.policy", "compact"}, "cleanup.policy"}, // leaves an empty list
		{ConfigOp{AppendConfig, "retention.ms", "5"}, "retention.ms"},             // not a list
		{ConfigOp{SetConfig, "max.message.bytes", "-1"}, "max.message.bytes"},
		{ConfigOp{SetConfig, "retention.byte", "1"}, "retention.byte"},
	} {
		n, err = alter(false, ConfigOp{SetConfig, "flush.ms", "9"}, refused.op)
		requireConfigError(t, err, refused.name)
		require.Zero(t, n, "%v: nothing written, the valid SET before it neither", refused.op)
	}
	n, err = alter(false, ConfigOp{SetConfig, "retention.ms", "9"}, ConfigOp{DeleteConfig, "retention.ms", ""})
	require.ErrorIs(t, err, replica.ErrInvalidRequest, "a config named twice")
	require.Zero(t, n)

	n, err = alter(true, ConfigOp{SetConfig, "retention.ms", "9"})
	require.NoError(t, err)
	require.Zero(t, n, "validateOnly writes nothing")
	_, err = alter(true, ConfigOp{SetConfig, "retention.ms", "x"})
	requireConfigError(t, err, "retention.ms")

	require.ErrorIs(t, h.c.AlterTopicConfigs("nope", nil, false), replica.ErrUnknownTopicOrPartition)
	require.Equal(t, map[string]string{"retention.ms": "2000", "cleanup.policy": "compact"}, configs())
}

// TestReplaceTopicConfigsDeletesWhatItDoesNotName: Kafka's legacy
// AlterConfigs (legacyAlterConfigResource) sets the whole set: the configs
// not named are deleted.
func TestReplaceTopicConfigsDeletesWhatItDoesNotName(t *testing.T) {
	h := newHarness(t, 1, 1, 2, 3)
	require.NoError(t, h.c.CreateTopic("t", [][]replica.NodeID{{1, 2, 3}}, TopicSpec{
		Configs: map[string]string{"retention.ms": "1000", "segment.ms": "5000"}}))
	require.NoError(t, h.c.ReplaceTopicConfigs("t", map[string]string{"segment.ms": "6000", "flush.ms": "10"}, false))
	h.drain()
	require.Equal(t, map[string]string{"segment.ms": "6000", "flush.ms": "10"}, h.c.State().Topics["t"].Configs)
	require.NoError(t, h.c.ReplaceTopicConfigs("t", nil, false))
	require.Nil(t, h.c.State().Topics["t"].Configs)
}

// TestTopicMinISRGovernsItsELR: a topic's min.insync.replicas, not the
// controller's, decides when the replicas leaving its ISR stay eligible
// (KIP-966), and a change of it applies to the partitions at once
// (Kafka's getPartitionElrUpdatesForConfigChanges).
func TestTopicMinISRGovernsItsELR(t *testing.T) {
	h := newHarness(t, 1, 1, 2, 3)
	require.NoError(t, h.c.CreateTopic("strict", [][]replica.NodeID{{1, 2, 3}}, TopicSpec{
		Configs: map[string]string{"min.insync.replicas": "3"}}))
	h.topic("loose", false, nodes(1, 2, 3))
	h.crash(3)
	require.Equal(t, nodes(1, 2), h.part("strict", 0).ISR)
	require.Equal(t, nodes(3), h.part("strict", 0).ELR, "below its min ISR 3: 3 stays eligible")
	require.Empty(t, h.part("loose", 0).ELR, "at the controller's min ISR 1: no ELR")

	require.NoError(t, h.c.AlterTopicConfigs("strict", []ConfigOp{{Op: SetConfig, Name: "min.insync.replicas", Value: "2"}}, false))
	h.drain()
	require.Empty(t, h.part("strict", 0).ELR, "at its new min ISR 2 the ELR is cleared at once")
}

// TestUncleanElectionConfig: unclean.leader.election.enable set on a
// topic elects its leaderless partitions at once, as SetUnclean does, and
// SetUnclean replaces the config.
func TestUncleanElectionConfig(t *testing.T) {
	h := newHarness(t, 2, 1, 2)
	h.topic("t", false, nodes(1, 2))
	h.crash(1)
	h.crash(2)
	h.start(1, false) // an unclean restart: 1 leaves the ELR (KIP-966)
	require.Equal(t, replica.NoNode, h.part("t", 0).Leader, "1 is neither in the ISR nor eligible")

	require.NoError(t, h.c.AlterTopicConfigs("t", []ConfigOp{{Op: SetConfig, Name: "unclean.leader.election.enable", Value: "true"}}, false))
	h.drain()
	require.Equal(t, replica.NodeID(1), h.part("t", 0).Leader, "elected uncleanly")
	require.True(t, h.part("t", 0).Recovering)

	require.NoError(t, h.c.SetUnclean("t", false))
	h.drain()
	require.Nil(t, h.c.State().Topics["t"].Configs, "SetUnclean removes the config it replaces")
	require.False(t, h.c.State().Topics["t"].unclean())
}

// TestDeleteTopic: one RemoveTopicRecord removes the topic, its partitions
// and its configs (Kafka's deleteTopic and ConfigurationControlManager
// .deleteTopicConfigs); the name can be created again with another id, and
// a RemoveTopicRecord of the old id does not remove the new topic.
func TestDeleteTopic(t *testing.T) {
	h := newHarness(t, 1, 1, 2, 3)
	old, fresh := [16]byte{1}, [16]byte{2}
	require.NoError(t, h.c.CreateTopic("t", [][]replica.NodeID{{1, 2}, {2, 3}}, TopicSpec{ID: old,
		Configs: map[string]string{"cleanup.policy": "compact"}}))
	h.topic("other", false, nodes(1))
	h.drain()
	before := len(h.store)
	require.NoError(t, h.c.DeleteTopic("t"))
	h.drain()
	require.Equal(t, []Record{&RemoveTopicRecord{Stamp: h.c.stamp(), Topic: "t", ID: old}}, h.store[before:])
	require.NotContains(t, h.c.State().Topics, "t")
	for tp := range h.c.State().Partitions {
		require.NotEqual(t, "t", tp.Topic)
	}
	require.NotNil(t, h.part("other", 0), "other topics stay")
	require.ErrorIs(t, h.c.DeleteTopic("t"), replica.ErrUnknownTopicOrPartition)

	require.NoError(t, h.c.CreateTopic("t", [][]replica.NodeID{{3}}, TopicSpec{ID: fresh}))
	h.drain()
	require.Nil(t, h.c.State().Topics["t"].Configs, "the configs went with the old topic")
	require.Equal(t, nodes(3), h.part("t", 0).Replicas)
	require.Nil(t, h.part("t", 1))

	s, err := Replay(h.store)
	require.NoError(t, err)
	err = s.Apply(&RemoveTopicRecord{Stamp: h.c.stamp(), Topic: "t", ID: old})
	require.ErrorIs(t, err, replica.ErrUnknownTopicOrPartition, "a removal of the old id")
	require.Contains(t, s.Topics, "t")
}

func TestConfigRecordOfAnUnknownTopicOrBadValueIsRefused(t *testing.T) {
	s := NewState()
	require.NoError(t, s.Apply(&ControllerRecord{Stamp: Stamp{0}}))
	require.ErrorIs(t, s.Apply(&ConfigRecord{Topic: "t", Name: "retention.ms", Value: ptr("1")}), replica.ErrUnknownTopicOrPartition)
	require.NoError(t, s.Apply(&TopicRecord{Name: "t", Partitions: 1}))
	require.ErrorIs(t, s.Apply(&ConfigRecord{Topic: "t", Name: "min.insync.replicas", Value: ptr("two")}), ErrInvalidRecord)
	require.ErrorIs(t, s.Apply(&TopicRecord{Name: "t", ID: [16]byte{9}, Partitions: 1}), ErrInvalidRecord, "another id under the name")
	require.Nil(t, s.Topics["t"].Configs)
}
