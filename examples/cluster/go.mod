module github.com/strandlog/strand/examples/cluster

go 1.26.0

replace github.com/strandlog/strand => ../..

replace github.com/strandlog/strand/examples/kafka => ../kafka

require (
	github.com/strandlog/strand v0.0.0-00010101000000-000000000000
	github.com/strandlog/strand/examples/kafka v0.0.0-00010101000000-000000000000
	github.com/stretchr/testify v1.12.1
	github.com/twmb/franz-go v1.22.3
)

require (
	github.com/xdg-go/pbkdf2 v1.0.0 // indirect
	github.com/xdg-go/scram v1.2.0 // indirect
	github.com/xdg-go/stringprep v1.0.4 // indirect
	go.etcd.io/raft/v3 v3.7.0 // indirect
	golang.org/x/text v0.36.0 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/strandlog/strand/examples/raftlog v0.0.0-00010101000000-000000000000
	github.com/twmb/franz-go/pkg/kadm v1.18.0
	github.com/twmb/franz-go/pkg/kmsg v1.15.1
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/crypto v0.50.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)

replace github.com/strandlog/strand/examples/raftlog => ../raftlog
