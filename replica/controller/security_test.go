package controller

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/replica"
)

// SCRAM credentials and ACLs as KRaft keeps them: the rules of Kafka's
// ScramControlManager and AclControlManager (and their tests, where
// named), and the controller's own, that it writes only well-formed
// records and that every State refuses the others.

const (
	sha256 = "SCRAM-SHA-256"
	sha512 = "SCRAM-SHA-512"
)

// credential is a user's credential for a mechanism with bytes made of
// seed: the controller checks a credential's form, never its keys, which
// only a client's proof could.
func credential(user, mechanism string, seed byte) ScramCredential {
	return ScramCredential{User: user, Mechanism: mechanism, Salt: []byte{seed, 's'},
		StoredKey: bytes.Repeat([]byte{seed}, 32), ServerKey: bytes.Repeat([]byte{seed + 1}, 32), Iterations: 4096}
}

// Kafka's AclOperation codes the tests use.
const (
	opRead  int8 = 3
	opWrite int8 = 4
	opAlter int8 = 7
)

var (
	aliceReadsOrders = ACL{ResourceType: aclTopic, ResourceName: "orders", PatternType: aclLiteral,
		Principal: "User:alice", Host: "*", Operation: opRead, Permission: aclAllow}
	bobWritesOrdPrefix = ACL{ResourceType: aclTopic, ResourceName: "ord", PatternType: aclPrefixed,
		Principal: "User:bob", Host: "10.0.0.1", Operation: opWrite, Permission: aclAllow}
	anyoneDeniedAlterCluster = ACL{ResourceType: aclCluster, ResourceName: "kafka-cluster", PatternType: aclLiteral,
		Principal: "User:*", Host: "*", Operation: opAlter, Permission: aclDeny}
)

// securityRecords are a record of each kind of credentials and ACLs, for
// the tests of every record (sampleRecords) and FuzzDecodeRecord's seeds.
func securityRecords() []Record {
	return []Record{
		&ScramCredentialRecord{Stamp{3}, ScramCredential{User: "alice", Mechanism: sha256,
			Salt: []byte{1, 2, 3}, StoredKey: []byte{4, 5}, ServerKey: []byte{6}, Iterations: 4096}},
		&RemoveScramCredentialRecord{Stamp{3}, ScramCredentialKey{User: "alice", Mechanism: sha512}},
		&ACLRecord{Stamp{3}, bobWritesOrdPrefix},
		&RemoveACLRecord{Stamp{3}, anyoneDeniedAlterCluster},
	}
}

// Each record decodes to itself and encodes to the same bytes again, and
// those bytes are the layout records on disk have: the kind, the version,
// the epoch, then the fields (strings and bytes a length and their
// content, numbers zig-zag varints).
func TestSecurityRecordsRoundTripByteForByte(t *testing.T) {
	golden := []string{
		// kind 11, version 4, epoch 3 (zig-zag 6), "alice", "SCRAM-SHA-256",
		// the salt, stored key and server key, 4096 iterations.
		"0b0406" + "05616c696365" + "0d534352414d2d5348412d323536" + "03010203" + "020405" + "0106" + "8040",
		// kind 12: "alice", "SCRAM-SHA-512".
		"0c0406" + "05616c696365" + "0d534352414d2d5348412d353132",
		// kind 13: TOPIC (2), "ord", PREFIXED (4), "User:bob", "10.0.0.1",
		// WRITE (4), ALLOW (3).
		"0d0406" + "04" + "036f7264" + "08" + "08557365723a626f62" + "0831302e302e302e31" + "08" + "06",
		// kind 14: CLUSTER (4), "kafka-cluster", LITERAL (3), "User:*",
		// "*", ALTER (7), DENY (2).
		"0e0406" + "08" + "0d6b61666b612d636c7573746572" + "06" + "06557365723a2a" + "012a" + "0e" + "04",
	}
	for i, r := range securityRecords() {
		b, err := r.MarshalBinary()
		require.NoError(t, err)
		d, err := DecodeRecord(b)
		require.NoError(t, err)
		require.Equal(t, r, d)
		again, err := d.MarshalBinary()
		require.NoError(t, err)
		require.Equal(t, b, again, "%T: byte for byte", r)
		require.Equal(t, golden[i], hex.EncodeToString(b), "%T: the layout on disk", r)
	}
}

