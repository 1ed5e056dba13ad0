package controller

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/strandlog/strand/replica"
)

// Topic configs are Kafka's, by name and value as Kafka's admin clients
// send them, kept as KRaft's controller keeps them
// (ConfigurationControlManager): one ConfigRecord per config set, none
// for a default. The controller checks every value against its type and
// range before it writes a record (Kafka's LogConfig definitions), and
// reads two itself: min.insync.replicas, the ISR size below which the
// replicas leaving the ISR stay eligible leaders (KIP-966's ELR), and
// unclean.leader.election.enable. The others are the brokers' to apply
// to their logs.

// The configs the controller reads itself.
const (
	minISRConfig  = "min.insync.replicas"
	uncleanConfig = "unclean.leader.election.enable"
)

type configType uint8

const (
	typeLong configType = iota
	typeInt
	typeDouble
	typeBool
	typeList
	typeString
)

// configDef is one of Kafka's topic configs (its ConfigDef entry): its
// type, the lowest (and for a double the highest) number it takes, the
// values a list's items or a string may take, and a list's default, which
// APPEND and SUBTRACT start from when it is not set.
type configDef struct {
	typ      configType
	min, max float64
	valid    []string
	dflt     string
}

// topicConfigDefs are the topic configs known to the controller, with the
// ranges of Kafka's LogConfig (segment.bytes at Kafka's former minimum,
// one legacy record's overhead, as the Kafka example's broker takes it).
var topicConfigDefs = map[string]configDef{
	"cleanup.policy":            {typ: typeList, valid: []string{"compact", "delete"}, dflt: "delete"},
	"compression.type":          {typ: typeString, valid: []string{"uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"}},
	"delete.retention.ms":       {typ: typeLong, min: 0},
	"flush.messages":            {typ: typeLong, min: 1},
	"flush.ms":                  {typ: typeLong, min: 0},
	"max.compaction.lag.ms":     {typ: typeLong, min: 1},
	"max.message.bytes":         {typ: typeInt, min: 0},
	"min.cleanable.dirty.ratio": {typ: typeDouble, min: 0, max: 1},
	"min.compaction.lag.ms":     {typ: typeLong, min: 0},
	minISRConfig:                {typ: typeInt, min: 1},
	"retention.bytes":           {typ: typeLong, min: math.MinInt64},
	"retention.ms":              {typ: typeLong, min: -1},
	"segment.bytes":             {typ: typeInt, min: 14},
	"segment.ms":                {typ: typeLong, min: 1},
	uncleanConfig:               {typ: typeBool},
}

// ConfigError is a topic config the controller refuses: a name it does
// not know, a value its type or range does not allow, or an operation
// its type does not take. It wraps replica.ErrInvalidTopicConfig (Kafka's
// INVALID_CONFIG).
type ConfigError struct {
	Topic, Name, Value string
	// Reason says what is wrong.
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("controller: topic %q config %s=%q: %s", e.Topic, e.Name, e.Value, e.Reason)
}

// Unwrap returns replica.ErrInvalidTopicConfig.
func (e *ConfigError) Unwrap() error { return replica.ErrInvalidTopicConfig }

// validConfig checks a config's value against its definition.
func validConfig(topic, name, value string) error {
	def, ok := topicConfigDefs[name]
	fail := func(format string, args ...any) error {
		return &ConfigError{Topic: topic, Name: name, Value: value, Reason: fmt.Sprintf(format, args...)}
	}
	if !ok {
		return fail("unknown topic config")
	}
	var n float64
	switch def.typ {
	case typeLong, typeInt:
		bits := 64
		if def.typ == typeInt {
			bits = 32
		}
		i, err := strconv.ParseInt(value, 10, bits)
		if err != nil {
			return fail("want a %d-bit integer", bits)
		}
		n = float64(i)
	case typeDouble:
		f, err := strconv.ParseFloat(value, 64)
		if err != nil || math.IsNaN(f) {
			return fail("want a number")
		}
		n = f
	case typeBool:
		if !strings.EqualFold(value, "true") && !strings.EqualFold(value, "false") {
			return fail("want true or false")
		}
		return nil
	case typeString:
		if !slices.Contains(def.valid, value) {
			return fail("want one of %s", strings.Join(def.valid, ", "))
		}
		return nil
	case typeList:
		items := listItems(value)
		if len(items) == 0 {
			return fail("want a list of %s", strings.Join(def.valid, ", "))
		}
		for _, item := range items {
			if !slices.Contains(def.valid, item) {
				return fail("%q is not one of %s", item, strings.Join(def.valid, ", "))
			}
		}
		return nil
	}
	if n < def.min || (def.typ == typeDouble && n > def.max) {
		if def.typ == typeDouble {
			return fail("want %v to %v", def.min, def.max)
		}
		return fail("want at least %v", def.min)
	}
	return nil
}

