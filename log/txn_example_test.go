package log_test

import (
	"context"
	"fmt"
	"os"

	"github.com/strandlog/strand/log"
)

// A transaction writes to two topics at once: a ReadCommitted reader sees
// both records after Commit, and neither of an aborted transaction.
func ExampleTransactionalProducer() {
	path, _ := os.MkdirTemp("", "strand-example-")
	defer os.RemoveAll(path)
	d, err := log.OpenDir(path, log.DirOptions{})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	for _, topic := range []string{"payments", "ledger"} {
		if err := d.CreateTopic(topic, log.TopicConfig{}); err != nil {
			panic(err)
		}
	}
	// The transactional id survives restarts: a new producer with it
	// fences this one and aborts what it left open.
	tp, err := d.NewTransactionalProducer("payments-app", log.TransactionalOptions{})
	if err != nil {
		panic(err)
	}
	defer tp.Close()

	ctx := context.Background()
	transfer := func(payment, entry string, commit bool) {
		if err := tp.Begin(); err != nil {
			panic(err)
		}
		if _, err := tp.Produce(ctx, "payments", 0, log.NewRecord(nil, []byte(payment))); err != nil {
			panic(err)
		}
		if _, err := tp.Produce(ctx, "ledger", 0, log.NewRecord(nil, []byte(entry))); err != nil {
			panic(err)
		}
		end := tp.Abort
		if commit {
			end = tp.Commit
		}
		if err := end(ctx); err != nil {
			panic(err)
		}
	}
	transfer("pay 10 to bob", "alice -10, bob +10", true)
	transfer("pay 99 to eve", "alice -99, eve +99", false)

	for _, topic := range []string{"payments", "ledger"} {
		p, err := d.Partition(topic, 0)
		if err != nil {
			panic(err)
		}
		for r, err := range p.Records(0, log.ReadCommitted) {
			if err != nil {
				panic(err)
			}
			fmt.Printf("%s: %s\n", topic, r.Value)
		}
	}
	// Output:
	// payments: pay 10 to bob
	// ledger: alice -10, bob +10
}
