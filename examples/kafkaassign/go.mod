module github.com/strandlog/strand/examples/kafkaassign

go 1.26.0

replace github.com/strandlog/strand => ../..

require github.com/strandlog/strand v0.0.0-00010101000000-000000000000