// A decoded record's bytes are its own: the store may reuse its buffer.
func TestDecodedCredentialOwnsItsBytes(t *testing.T) {
	b, err := securityRecords()[0].MarshalBinary()
	require.NoError(t, err)
	r, err := DecodeRecord(b)
	require.NoError(t, err)
	clear(b)
	require.Equal(t, securityRecords()[0], r)
}

// Bytes a controller never wrote do not decode: a code beyond an int8, a
// salt longer than Kafka's STRING.
func TestSecurityRecordDecodeRefusesBadInput(t *testing.T) {
	for name, b := range map[string][]byte{
		"resource type 200": binary.AppendVarint([]byte{byte(kindACL), recordVersion, 0}, 200),
		"operation -129": binary.AppendVarint(
			[]byte{byte(kindRemoveACL), recordVersion, 0, 4, 1, 'x', 6, 1, 'p', 1, 'h'}, -129),
		"a salt of 32768 bytes": binary.AppendUvarint(
			append([]byte{byte(kindScramCredential), recordVersion, 0, 1, 'u', 13}, sha256...), 1<<15),
	} {
		_, err := DecodeRecord(b)
		require.ErrorIs(t, err, ErrInvalidRecord, name)
	}
}

// decodeAll encodes and decodes records as a store keeps them.
func decodeAll(t *testing.T, records []Record) []Record {
	t.Helper()
	var decoded []Record
	for _, r := range records {
		b, err := r.MarshalBinary()
		require.NoError(t, err)
		d, err := DecodeRecord(b)
		require.NoError(t, err)
		decoded = append(decoded, d)
	}
	return decoded
}

// requireReplays checks that the records stored so far, encoded and
// decoded, replay to the controller's state, and so does its image: what
// every broker reading the records has.
func requireReplays(t *testing.T, h *harness) {
	t.Helper()
	s, err := Replay(decodeAll(t, h.store))
	require.NoError(t, err)
	require.Equal(t, h.c.State(), s, "the records replay to the state")
	image, err := Replay(decodeAll(t, s.Records()))
	require.NoError(t, err)
	require.Equal(t, s, image, "the image replays to the state")
}

// kinds returns the kinds of the records stored since before.
func (h *harness) kinds(before int) []kind {
	var ks []kind
	for _, r := range h.store[before:] {
		ks = append(ks, r.kind())
	}
	return ks
}

// Credentials then ACLs: one record each, in the order given, which the
// state has and a replay of the records into a fresh State gives.
func TestCredentialsAndACLsAreWhatTheRecordsReplay(t *testing.T) {
	h := newHarness(t, 1, 1)
	before := len(h.store)
	alice256, alice512, bob256 := credential("alice", sha256, 1), credential("alice", sha512, 2), credential("bob", sha256, 3)
	require.NoError(t, h.c.AlterScramCredentials([]ScramCredential{alice256, alice512, bob256}, nil))
	require.NoError(t, h.c.AlterACLs([]ACL{aliceReadsOrders, bobWritesOrdPrefix, anyoneDeniedAlterCluster}, nil))
	h.drain()
	require.Equal(t, []kind{kindScramCredential, kindScramCredential, kindScramCredential, kindACL, kindACL, kindACL}, h.kinds(before))
	require.Empty(t, h.sent, "no message: the brokers read the records")

	s := h.c.State()
	require.Equal(t, map[string]map[string]ScramCredential{
		"alice": {sha256: alice256, sha512: alice512},
		"bob":   {sha256: bob256},
	}, s.Credentials)
	require.Equal(t, []ACL{aliceReadsOrders, bobWritesOrdPrefix, anyoneDeniedAlterCluster}, s.ACLs, "in the order created")
	requireReplays(t, h)

	// A credential set again replaces the one the user had (Kafka's
	// replay of a UserScramCredentialRecord puts it).
	again := credential("alice", sha256, 9)
	again.Iterations = 8192
	require.NoError(t, h.c.AlterScramCredentials([]ScramCredential{again}, nil))
	h.drain()
	require.Equal(t, again, h.c.State().Credentials["alice"][sha256])
	requireReplays(t, h)
}

