package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/log"
)

// TestStandaloneAltersTopicConfigsBySet: the standalone broker serves
// IncrementalAlterConfigs SET on its Dir's topic config (the change takes
// effect on the open partitions: Dir.AlterTopicConfig), checks every value
// before changing any, and refuses what it cannot do (DELETE, the legacy
// AlterConfigs that replaces every config) with INVALID_REQUEST.
func TestStandaloneAltersTopicConfigsBySet(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	require.NoError(t, tb.b.Dir().CreateTopic("t", log.TopicConfig{Partitions: 1}))
	c := tb.client()
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
	retention := func() time.Duration {
		cfg, err := tb.b.Dir().TopicConfig("t")
		require.NoError(t, err)
		return cfg.Retention.Age
	}

	require.Zero(t, alter(false, set("retention.ms", "60000"), set("max.message.bytes", "2048")).ErrorCode)
	require.Equal(t, time.Minute, retention())
	cfg, err := tb.b.Dir().TopicConfig("t")
	require.NoError(t, err)
	require.Equal(t, 2048, cfg.MaxBatchBytes)

	bad := alter(false, set("retention.ms", "1000"), set("max.message.bytes", "-5"))
	require.Equal(t, kerr.InvalidConfig.Code, bad.ErrorCode)
	require.Contains(t, *bad.ErrorMessage, "max.message.bytes")
	require.Equal(t, time.Minute, retention(), "nothing changed")
	require.Zero(t, alter(true, set("retention.ms", "1000")).ErrorCode)
	require.Equal(t, time.Minute, retention(), "validateOnly changes nothing")

	del := alter(false, kmsg.IncrementalAlterConfigsRequestResourceConfig{Name: "retention.ms", Op: kmsg.IncrementalAlterConfigOpDelete})
	require.Equal(t, kerr.InvalidRequest.Code, del.ErrorCode)

	legacy := kmsg.NewPtrAlterConfigsRequest()
	lres := kmsg.NewAlterConfigsRequestResource()
	lres.ResourceType, lres.ResourceName = kmsg.ConfigResourceTypeTopic, "t"
	lres.Configs = []kmsg.AlterConfigsRequestResourceConfig{{Name: "retention.ms", Value: kmsg.StringPtr("1000")}}
	legacy.Resources = append(legacy.Resources, lres)
	lresp, err := legacy.RequestWith(context.Background(), c)
	require.NoError(t, err)
	require.Equal(t, kerr.InvalidRequest.Code, lresp.Resources[0].ErrorCode)
}
