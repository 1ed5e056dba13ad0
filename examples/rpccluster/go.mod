module github.com/strandlog/strand/examples/rpccluster

go 1.26.0

replace github.com/strandlog/strand => ../..

replace github.com/strandlog/strand/examples/raftlog => ../raftlog

require (
	github.com/strandlog/strand v0.0.0-00010101000000-000000000000
	github.com/strandlog/strand/examples/raftlog v0.0.0-00010101000000-000000000000
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	go.etcd.io/raft/v3 v3.7.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
)