// The state keeps bytes of its own: a caller that reuses its buffers
// changes no credential.
func TestStateOwnsCredentialBytes(t *testing.T) {
	h := newHarness(t, 1)
	c := credential("alice", sha256, 1)
	require.NoError(t, h.c.AlterScramCredentials([]ScramCredential{c}, nil))
	want := credential("alice", sha256, 1)
	clear(c.Salt)
	clear(c.StoredKey)
	clear(c.ServerKey)
	h.drain()
	require.Equal(t, want, h.c.State().Credentials["alice"][sha256])
	require.Equal(t, want, h.store[len(h.store)-1].(*ScramCredentialRecord).ScramCredential, "the record too")
}

// Removing credentials and ACLs: a user keeps the credentials not
// removed, and leaves the state with the last; the ACLs left keep their
// order; with none left the state has none, as NewState (nil).
func TestRemoveCredentialsAndACLs(t *testing.T) {
	h := newHarness(t, 1)
	alice256, alice512, bob256 := credential("alice", sha256, 1), credential("alice", sha512, 2), credential("bob", sha256, 3)
	require.NoError(t, h.c.AlterScramCredentials([]ScramCredential{alice256, alice512, bob256}, nil))
	require.NoError(t, h.c.AlterACLs([]ACL{aliceReadsOrders, bobWritesOrdPrefix, anyoneDeniedAlterCluster}, nil))
	h.drain()

	before := len(h.store)
	require.NoError(t, h.c.AlterScramCredentials(nil, []ScramCredentialKey{{"alice", sha256}}))
	h.drain()
	require.Equal(t, []kind{kindRemoveScramCredential}, h.kinds(before))
	require.Equal(t, map[string]ScramCredential{sha512: alice512}, h.c.State().Credentials["alice"])

	require.NoError(t, h.c.AlterScramCredentials(nil, []ScramCredentialKey{{"alice", sha512}}))
	h.drain()
	require.NotContains(t, h.c.State().Credentials, "alice", "a user with no credential left has no entry")
	require.Equal(t, map[string]map[string]ScramCredential{"bob": {sha256: bob256}}, h.c.State().Credentials)
	requireReplays(t, h)

	require.NoError(t, h.c.AlterScramCredentials(nil, []ScramCredentialKey{{"bob", sha256}}))
	h.drain()
	require.Nil(t, h.c.State().Credentials)

	before = len(h.store)
	require.NoError(t, h.c.AlterACLs(nil, []ACL{bobWritesOrdPrefix}))
	h.drain()
	require.Equal(t, []kind{kindRemoveACL}, h.kinds(before))
	require.Equal(t, []ACL{aliceReadsOrders, anyoneDeniedAlterCluster}, h.c.State().ACLs)
	requireReplays(t, h)

	require.NoError(t, h.c.AlterACLs(nil, []ACL{anyoneDeniedAlterCluster, aliceReadsOrders}))
	h.drain()
	require.Nil(t, h.c.State().ACLs)
	require.Equal(t, NewState().ACLs, h.c.State().ACLs)
	requireReplays(t, h)
}

