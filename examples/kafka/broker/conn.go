package broker

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/kafkaerr"
)

// request is one decoded request and what its handler needs of the
// connection.
type request struct {
	header
	body       kmsg.Request
	clientHost string
	remote     string   // the client's address, for logs
	session    *session // who the connection is
}

// header is a request header (Kafka's RequestHeader, versions 1 and 2).
type header struct {
	key, version int16
	correlation  int32
	clientID     string
}

// handler serves one API. A nil response sends nothing (a Produce with
// acks=0).
type handler func(ctx context.Context, r *request) kmsg.Response

// api is an API the broker serves and the versions it serves of it.
type api struct {
	min, max int16
	serve    func(b *Broker) handler
}

// apis are the APIs served, with the versions advertised in ApiVersions.
// Versions are capped where a later one needs what the broker lacks:
// Produce v13 names topics by id, Fetch v18 carries a follower's high
// watermark (KIP-1166), ListOffsets v7+ asks for the max timestamp,
// AddPartitionsToTxn v4+ is sent by brokers only; EndTxn below v5 is
// transactions version 1, which the coordinator does not keep (txn.go).
// Topics named by id: see topicids.go.
// (Set in init: ApiVersions' handler reads the table.)
var apis map[int16]api

func init() { apis = servedAPIs() }

func servedAPIs() map[int16]api {
	return map[int16]api{
		0:  {3, 12, func(b *Broker) handler { return b.produce }},
		1:  {4, 17, func(b *Broker) handler { return b.fetch }},
		2:  {1, 6, func(b *Broker) handler { return b.listOffsets }},
		3:  {0, 12, func(b *Broker) handler { return b.metadata }},
		8:  {0, 10, func(b *Broker) handler { return b.offsetCommit }},
		9:  {0, 10, func(b *Broker) handler { return b.offsetFetch }},
		10: {0, 6, func(b *Broker) handler { return b.findCoordinator }},
		11: {0, 9, func(b *Broker) handler { return b.joinGroup }},
		12: {0, 4, func(b *Broker) handler { return b.heartbeat }},
		13: {0, 5, func(b *Broker) handler { return b.leaveGroup }},
		14: {0, 5, func(b *Broker) handler { return b.syncGroup }},
		15: {0, 5, func(b *Broker) handler { return b.describeGroups }},
		16: {0, 5, func(b *Broker) handler { return b.listGroups }},
		17: {0, 1, func(b *Broker) handler { return b.saslHandshake }},
		18: {0, 4, func(b *Broker) handler { return b.apiVersions }},
		19: {0, 7, func(b *Broker) handler { return b.createTopics }},
		20: {0, 6, func(b *Broker) handler { return b.deleteTopics }},
		21: {0, 2, func(b *Broker) handler { return b.deleteRecords }},
		22: {0, 4, func(b *Broker) handler { return b.initProducerID }},
		23: {2, 4, func(b *Broker) handler { return b.offsetForLeaderEpoch }},
		24: {0, 3, func(b *Broker) handler { return b.addPartitionsToTxn }},
		25: {0, 4, func(b *Broker) handler { return b.addOffsetsToTxn }},
		26: {5, 5, func(b *Broker) handler { return b.endTxn }},
		28: {0, 6, func(b *Broker) handler { return b.txnOffsetCommit }},
		29: {1, 3, func(b *Broker) handler { return b.describeACLs }},
		30: {1, 3, func(b *Broker) handler { return b.createACLs }},
		31: {1, 3, func(b *Broker) handler { return b.deleteACLs }},
		32: {0, 4, func(b *Broker) handler { return b.describeConfigs }},
		36: {0, 2, func(b *Broker) handler { return b.saslAuthenticate }},
		33: {0, 2, func(b *Broker) handler { return b.legacyAlterConfigs }},
		44: {0, 1, func(b *Broker) handler { return b.incrementalAlterConfigs }},
		50: {0, 0, func(b *Broker) handler { return b.describeUserScramCredentials }},
		51: {0, 0, func(b *Broker) handler { return b.alterUserScramCredentials }},
		61: {0, 0, func(b *Broker) handler { return b.describeProducers }},
		65: {0, 0, func(b *Broker) handler { return b.describeTransactions }},
		66: {0, 2, func(b *Broker) handler { return b.listTransactions }},
		68: {0, 1, func(b *Broker) handler { return b.consumerGroupHeartbeat }},
		69: {0, 1, func(b *Broker) handler { return b.consumerGroupDescribe }},
	}
}

// errRefused closes a connection after a request that cannot be answered.
var errRefused = errors.New("broker: request refused")

