package broker

import "github.com/strandlog/strand/kafkaerr"

// code returns Kafka's error code for err: 0 for nil, the code it carries
// (every Strand package's errors carry Kafka's, kafkaerr), else
// UNKNOWN_SERVER_ERROR.
func code(err error) int16 { return int16(kafkaerr.CodeOf(err)) }

// ErrorCode returns Kafka's error code for err as the broker answers it:
// 0 for nil, UNKNOWN_SERVER_ERROR for an error it does not know. A
// Cluster that forwards requests between its nodes answers with it.
func ErrorCode(err error) int16 { return code(err) }

// message returns err's text for a response's ErrorMessage, nil for nil.
func message(err error) *string {
	if err == nil {
		return nil
	}
	s := err.Error()
	return &s
}
