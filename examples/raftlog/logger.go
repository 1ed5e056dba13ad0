package raftlog

import (
	"fmt"
	"log/slog"
)

// raftLogger sends etcd raft's log to a slog.Logger. Raft calls Panic and
// Fatal when its invariants break, a peer's message that contradicts this
// voter's durable log among the causes: they panic with a raftPanic,
// which the loop recovers into the error that stops the Log, so that a
// bad peer or a damaged directory stops one Log, not the process.
type raftLogger struct{ l *slog.Logger }

// raftPanic is what raftLogger panics with.
type raftPanic string

func (r raftLogger) Debug(v ...any)                   {}
func (r raftLogger) Debugf(format string, v ...any)   {}
func (r raftLogger) Info(v ...any)                    { r.l.Info("raft: " + fmt.Sprint(v...)) }
func (r raftLogger) Infof(format string, v ...any)    { r.l.Info("raft: " + fmt.Sprintf(format, v...)) }
func (r raftLogger) Warning(v ...any)                 { r.l.Warn("raft: " + fmt.Sprint(v...)) }
func (r raftLogger) Warningf(format string, v ...any) { r.l.Warn("raft: " + fmt.Sprintf(format, v...)) }
func (r raftLogger) Error(v ...any)                   { r.l.Error("raft: " + fmt.Sprint(v...)) }
func (r raftLogger) Errorf(format string, v ...any)   { r.l.Error("raft: " + fmt.Sprintf(format, v...)) }
func (r raftLogger) Fatal(v ...any)                   { r.Panic(v...) }
func (r raftLogger) Fatalf(format string, v ...any)   { r.Panicf(format, v...) }
func (r raftLogger) Panic(v ...any)                   { r.fail(fmt.Sprint(v...)) }
func (r raftLogger) Panicf(format string, v ...any)   { r.fail(fmt.Sprintf(format, v...)) }

func (r raftLogger) fail(msg string) {
	r.l.Error("raft: " + msg)
	panic(raftPanic(msg))
}

// recoverRaft turns a raftPanic into *err; any other panic goes on.
func recoverRaft(err *error) {
	p := recover()
	if p == nil {
		return
	}
	msg, ok := p.(raftPanic)
	if !ok {
		panic(p)
	}
	*err = fmt.Errorf("raftlog: etcd raft gave up: %s", string(msg))
}
