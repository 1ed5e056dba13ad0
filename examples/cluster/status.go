package main

import (
	"context"
	"html/template"
	"net/http"
	"sync"
	"time"

	"github.com/strandlog/strand/examples/kafka/broker"
	"github.com/strandlog/strand/replica"
)

// metadata is the committed controller state as one node has applied it,
// with its view of the raft group: what GET /metadata answers and what
// clients route by.
type metadata struct {
	Node            replica.NodeID  `json:"node"`
	RaftLeader      replica.NodeID  `json:"raft_leader"`
	RaftTerm        uint64          `json:"raft_term"`
	RaftApplied     uint64          `json:"raft_applied"`
	ControllerEpoch int32           `json:"controller_epoch"`
	Brokers         []brokerView    `json:"brokers"`
	Topics          []topicView     `json:"topics"`
	Partitions      []partitionView `json:"partitions"`
}

// topicView is a topic: its id and the configs set on it.
type topicView struct {
	Name       string            `json:"name"`
	ID         [16]byte          `json:"-"`
	Partitions int32             `json:"partitions"`
	Configs    map[string]string `json:"configs,omitempty"`
}

type brokerView struct {
	ID           replica.NodeID `json:"id"`
	Epoch        int64          `json:"epoch"`
	Fenced       bool           `json:"fenced"`
	ShuttingDown bool           `json:"shutting_down"`
	Clean        bool           `json:"clean"`
	// Kafka is where the broker serves Kafka clients, if it does (status
	// only).
	Kafka string `json:"kafka,omitempty"`
}

type partitionView struct {
	Topic          string           `json:"topic"`
	Partition      int32            `json:"partition"`
	Leader         replica.NodeID   `json:"leader"`
	LeaderEpoch    int32            `json:"leader_epoch"`
	PartitionEpoch int32            `json:"partition_epoch"`
	Replicas       []replica.NodeID `json:"replicas"`
	ISR            []replica.NodeID `json:"isr"`
	ELR            []replica.NodeID `json:"elr,omitempty"`
	Adding         []replica.NodeID `json:"adding,omitempty"`
	Removing       []replica.NodeID `json:"removing,omitempty"`
	Recovering     bool             `json:"recovering,omitempty"`
	// Logs is each replica's log as that node reports it (status only).
	Logs []replicaLog `json:"logs,omitempty"`
}

// replicaLog is one replica's log offsets.
type replicaLog struct {
	Node          replica.NodeID `json:"node"`
	LogStart      int64          `json:"log_start"`
	HighWatermark int64          `json:"high_watermark"`
	LogEnd        int64          `json:"log_end"`
	Error         string         `json:"error,omitempty"`
}

func (md *metadata) partition(topic string, partition int32) *partitionView {
	for i := range md.Partitions {
		if p := &md.Partitions[i]; p.Topic == topic && p.Partition == partition {
			return p
		}
	}
	return nil
}

// metadata is this node's committed metadata as JSON shows it.
func (nd *node) metadata() *metadata {
	cm := nd.n.Metadata()
	md := &metadata{Node: cm.Node, RaftLeader: cm.Controller, RaftTerm: cm.Term, RaftApplied: cm.Applied,
		ControllerEpoch: cm.ControllerEpoch, Brokers: []brokerView{}, Topics: []topicView{}, Partitions: []partitionView{}}
	for _, t := range cm.Topics {
		md.Topics = append(md.Topics, topicView{Name: t.Name, ID: t.ID, Partitions: t.Partitions, Configs: t.Configs})
	}
	for _, b := range cm.Brokers {
		md.Brokers = append(md.Brokers, brokerView{ID: b.ID, Epoch: b.Epoch, Fenced: b.Fenced, ShuttingDown: b.ShuttingDown, Clean: b.Clean})
	}
	for _, p := range cm.Partitions {
		md.Partitions = append(md.Partitions, partitionView{
			Topic: p.Topic, Partition: p.Partition, Leader: p.Leader, LeaderEpoch: p.LeaderEpoch,
			PartitionEpoch: p.PartitionEpoch, Replicas: p.Replicas, ISR: p.ISR, ELR: p.ELR,
			Adding: p.Adding, Removing: p.Removing, Recovering: p.Recovering,
		})
	}
	return md
}

// localLogs answers GET /local: this node's replicas' offsets.
func (nd *node) localLogs() []partitionLogs {
	var out []partitionLogs
	for _, r := range nd.n.Replicas() {
		rl := replicaLog{Node: nd.cfg.id, LogStart: r.LogStart, HighWatermark: r.HighWatermark, LogEnd: r.LogEnd}
		if r.Err != nil {
			rl.Error = r.Err.Error()
		}
		out = append(out, partitionLogs{Topic: r.Topic, Partition: r.Partition, Log: rl})
	}
	return out
}