// Kafka's ScramControlManager.alterCredentials writes the removals, then
// the credentials set, whatever order a request names them in.
func TestAlterScramCredentialsRemovesThenSets(t *testing.T) {
	h := newHarness(t, 1)
	require.NoError(t, h.c.AlterScramCredentials([]ScramCredential{credential("alice", sha256, 1)}, nil))
	h.drain()
	before := len(h.store)
	require.NoError(t, h.c.AlterScramCredentials([]ScramCredential{credential("alice", sha512, 2)},
		[]ScramCredentialKey{{"alice", sha256}}))
	h.drain()
	require.Equal(t, []kind{kindRemoveScramCredential, kindScramCredential}, h.kinds(before))
	require.Equal(t, map[string]map[string]ScramCredential{"alice": {sha512: credential("alice", sha512, 2)}}, h.c.State().Credentials)
}

// with returns c changed by change.
func with(c ScramCredential, change func(*ScramCredential)) ScramCredential {
	change(&c)
	return c
}

// Every credential is checked before any record is written: one refused
// refuses the call, which writes nothing, with Kafka's code for it
// (ScramControlManager: UNACCEPTABLE_CREDENTIAL for an empty user,
// UNSUPPORTED_SASL_MECHANISM for an unknown mechanism, RESOURCE_NOT_FOUND
// for the removal of a credential not there, DUPLICATE_RESOURCE for one
// named twice), naming the credential.
func TestAlterScramCredentialsRefusesWhatIsNoCredential(t *testing.T) {
	alice, bob := credential("alice", sha256, 1), credential("bob", sha256, 2)
	for _, tc := range []struct {
		name   string
		set    []ScramCredential
		remove []ScramCredentialKey
		want   error
		says   string
	}{
		{name: "an empty user (Kafka's \"Username must not be empty\")",
			set: []ScramCredential{credential("", sha256, 2)}, want: kafkaerr.ErrUnacceptableCredential,
			says: "credential 0 of set: an empty user name"},
		{name: "a mechanism by another name than Kafka's",
			set: []ScramCredential{credential("bob", "scram-sha-256", 2)}, want: kafkaerr.ErrUnsupportedSASLMechanism,
			says: `unknown SCRAM mechanism "scram-sha-256"`},
		{name: "SCRAM-SHA-1, which Kafka does not have",
			set: []ScramCredential{credential("bob", "SCRAM-SHA-1", 2)}, want: kafkaerr.ErrUnsupportedSASLMechanism,
			says: `unknown SCRAM mechanism "SCRAM-SHA-1"`},
		{name: "no iteration",
			set:  []ScramCredential{with(bob, func(c *ScramCredential) { c.Iterations = 0 })},
			want: kafkaerr.ErrUnacceptableCredential, says: "0 iterations, want at least 1"},
		{name: "negative iterations",
			set:  []ScramCredential{with(bob, func(c *ScramCredential) { c.Iterations = -4096 })},
			want: kafkaerr.ErrUnacceptableCredential, says: "-4096 iterations"},
		{name: "an empty salt",
			set:  []ScramCredential{with(bob, func(c *ScramCredential) { c.Salt = nil })},
			want: kafkaerr.ErrUnacceptableCredential, says: "a salt of 0 bytes"},
		{name: "an empty stored key",
			set:  []ScramCredential{with(bob, func(c *ScramCredential) { c.StoredKey = []byte{} })},
			want: kafkaerr.ErrUnacceptableCredential, says: "a stored key of 0"},
		{name: "an empty server key",
			set:  []ScramCredential{with(bob, func(c *ScramCredential) { c.ServerKey = nil })},
			want: kafkaerr.ErrUnacceptableCredential, says: "a server key of 0"},
		{name: "a user name too long for Kafka's STRING",
			set:  []ScramCredential{credential(strings.Repeat("u", maxSecurityBytes+1), sha256, 2)},
			want: kafkaerr.ErrUnacceptableCredential, says: "more than 32767 bytes"},
		{name: "the removal of a user's credential not there (Kafka's \"Attempt to delete a user credential that does not exist\")",
			remove: []ScramCredentialKey{{"bob", sha256}}, want: kafkaerr.ErrResourceNotFound,
			says: `credential 0 of remove: user "bob" has no SCRAM-SHA-256 credential`},
		{name: "the removal of a mechanism the user has no credential of",
			remove: []ScramCredentialKey{{"alice", sha512}}, want: kafkaerr.ErrResourceNotFound,
			says: `user "alice" has no SCRAM-SHA-512 credential`},
		{name: "a credential set twice", set: []ScramCredential{bob, with(bob, func(c *ScramCredential) { c.Iterations = 8192 })},
			want: kafkaerr.ErrDuplicateResource, says: `credential 1 of set: user "bob"'s SCRAM-SHA-256 credential, named in credential 0 of set too`},
		{name: "a credential set and removed", set: []ScramCredential{credential("alice", sha256, 5)},
			remove: []ScramCredentialKey{{"alice", sha256}},
			want:   kafkaerr.ErrDuplicateResource, says: "credential 0 of set: user \"alice\"'s SCRAM-SHA-256 credential, named in credential 0 of remove too"},
		{name: "a credential removed twice", remove: []ScramCredentialKey{{"alice", sha256}, {"alice", sha256}},
			want: kafkaerr.ErrDuplicateResource, says: "credential 1 of remove"},
		{name: "all or nothing: a good credential, then one refused",
			set: []ScramCredential{bob, credential("carol", "SCRAM-MD5", 4)}, remove: []ScramCredentialKey{{"alice", sha256}},
			want: kafkaerr.ErrUnsupportedSASLMechanism, says: "credential 1 of set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 1)
			require.NoError(t, h.c.AlterScramCredentials([]ScramCredential{alice}, nil))
			h.drain()
			before := len(h.store)
			err := h.c.AlterScramCredentials(tc.set, tc.remove)
			require.ErrorIs(t, err, tc.want)
			require.Equal(t, tc.want, kafkaerr.CodeOf(err), "Kafka's code on the wire")
			require.Contains(t, err.Error(), tc.says)
			require.False(t, h.c.HasReady(), "no record proposed")
			h.drain()
			require.Len(t, h.store, before)
			require.Equal(t, map[string]map[string]ScramCredential{"alice": {sha256: alice}}, h.c.State().Credentials)
		})
	}
}

