package broker_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestKgoConsumerGroupByRegex: a franz-go KIP-848 consumer subscribed by
// regular expression (ConsumeRegex, sent as SubscribedTopicRegex) is
// assigned the matching topics by the group coordinator and reads every
// record of them and none of the others; a matching topic created later is
// assigned too, and its records read; ConsumerGroupDescribe shows the
// expression.
func TestKgoConsumerGroupByRegex(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	c := tb.client(kgo.ProducerBatchCompression(kgo.NoCompression()))
	for _, topic := range []string{"metrics-cpu", "metrics-disk", "logs"} {
		createTopic(t, c, topic, 2)
	}
	put := func(topic string, n int) {
		var recs []*kgo.Record
		for i := range n {
			recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(topic + "/" + key(i)), Value: []byte(value(i))})
		}
		require.NoError(t, c.ProduceSync(context.Background(), recs...).FirstErr())
	}
	put("metrics-cpu", 10)
	put("metrics-disk", 10)
	put("logs", 10)

	var seen sync.Map
	m := startMember(t, tb, "dashboards", "metrics-.*", &seen, kgo.ConsumeRegex(), kgo.ServerSideBalancer(),
		kgo.Balancers(kgo.RangeBalancer()), kgo.MetadataMaxAge(time.Second), kgo.MetadataMinAge(100*time.Millisecond))
	defer m.leave()
	keys := func() map[string]int {
		byTopic := map[string]int{}
		seen.Range(func(k, _ any) bool {
			byTopic[strings.SplitN(k.(string), "/", 2)[0]]++
			return true
		})
		return byTopic
	}
	require.Eventually(t, func() bool { return keys()["metrics-cpu"] == 10 && keys()["metrics-disk"] == 10 },
		30*time.Second, 50*time.Millisecond, "every record of the matching topics")

	createTopic(t, c, "metrics-net", 1)
	put("metrics-net", 5)
	require.Eventually(t, func() bool { return keys()["metrics-net"] == 5 }, 30*time.Second, 50*time.Millisecond,
		"the topic created later is assigned and read")
	require.Equal(t, map[string]int{"metrics-cpu": 10, "metrics-disk": 10, "metrics-net": 5}, keys(), "nothing of logs")

	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{"dashboards"}
	resp, err := req.RequestWith(context.Background(), c)
	require.NoError(t, err)
	require.Len(t, resp.Groups[0].Members, 1)
	regex := resp.Groups[0].Members[0].SubscribedTopicRegex
	require.NotNil(t, regex)
	require.Contains(t, *regex, "metrics-.*")
}
