module github.com/strandlog/strand/examples/kafkarecords

go 1.26.0

replace github.com/strandlog/strand => ../..

require (
	github.com/pierrec/lz4/v4 v4.1.33
	github.com/strandlog/strand v0.0.0-00010101000000-000000000000
)

require golang.org/x/sys v0.50.0 // indirect