// withACL returns a changed by change.
func withACL(a ACL, change func(*ACL)) ACL {
	change(&a)
	return a
}

// Every ACL is checked before any record is written, as Kafka's
// AclControlManager.validateNewAcl checks it (AclControlManagerTest
// .testValidateNewAcl, testValidateAclWithBadPrincipal,
// testValidateAclWithEmptyPrincipal): a code out of its range, among
// them the filters' UNKNOWN, ANY and MATCH, no resource name, a principal
// without a type and a name, no host, a cluster resource of another name
// than kafka-cluster. One refused refuses the call (INVALID_REQUEST),
// which writes nothing, naming the ACL.
func TestAlterACLsRefusesWhatIsNoACL(t *testing.T) {
	a := aliceReadsOrders
	for _, tc := range []struct {
		name        string
		add, remove []ACL
		says        string
	}{
		{name: "resource type UNKNOWN", add: []ACL{withACL(a, func(a *ACL) { a.ResourceType = 0 })}, says: "ACL 0 of add: resource type 0 out of range"},
		{name: "resource type ANY", add: []ACL{withACL(a, func(a *ACL) { a.ResourceType = 1 })}, says: "resource type 1 out of range"},
		{name: "resource type 8, beyond USER", add: []ACL{withACL(a, func(a *ACL) { a.ResourceType = 8 })}, says: "resource type 8 out of range"},
		{name: "pattern type UNKNOWN", add: []ACL{withACL(a, func(a *ACL) { a.PatternType = 0 })}, says: "pattern type 0 is neither"},
		{name: "pattern type ANY", add: []ACL{withACL(a, func(a *ACL) { a.PatternType = 1 })}, says: "pattern type 1 is neither"},
		{name: "pattern type MATCH", add: []ACL{withACL(a, func(a *ACL) { a.PatternType = 2 })}, says: "pattern type 2 is neither"},
		{name: "pattern type 5", add: []ACL{withACL(a, func(a *ACL) { a.PatternType = 5 })}, says: "pattern type 5 is neither"},
		{name: "operation UNKNOWN", add: []ACL{withACL(a, func(a *ACL) { a.Operation = 0 })}, says: "operation 0 out of range"},
		{name: "operation ANY", add: []ACL{withACL(a, func(a *ACL) { a.Operation = 1 })}, says: "operation 1 out of range"},
		{name: "operation 15, beyond DESCRIBE_TOKENS", add: []ACL{withACL(a, func(a *ACL) { a.Operation = 15 })}, says: "operation 15 out of range"},
		{name: "operation 99, the third ACL",
			add:  []ACL{a, bobWritesOrdPrefix, withACL(a, func(a *ACL) { a.Operation = 99 })},
			says: "INVALID_REQUEST: ACL 2 of add: operation 99 out of range 2 (ALL) to 14 (DESCRIBE_TOKENS)"},
		{name: "permission UNKNOWN", add: []ACL{withACL(a, func(a *ACL) { a.Permission = 0 })}, says: "permission 0 is neither"},
		{name: "permission ANY", add: []ACL{withACL(a, func(a *ACL) { a.Permission = 1 })}, says: "permission 1 is neither"},
		{name: "permission 4", add: []ACL{withACL(a, func(a *ACL) { a.Permission = 4 })}, says: "permission 4 is neither"},
		{name: "no resource name (Kafka's \"Resource name should not be empty\")",
			add: []ACL{withACL(a, func(a *ACL) { a.ResourceName = "" })}, says: "an empty resource name"},
		{name: "a cluster resource not named kafka-cluster",
			add:  []ACL{withACL(anyoneDeniedAlterCluster, func(a *ACL) { a.ResourceName = "my-cluster" })},
			says: `a cluster resource named "my-cluster", not "kafka-cluster"`},
		{name: "an empty principal", add: []ACL{withACL(a, func(a *ACL) { a.Principal = "" })}, says: `principal "" is not of the form Type:name`},
		{name: "a principal without a colon", add: []ACL{withACL(a, func(a *ACL) { a.Principal = "invalid" })}, says: `principal "invalid"`},
		{name: "a principal without a type", add: []ACL{withACL(a, func(a *ACL) { a.Principal = ":alice" })}, says: `principal ":alice"`},
		{name: "a principal without a name", add: []ACL{withACL(a, func(a *ACL) { a.Principal = "User:" })}, says: `principal "User:"`},
		{name: "an empty host", add: []ACL{withACL(a, func(a *ACL) { a.Host = "" })}, says: "an empty host"},
		{name: "a resource name too long for Kafka's STRING",
			add: []ACL{withACL(a, func(a *ACL) { a.ResourceName = strings.Repeat("t", maxSecurityBytes+1) })}, says: "more than 32767 bytes"},
		{name: "a bad ACL to remove", remove: []ACL{withACL(a, func(a *ACL) { a.Operation = 1 })}, says: "ACL 0 of remove: operation 1 out of range"},
		{name: "an ACL both added and removed", add: []ACL{bobWritesOrdPrefix, a}, remove: []ACL{a},
			says: "ACL 0 of remove is ACL 1 of add too"},
		{name: "all or nothing: a removal and an addition, then an ACL refused",
			add: []ACL{bobWritesOrdPrefix, withACL(a, func(a *ACL) { a.Host = "" })}, remove: []ACL{a}, says: "ACL 1 of add"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 1)
			require.NoError(t, h.c.AlterACLs([]ACL{a}, nil))
			h.drain()
			before := len(h.store)
			err := h.c.AlterACLs(tc.add, tc.remove)
			require.ErrorIs(t, err, replica.ErrInvalidRequest)
			require.Equal(t, replica.ErrInvalidRequest, replica.CodeOf(err), "Kafka's code on the wire")
			require.Contains(t, err.Error(), tc.says)
			require.False(t, h.c.HasReady(), "no record proposed")
			h.drain()
			require.Len(t, h.store, before)
			require.Equal(t, []ACL{a}, h.c.State().ACLs)
		})
	}
}

