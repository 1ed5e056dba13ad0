package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/log"
)

// TestBrokerAloneAltersTopicConfigs: the broker alone alters topic
// configs as a cluster does, through its controller (the change takes
// effect on the open partitions of its replicas): IncrementalAlterConfigs
// SET and DELETE, checking every value before changing any, and the
// legacy AlterConfigs, which replaces every config.
func TestBrokerAloneAltersTopicConfigs(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	c := tb.client()
	createTopic(t, c, "t", 1)
	alter := func(validateOnly bool, ops ...kmsg.IncrementalAlterConfigsRequestResourceConfig) kmsg.IncrementalAlterConfigsResponseResource {
		req := kmsg.NewPtrIncrementalAlterConfigsRequest()
		req.ValidateOnly = validateOnly
		res := kmsg.NewIncrementalAlterConfigsRequestResource()
		res.ResourceType, res.ResourceName, res.Configs = kmsg.ConfigResourceTypeTopic, "t", ops
		req.Resources = append(req.Resources, res)
		resp, err := req.RequestWith(context.Background(), c)
		require.NoError(t, err)
		return resp.Resources[0]
	}
	set := func(name, v string) kmsg.IncrementalAlterConfigsRequestResourceConfig {
		return kmsg.IncrementalAlterConfigsRequestResourceConfig{Name: name, Op: kmsg.IncrementalAlterConfigOpSet, Value: kmsg.StringPtr(v)}
	}
	// The replicas take a committed change up as the node applies it.
	local := func() log.TopicConfig {
		cfg, err := tb.b.Node().LocalTopicConfig("t")
		require.NoError(t, err)
		return cfg
	}
	defaults := local()
	configured := func(retention time.Duration, maxBatch int, msg string) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			cfg := local()
			assert.Equal(c, [2]any{retention, maxBatch}, [2]any{cfg.Retention.Age, cfg.MaxBatchBytes}, msg)
		}, 5*time.Second, 10*time.Millisecond)
	}

	require.Zero(t, alter(false, set("retention.ms", "60000"), set("max.message.bytes", "2048")).ErrorCode)
	configured(time.Minute, 2048, "set")

	bad := alter(false, set("retention.ms", "1000"), set("max.message.bytes", "-5"))
	require.Equal(t, kerr.InvalidConfig.Code, bad.ErrorCode)
	require.Contains(t, *bad.ErrorMessage, "max.message.bytes")
	require.Zero(t, alter(true, set("retention.ms", "1000")).ErrorCode)
	require.Zero(t, alter(false, set("max.message.bytes", "4096")).ErrorCode)
	configured(time.Minute, 4096, "neither the bad change nor the validateOnly one changed retention.ms")
	del := alter(false, kmsg.IncrementalAlterConfigsRequestResourceConfig{Name: "retention.ms", Op: kmsg.IncrementalAlterConfigOpDelete})
	require.Zero(t, del.ErrorCode)
	configured(defaults.Retention.Age, 4096, "retention.ms deleted: its default again")

	legacy := kmsg.NewPtrAlterConfigsRequest()
	lres := kmsg.NewAlterConfigsRequestResource()
	lres.ResourceType, lres.ResourceName = kmsg.ConfigResourceTypeTopic, "t"
	lres.Configs = []kmsg.AlterConfigsRequestResourceConfig{{Name: "retention.ms", Value: kmsg.StringPtr("1000")}}
	legacy.Resources = append(legacy.Resources, lres)
	lresp, err := legacy.RequestWith(context.Background(), c)
	require.NoError(t, err)
	require.Zero(t, lresp.Resources[0].ErrorCode)
	configured(time.Second, defaults.MaxBatchBytes, "max.message.bytes, not named, is back at its default")
}