func (b *Broker) serveConn(raw net.Conn, sec Listener, advertise BrokerAddr) {
	defer b.wg.Done()
	defer func() {
		b.mu.Lock()
		delete(b.conns, raw)
		b.mu.Unlock()
		raw.Close()
	}()
	c := raw
	if sec.TLS != nil {
		tc := tls.Server(raw, sec.TLS)
		raw.SetDeadline(time.Now().Add(b.cfg.IdleTimeout))
		if err := tc.HandshakeContext(b.ctx); err != nil {
			b.logger.Warn("broker: TLS handshake failed, closing the connection", "remote", raw.RemoteAddr().String(), "err", err)
			return
		}
		c = tc
	}
	s := newSession(c, sec, advertise)
	host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
	br := bufio.NewReaderSize(c, 64<<10)
	var out []byte
	for !s.closing {
		c.SetReadDeadline(time.Now().Add(b.cfg.IdleTimeout))
		frame, err := b.readFrame(br, c, s.maxFrame(b.cfg))
		if err != nil {
			return
		}
		if s.rawTokens {
			if b.rawToken(c, s, frame) != nil {
				return
			}
			continue
		}
		r, resp, err := b.handle(frame, host, s)
		if err != nil {
			b.logger.Warn("broker: refused request, closing the connection", "remote", c.RemoteAddr().String(), "principal", s.principal, "err", err)
			return
		}
		if resp == nil {
			continue
		}
		c.SetWriteDeadline(time.Now().Add(b.cfg.IdleTimeout))
		if f, ok := resp.(*fetchResponse); ok {
			out, err = f.write(c, r.header, out)
			f.close()
		} else {
			out = appendResponse(out[:0], r.header, resp)
			_, err = c.Write(out)
		}
		if err != nil {
			b.logger.Debug("broker: response not written", "remote", c.RemoteAddr().String(), "err", err)
			return
		}
	}
}

// errPanic is a request whose decoding or handling panicked: its connection
// is closed, and the broker serves the others.
var errPanic = errors.New("broker: request handling panicked")

// handle decodes a request and serves it. A nil response sends nothing.
func (b *Broker) handle(frame []byte, host string, s *session) (r *request, resp kmsg.Response, err error) {
	defer func() {
		if p := recover(); p != nil {
			r, resp, err = nil, nil, fmt.Errorf("%w: %v", errPanic, p)
		}
	}()
	r, resp, err = b.decode(frame, host)
	if err == nil {
		err = s.admit(r.key, time.Now())
	}
	if err != nil || resp != nil {
		return r, resp, err
	}
	r.session, r.remote = s, s.remote
	return r, apis[r.key].serve(b)(b.ctx, r), nil
}

// readFrame reads one size-prefixed request. A size past max or below a
// header's is refused; a frame cut short ends the connection.
func (b *Broker) readFrame(br *bufio.Reader, c net.Conn, max int32) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(br, size[:]); err != nil {
		if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
			b.logger.Debug("broker: connection ended", "remote", c.RemoteAddr().String(), "err", err)
		}
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n < 8 || n > max {
		err := fmt.Errorf("%w: request of %d bytes, allowed 8 to %d (MaxRequestBytes, or MaxSASLReceiveBytes before authentication)", errRefused, n, max)
		b.logger.Warn("broker: refused request, closing the connection", "remote", c.RemoteAddr().String(), "err", err)
		return nil, err
	}
	frame := make([]byte, n)
	if _, err := io.ReadFull(br, frame); err != nil {
		b.logger.Warn("broker: request cut short, closing the connection", "remote", c.RemoteAddr().String(), "size", n, "err", err)
		return nil, err
	}
	return frame, nil
}

// decode parses a request frame. An API or version the broker does not
// serve gets its error response at once (resp non-nil); a frame that does
// not parse is an error.
func (b *Broker) decode(frame []byte, host string) (*request, kmsg.Response, error) {
	h := header{
		key:         int16(binary.BigEndian.Uint16(frame)),
		version:     int16(binary.BigEndian.Uint16(frame[2:])),
		correlation: int32(binary.BigEndian.Uint32(frame[4:])),
	}
	r := &request{header: h, clientHost: host}
	body := kmsg.RequestForKey(h.key)
	a, served := apis[h.key]
	if body == nil || h.version < 0 || h.version > body.MaxVersion() {
		// No schema to read the body with: answer as Kafka answers an
		// ApiVersions request of a version it does not know, whose
		// response starts with the error code.
		b.logger.Warn("broker: unknown API key or version", "key", h.key, "version", h.version)
		return r, unsupported(h.key), nil
	}
	body.SetVersion(h.version)
	rest, clientID, err := readHeaderRest(frame[8:], body.IsFlexible())
	if err != nil {
		return nil, nil, fmt.Errorf("%w: API %d v%d: header: %w", errRefused, h.key, h.version, err)
	}
	r.clientID = clientID
	if err := body.ReadFrom(rest); err != nil {
		return nil, nil, fmt.Errorf("%w: API %d v%d: body: %w", errRefused, h.key, h.version, err)
	}
	r.body = body
	if !served || h.version < a.min || h.version > a.max {
		if h.key == 18 {
			// Clients open with their latest ApiVersions and retry
			// with a version from the answer: no news.
			b.logger.Debug("broker: ApiVersions version not served", "version", h.version, "client", clientID)
			return r, unsupported(h.key), nil
		}
		b.logger.Warn("broker: API or version not served", "key", h.key, "name", kmsg.NameForKey(h.key), "version", h.version, "client", clientID)
		resp := body.ResponseKind()
		resp.SetVersion(h.version)
		setErrorCodes(body, resp, int16(kafkaerr.ErrUnsupportedVersion))
		return r, resp, nil
	}
	return r, nil, nil
}