// ACLs are a set by value: an ACL there already, one named twice
// (AclControlManagerTest.testCreateDedupe and testDeleteDedupe: one
// record), the removal of one not there write nothing for it, and a call
// with nothing to write proposes nothing. So does a credential set to
// what it is.
func TestNoOpsWriteNoRecord(t *testing.T) {
	h := newHarness(t, 1)
	h.drain() // the controller's record
	before := len(h.store)
	require.NoError(t, h.c.AlterACLs([]ACL{aliceReadsOrders, aliceReadsOrders, bobWritesOrdPrefix}, nil))
	h.drain()
	require.Equal(t, []kind{kindACL, kindACL}, h.kinds(before), "the ACL named twice gets one record")
	require.Equal(t, []ACL{aliceReadsOrders, bobWritesOrdPrefix}, h.c.State().ACLs)

	before = len(h.store)
	require.NoError(t, h.c.AlterACLs([]ACL{aliceReadsOrders}, []ACL{anyoneDeniedAlterCluster}))
	require.NoError(t, h.c.AlterACLs(nil, nil))
	require.NoError(t, h.c.AlterScramCredentials(nil, nil))
	require.False(t, h.c.HasReady(), "nothing to write, nothing proposed")

	require.NoError(t, h.c.AlterACLs([]ACL{anyoneDeniedAlterCluster}, []ACL{aliceReadsOrders, aliceReadsOrders}))
	h.drain()
	require.Equal(t, []kind{kindRemoveACL, kindACL}, h.kinds(before), "the removal named twice gets one record")
	require.Equal(t, []ACL{bobWritesOrdPrefix, anyoneDeniedAlterCluster}, h.c.State().ACLs)

	require.NoError(t, h.c.AlterScramCredentials([]ScramCredential{credential("alice", sha256, 1)}, nil))
	h.drain()
	before = len(h.store)
	require.NoError(t, h.c.AlterScramCredentials([]ScramCredential{credential("alice", sha256, 1)}, nil))
	require.False(t, h.c.HasReady(), "a credential set to what it is gets no record")
	requireReplays(t, h)
	require.Len(t, h.store, before)
}