// localTopics answers GET /local/topics: the topics of this node's
// log.Dir, each with its configuration by Kafka name, as its replicas
// apply it.
func (nd *node) localTopics() map[string]map[string]string {
	out := map[string]map[string]string{}
	topics, _ := nd.n.LocalTopics()
	for name, cfg := range topics {
		out[name] = broker.TopicConfigValues(cfg)
	}
	return out
}

type partitionLogs struct {
	Topic     string     `json:"topic"`
	Partition int32      `json:"partition"`
	Log       replicaLog `json:"log"`
}

// status is this node's metadata with every replica's log offsets, asked
// of each node (a node that does not answer in time is reported so).
func (nd *node) status(ctx context.Context) *metadata {
	md := nd.metadata()
	for i := range md.Brokers {
		md.Brokers[i].Kafka = nd.cfg.kafka[md.Brokers[i].ID]
	}
	cl := newClient(nd.cfg.peers, nd.cfg.tls)
	cl.http.Timeout = 500 * time.Millisecond
	var mu sync.Mutex
	logs := map[replica.NodeID][]partitionLogs{}
	errs := map[replica.NodeID]string{}
	var wg sync.WaitGroup
	for id := range nd.cfg.peers {
		wg.Go(func() {
			var pl []partitionLogs
			err := cl.getJSON(ctx, id, "/local", &pl)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[id] = err.Error()
			}
			logs[id] = pl
		})
	}
	wg.Wait()
	for i := range md.Partitions {
		p := &md.Partitions[i]
		for _, id := range p.Replicas {
			rl := replicaLog{Node: id, LogStart: -1, HighWatermark: -1, LogEnd: -1, Error: errs[id]}
			for _, pl := range logs[id] {
				if pl.Topic == p.Topic && pl.Partition == p.Partition {
					rl = pl.Log
				}
			}
			if rl.Error == "" && rl.LogEnd < 0 {
				rl.Error = "no replica yet"
			}
			p.Logs = append(p.Logs, rl)
		}
	}
	return md
}

var statusPage = template.Must(template.New("status").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>strand cluster: node {{.Node}}</title>
<meta http-equiv="refresh" content="2">
<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:2em}
td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}.bad{color:#b00}</style></head>
<body>
<h1>strand cluster</h1>
<p>Seen from node {{.Node}}. Raft leader and active controller: node {{.RaftLeader}},
raft term {{.RaftTerm}}, applied index {{.RaftApplied}}, controller epoch {{.ControllerEpoch}}.
The same as JSON: <a href="/status">/status</a>.</p>
<h2>Brokers</h2>
<table><tr><th>id</th><th>epoch</th><th>state</th><th>registered after</th><th>Kafka clients at</th></tr>
{{range .Brokers}}<tr><td>{{.ID}}</td><td>{{.Epoch}}</td>
<td>{{if .Fenced}}<span class="bad">fenced</span>{{else if .ShuttingDown}}shutting down{{else}}live{{end}}</td>
<td>{{if .Clean}}a clean shutdown{{else}}a crash (or first start){{end}}</td><td>{{.Kafka}}</td></tr>
{{end}}</table>
<h2>Partitions</h2>
<table><tr><th>partition</th><th>leader</th><th>leader epoch</th><th>partition epoch</th><th>replicas</th><th>ISR</th><th>ELR</th><th>reassigning</th><th>replica logs (node: log end / high watermark)</th></tr>
{{range .Partitions}}<tr><td>{{.Topic}}-{{.Partition}}</td>
<td>{{if lt .Leader 0}}<span class="bad">none</span>{{else}}{{.Leader}}{{end}}{{if .Recovering}} <span class="bad">(elected uncleanly: recovering)</span>{{end}}</td>
<td>{{.LeaderEpoch}}</td><td>{{.PartitionEpoch}}</td><td>{{.Replicas}}</td><td>{{.ISR}}</td><td>{{.ELR}}</td>
<td>{{if or .Adding .Removing}}adding {{.Adding}}, removing {{.Removing}}{{end}}</td>
<td>{{range .Logs}}{{.Node}}: {{if .Error}}<span class="bad">{{.Error}}</span>{{else}}{{.LogEnd}} / {{.HighWatermark}}{{end}}<br>{{end}}</td></tr>
{{end}}</table>
</body></html>
`))

func (nd *node) statusHTML(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	statusPage.Execute(w, nd.status(r.Context()))
}
