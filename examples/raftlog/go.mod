module github.com/strandlog/strand/examples/raftlog

go 1.26.0

replace github.com/strandlog/strand => ../..

require (
	github.com/strandlog/strand v0.0.0-00010101000000-000000000000
	github.com/stretchr/testify v1.12.1
	go.etcd.io/raft/v3 v3.7.0
	google.golang.org/protobuf v1.36.11
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