// CheckTopicConfigs checks configs as CreateTopic checks them, in name
// order, without a controller: the first refused is a *ConfigError.
func CheckTopicConfigs(topic string, configs map[string]string) error {
	for _, n := range slices.Sorted(maps.Keys(configs)) {
		if err := validConfig(topic, n, configs[n]); err != nil {
			return err
		}
	}
	return nil
}

// listItems splits a list config's value, without empty items.
func listItems(v string) []string {
	var items []string
	for item := range strings.SplitSeq(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			items = append(items, item)
		}
	}
	return items
}

// ConfigOpType is what a ConfigOp does (KIP-339's operations, in Kafka's
// numbering).
type ConfigOpType int8

const (
	// SetConfig sets the config to Value.
	SetConfig ConfigOpType = iota
	// DeleteConfig removes the config: it takes its default again.
	DeleteConfig
	// AppendConfig adds Value's items that a list config lacks, to its
	// value or, if unset, its default.
	AppendConfig
	// SubtractConfig removes Value's items from a list config.
	SubtractConfig
)

func (t ConfigOpType) String() string {
	switch t {
	case SetConfig:
		return "SET"
	case DeleteConfig:
		return "DELETE"
	case AppendConfig:
		return "APPEND"
	case SubtractConfig:
		return "SUBTRACT"
	}
	return fmt.Sprintf("ConfigOpType(%d)", int8(t))
}

// ConfigOp is one change of a topic's config (an IncrementalAlterConfigs
// entry).
type ConfigOp struct {
	Op    ConfigOpType
	Name  string
	Value string
}

// TopicSpec is what a topic is created with besides its replicas.
type TopicSpec struct {
	// ID is the topic's id (KIP-516). The caller draws it at random, as
	// Kafka's controller does, to keep the controller deterministic.
	ID [16]byte
	// Unclean enables unclean leader election for the topic.
	Unclean bool
	// Configs are the topic's configs by Kafka's names; each is checked
	// before any record is written.
	Configs map[string]string
}

// AlterTopicConfigs changes a topic's configs as Kafka's
// IncrementalAlterConfigs does (ConfigurationControlManager
// .incrementalAlterConfigResource): the operations apply in order, APPEND
// and SUBTRACT only to a list config (INVALID_CONFIG otherwise), and the
// configs they leave are checked before any record is written; a config
// whose value does not change gets no record. A config named twice is an
// invalid request, as Kafka's broker answers it. With validateOnly
// nothing is written.
//
// A change of min.insync.replicas or unclean.leader.election.enable takes
// effect on the topic's partitions at once: each gets the ELR its ISR
// now calls for (Kafka's getPartitionElrUpdatesForConfigChanges), and a
// partition without a leader elects one if it now may.
func (c *Controller) AlterTopicConfigs(name string, ops []ConfigOp, validateOnly bool) error {
	t := c.s.Topics[name]
	if t == nil {
		return fmt.Errorf("%w: topic %q", replica.ErrUnknownTopicOrPartition, name)
	}
	next := maps.Clone(t.Configs)
	if next == nil {
		next = map[string]string{}
	}
	seen := map[string]bool{}
	for _, op := range ops {
		if seen[op.Name] {
			return fmt.Errorf("%w: topic %q: config %s altered twice in one request", replica.ErrInvalidRequest, name, op.Name)
		}
		seen[op.Name] = true
		def, known := topicConfigDefs[op.Name]
		if !known {
			return validConfig(name, op.Name, op.Value)
		}
		switch op.Op {
		case SetConfig:
			next[op.Name] = op.Value
		case DeleteConfig:
			delete(next, op.Name)
		case AppendConfig, SubtractConfig:
			if def.typ != typeList {
				return &ConfigError{Topic: name, Name: op.Name, Value: op.Value, Reason: fmt.Sprintf("%v takes a list config only", op.Op)}
			}
			cur, ok := next[op.Name]
			if !ok {
				cur = def.dflt
			}
			items := listItems(cur)
			for _, item := range listItems(op.Value) {
				if op.Op == AppendConfig && !slices.Contains(items, item) {
					items = append(items, item)
				} else if op.Op == SubtractConfig {
					items = slices.DeleteFunc(items, func(s string) bool { return s == item })
				}
			}
			next[op.Name] = strings.Join(items, ",")
		default:
			return fmt.Errorf("%w: topic %q: config operation %v", replica.ErrInvalidRequest, name, op.Op)
		}
	}
	if err := CheckTopicConfigs(name, next); err != nil {
		return err
	}
	if validateOnly {
		return nil
	}
	return c.setConfigs(t, next)
}

