package assign

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestReassignmentJSON(t *testing.T) {
	// The files of Kafka's documentation for kafka-reassign-partitions.
	const topics = `{"topics": [{"topic": "foo1"}, {"topic": "foo2"}], "version": 1}`
	const current = `{"version":1,"partitions":[{"topic":"foo1","partition":0,"replicas":[2,1],"log_dirs":["any","any"]},
		{"topic":"foo1","partition":1,"replicas":[1,3],"log_dirs":["any","any"]},
		{"topic":"foo1","partition":2,"replicas":[3,4],"log_dirs":["any","any"]},
		{"topic":"foo2","partition":0,"replicas":[4,2],"log_dirs":["any","any"]},
		{"topic":"foo2","partition":1,"replicas":[2,1],"log_dirs":["any","any"]},
		{"topic":"foo2","partition":2,"replicas":[1,3],"log_dirs":["any","any"]},
		{"topic":"bar","partition":0,"replicas":[1],"log_dirs":["any"]}]}`
	var move TopicsToMove
	var cur Reassignment
	if err := json.Unmarshal([]byte(topics), &move); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(current), &cur); err != nil {
		t.Fatal(err)
	}
	brokers := []Broker{{ID: 5}, {ID: 6}}
	seed := func() *rand.Rand { return rand.New(rand.NewPCG(7, 8)) }
	got, err := GenerateReassignment(cur, move, brokers, seed())
	if err != nil {
		t.Fatal(err)
	}
	// The same draws, in the same order, through PlaceReplicas.
	r := seed()
	var want []PartitionReplicas
	for _, topic := range []string{"foo1", "foo2"} {
		start, shift := r.IntN(2), r.IntN(2)
		placed, err := PlaceReplicas(brokers, 3, 2, start, shift, -1)
		if err != nil {
			t.Fatal(err)
		}
		for p, replicas := range placed {
			want = append(want, PartitionReplicas{topic, int32(p), replicas, []string{"any", "any"}})
		}
	}
	if !slices.EqualFunc(got.Partitions, want, func(a, b PartitionReplicas) bool {
		return a.Topic == b.Topic && a.Partition == b.Partition && slices.Equal(a.Replicas, b.Replicas) && slices.Equal(a.LogDirs, b.LogDirs)
	}) {
		t.Fatalf("got %+v\nwant %+v", got.Partitions, want)
	}
	// The output is what --execute reads back.
	text, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var back Reassignment
	if err := json.Unmarshal(text, &back); err != nil || back.Version != 1 || len(back.Partitions) != 6 {
		t.Fatalf("round trip of %s: %+v, %v", text, back, err)
	}
}

func TestGenerateReassignmentErrors(t *testing.T) {
	cur := Reassignment{Version: 1, Partitions: []PartitionReplicas{{Topic: "a", Partition: 0, Replicas: []int32{1, 2, 3}}}}
	r := rand.New(rand.NewPCG(1, 1))
	tests := []struct {
		name    string
		move    []string
		brokers []Broker
		want    error
	}{
		{"unknown topic", []string{"b"}, []Broker{{ID: 1}, {ID: 2}, {ID: 3}}, ErrInvalidArgument},
		{"too few brokers for the replication factor", []string{"a"}, []Broker{{ID: 1}, {ID: 2}}, ErrInvalidReplicationFactor},
		{"no brokers", []string{"a"}, nil, ErrInvalidReplicationFactor},
		{"some brokers without rack", []string{"a"}, []Broker{{ID: 1, Rack: "x"}, {ID: 2}, {ID: 3}}, ErrPartialRacks},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var move TopicsToMove
			for _, m := range tt.move {
				move.Topics = append(move.Topics, TopicName{m})
			}
			if _, err := GenerateReassignment(cur, move, tt.brokers, r); !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
		})
	}
}