// readHeaderRest reads the client id (a nullable string with an int16
// length, even in flexible versions) and, for flexible versions, the header's
// tagged fields, and returns the body after them.
func readHeaderRest(b []byte, flexible bool) (rest []byte, clientID string, err error) {
	if len(b) < 2 {
		return nil, "", io.ErrUnexpectedEOF
	}
	n := int16(binary.BigEndian.Uint16(b))
	b = b[2:]
	if n > 0 {
		if len(b) < int(n) {
			return nil, "", io.ErrUnexpectedEOF
		}
		clientID, b = string(b[:n]), b[n:]
	}
	if !flexible {
		return b, clientID, nil
	}
	tags, w := binary.Uvarint(b)
	if w <= 0 {
		return nil, "", io.ErrUnexpectedEOF
	}
	b = b[w:]
	for range tags {
		if _, w = binary.Uvarint(b); w <= 0 {
			return nil, "", io.ErrUnexpectedEOF
		}
		b = b[w:]
		size, w := binary.Uvarint(b)
		if w <= 0 || uint64(len(b)-w) < size {
			return nil, "", io.ErrUnexpectedEOF
		}
		b = b[w+int(size):]
	}
	return b, clientID, nil
}

// appendResponse frames resp: size, correlation id, and for flexible
// versions the response header's empty tagged fields (but for ApiVersions,
// whose response header is always version 0, so that any client can read
// it).
func appendResponse(dst []byte, h header, resp kmsg.Response) []byte {
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(h.correlation))
	if resp.IsFlexible() && resp.Key() != 18 {
		dst = append(dst, 0)
	}
	dst = resp.AppendTo(dst)
	binary.BigEndian.PutUint32(dst, uint32(len(dst)-4))
	return dst
}

// unsupported is the ApiVersions response Kafka sends for an ApiVersions
// request of a version it does not know: version 0, UNSUPPORTED_VERSION and
// the versions of ApiVersions it serves (KIP-511), so that the client asks
// again with one of those and learns the rest, features included, from a
// full answer. For an API key it does not know, the versions of every API.
func unsupported(key int16) kmsg.Response {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(0)
	resp.ErrorCode = int16(kafkaerr.ErrUnsupportedVersion)
	resp.ApiKeys = advertised()
	if key == 18 {
		resp.ApiKeys = slices.DeleteFunc(resp.ApiKeys, func(k kmsg.ApiVersionsResponseApiKey) bool { return k.ApiKey != 18 })
	}
	return resp
}

func advertised() []kmsg.ApiVersionsResponseApiKey {
	keys := make([]kmsg.ApiVersionsResponseApiKey, 0, len(apis))
	for k := range int16(100) {
		if a, ok := apis[k]; ok {
			keys = append(keys, kmsg.ApiVersionsResponseApiKey{ApiKey: k, MinVersion: a.min, MaxVersion: a.max})
		}
	}
	return keys
}

// setErrorCodes sets the top-level ErrorCode of a response that has one,
// for an API the broker does not serve. A TxnOffsetCommit, whose response
// has per-partition codes only, gets the code for each of its partitions,
// as Kafka answers it (an empty answer would read as success to a client);
// other responses with per-partition codes only go out empty.
func setErrorCodes(req kmsg.Request, resp kmsg.Response, code int16) {
	v := reflect.ValueOf(resp).Elem()
	if f := v.FieldByName("ErrorCode"); f.IsValid() && f.Kind() == reflect.Int16 {
		f.SetInt(int64(code))
	}
	if req, ok := req.(*kmsg.TxnOffsetCommitRequest); ok {
		resp := resp.(*kmsg.TxnOffsetCommitResponse)
		for _, rt := range req.Topics {
			t := kmsg.NewTxnOffsetCommitResponseTopic()
			t.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				t.Partitions = append(t.Partitions, kmsg.TxnOffsetCommitResponseTopicPartition{Partition: rp.Partition, ErrorCode: code})
			}
			resp.Topics = append(resp.Topics, t)
		}
	}
}

func (b *Broker) apiVersions(_ context.Context, r *request) kmsg.Response {
	resp := r.body.ResponseKind().(*kmsg.ApiVersionsResponse)
	resp.ApiKeys = advertised()
	features(resp)
	return resp
}