// ReplaceTopicConfigs makes configs the topic's whole set (Kafka's legacy
// AlterConfigs): the configs it does not name take their defaults again.
func (c *Controller) ReplaceTopicConfigs(name string, configs map[string]string, validateOnly bool) error {
	t := c.s.Topics[name]
	if t == nil {
		return fmt.Errorf("%w: topic %q", replica.ErrUnknownTopicOrPartition, name)
	}
	var ops []ConfigOp
	for _, n := range slices.Sorted(maps.Keys(t.Configs)) {
		if _, kept := configs[n]; !kept {
			ops = append(ops, ConfigOp{Op: DeleteConfig, Name: n})
		}
	}
	for _, n := range slices.Sorted(maps.Keys(configs)) {
		ops = append(ops, ConfigOp{Op: SetConfig, Name: n, Value: configs[n]})
	}
	return c.AlterTopicConfigs(name, ops, validateOnly)
}

// setConfigs writes a ConfigRecord for each config that next changes, in
// name order, and applies the ISR rules the change makes.
func (c *Controller) setConfigs(t *Topic, next map[string]string) error {
	minISR, unclean := c.minISR(t.Name), t.unclean()
	for _, n := range slices.Sorted(maps.Keys(t.Configs)) {
		if _, kept := next[n]; !kept {
			if err := c.emit(&ConfigRecord{Stamp: c.stamp(), Topic: t.Name, Name: n}); err != nil {
				return err
			}
		}
	}
	for _, n := range slices.Sorted(maps.Keys(next)) {
		if cur, ok := t.Configs[n]; ok && cur == next[n] {
			continue
		}
		v := next[n]
		if err := c.emit(&ConfigRecord{Stamp: c.stamp(), Topic: t.Name, Name: n, Value: &v}); err != nil {
			return err
		}
	}
	if c.minISR(t.Name) == minISR && t.unclean() == unclean {
		return nil
	}
	return c.reconsider(t.Name)
}

// reconsider recomputes the ISR rules of a topic's partitions: the ELR
// its minimum ISR calls for, a leader for those without where one may be
// elected.
func (c *Controller) reconsider(name string) error {
	for _, tp := range c.partitions(func(*Partition) bool { return true }) {
		if tp.Topic == name {
			if err := c.change(tp, change{isr: c.s.Partitions[tp].ISR}); err != nil {
				return err
			}
		}
	}
	return nil
}

// minISR is the topic's min.insync.replicas, or the controller's.
func (c *Controller) minISR(topic string) int {
	if t := c.s.Topics[topic]; t != nil {
		if v, ok := t.Configs[minISRConfig]; ok {
			if n, err := strconv.Atoi(v); err == nil {
				return n
			}
		}
	}
	return c.cfg.MinInsyncReplicas
}

// unclean says whether the topic allows unclean leader election: its
// unclean.leader.election.enable if set, else what it was created or
// last SetUnclean with.
func (t *Topic) unclean() bool {
	if v, ok := t.Configs[uncleanConfig]; ok {
		return strings.EqualFold(v, "true")
	}
	return t.Unclean
}

// DeleteTopic deletes a topic, its partitions and its configs with one
// RemoveTopicRecord (Kafka's ReplicationControlManager.deleteTopic); an
// unknown topic is ErrUnknownPartition. The controller sends no message:
// the brokers learn it from the record, as KRaft's brokers do from the
// metadata log, and delete their replicas.
func (c *Controller) DeleteTopic(name string) error {
	t := c.s.Topics[name]
	if t == nil {
		return fmt.Errorf("%w: topic %q", replica.ErrUnknownTopicOrPartition, name)
	}
	return c.emit(&RemoveTopicRecord{Stamp: c.stamp(), Topic: name, ID: t.ID})
}