// The state applies the same records idempotently too: an ACLRecord of an
// ACL it has and a RemoveACLRecord of one it has not change nothing.
func TestACLRecordsApplyIdempotently(t *testing.T) {
	s := NewState()
	require.NoError(t, s.Apply(&ControllerRecord{Stamp: Stamp{0}}))
	for range 2 {
		require.NoError(t, s.Apply(&ACLRecord{Stamp{0}, aliceReadsOrders}))
	}
	require.Equal(t, []ACL{aliceReadsOrders}, s.ACLs)
	for range 2 {
		require.NoError(t, s.Apply(&RemoveACLRecord{Stamp{0}, aliceReadsOrders}))
	}
	require.Nil(t, s.ACLs)
}

// A record a controller never writes, built by hand or by a corrupt
// store, is refused by State.Apply and changes nothing: what a broker
// authenticates or authorizes by is always what a controller checked.
func TestCorruptSecurityRecordsAreRefused(t *testing.T) {
	h := newHarness(t, 1)
	require.NoError(t, h.c.AlterScramCredentials([]ScramCredential{credential("alice", sha256, 1)}, nil))
	require.NoError(t, h.c.AlterACLs([]ACL{aliceReadsOrders}, nil))
	h.drain()
	stamp := Stamp{h.c.State().Epoch}
	bob := credential("bob", sha256, 2)
	for _, tc := range []struct {
		name string
		r    Record
		want error
	}{
		{"a credential of no user", &ScramCredentialRecord{stamp, credential("", sha256, 2)}, kafkaerr.ErrUnacceptableCredential},
		{"a credential of an unknown mechanism", &ScramCredentialRecord{stamp, credential("bob", "PLAIN", 2)}, kafkaerr.ErrUnsupportedSASLMechanism},
		{"a credential of no iteration", &ScramCredentialRecord{stamp, with(bob, func(c *ScramCredential) { c.Iterations = 0 })}, kafkaerr.ErrUnacceptableCredential},
		{"a credential without a stored key", &ScramCredentialRecord{stamp, with(bob, func(c *ScramCredential) { c.StoredKey = nil })}, kafkaerr.ErrUnacceptableCredential},
		{"an ACL of operation 99", &ACLRecord{stamp, withACL(bobWritesOrdPrefix, func(a *ACL) { a.Operation = 99 })}, replica.ErrInvalidRequest},
		{"an ACL of resource type ANY", &ACLRecord{stamp, withACL(bobWritesOrdPrefix, func(a *ACL) { a.ResourceType = 1 })}, replica.ErrInvalidRequest},
		{"an ACL whose principal has no colon", &ACLRecord{stamp, withACL(bobWritesOrdPrefix, func(a *ACL) { a.Principal = "bob" })}, replica.ErrInvalidRequest},
		{"the removal of an ACL of permission ANY", &RemoveACLRecord{stamp, withACL(aliceReadsOrders, func(a *ACL) { a.Permission = 1 })}, replica.ErrInvalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Replay(decodeAll(t, h.store))
			require.NoError(t, err)
			want, err := Replay(h.store)
			require.NoError(t, err)
			// Decoded as a store would hand it over: the bytes encode.
			d := decodeAll(t, []Record{tc.r})[0]
			err = s.Apply(d)
			require.ErrorIs(t, err, ErrInvalidRecord)
			require.ErrorIs(t, err, tc.want)
			require.Equal(t, want, s, "the state is unchanged")
		})
	}

	// Kafka's ScramControlManager.replay throws on the removal of a
	// credential it does not have ("Unable to find credential to delete").
	s, err := Replay(h.store)
	require.NoError(t, err)
	err = s.Apply(&RemoveScramCredentialRecord{stamp, ScramCredentialKey{"alice", sha512}})
	require.ErrorIs(t, err, kafkaerr.ErrResourceNotFound)
	require.Equal(t, h.c.State(), s, "the state is unchanged")
}

// A controller superseded by a newer one is refused as for any record:
// its credentials and ACLs carry its epoch, which the store's state,
// having seen the newer controller, refuses (ErrStaleControllerEpoch),
// as it refuses AlterTopicConfigs' ConfigRecords.
func TestSupersededControllerCannotAlterCredentialsOrACLs(t *testing.T) {
	h := newHarness(t, 1)
	h.drain() // the stale controller's record, which the store has
	stale := h.c
	s, err := Replay(h.store)
	require.NoError(t, err)
	next, err := New(h.c.cfg, s)
	require.NoError(t, err)

	require.NoError(t, stale.AlterScramCredentials([]ScramCredential{credential("alice", sha256, 1)}, nil))
	require.NoError(t, stale.AlterACLs([]ACL{aliceReadsOrders}, nil))
	for _, r := range stale.Ready().Records {
		require.ErrorIs(t, next.State().Apply(r), replica.ErrStaleControllerEpoch, "%T", r)
	}
	require.Nil(t, next.State().Credentials)
	require.Nil(t, next.State().ACLs)
}
