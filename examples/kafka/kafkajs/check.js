// check.js drives kafkajs, a Kafka client with its own implementation of the
// protocol, against a broker, and prints what it saw as JSON lines on stdout
// so that a test (examples/kafka/broker/kafkajs_test.go) can check every
// record end to end. kafkajs's own log goes to stderr.
//
// KAFKAJS_SASL and KAFKAJS_SSL_CA (see security) make its connections
// authenticate and encrypt.
//
//	node check.js produce BROKER TOPIC PARTITIONS FIRST LAST
//	    creates TOPIC with admin createTopics, then produces the keyed records
//	    key-FIRST..key-(LAST-1) idempotently with acks -1: the first half in
//	    one gzip-compressed send (a batch per partition), the rest one send
//	    each. Prints {"sent":...} per partition a send wrote to: the offset
//	    of its first record and the keys in it, in order.
//	node check.js consume BROKER TOPIC GROUP
//	    joins GROUP as its one member and consumes TOPIC from the group's
//	    committed offsets (the beginning when none), committing as it goes,
//	    until it has read and committed up to the end offsets of TOPIC, and
//	    a few more fetches brought nothing. Prints {"joined":...} per
//	    assignment it consumed under (not the rejoin a member may make as
//	    it disconnects, when another has left first), one {"record":...}
//	    per record and {"committed":...} per commit.
//	node check.js group BROKER TOPIC GROUP FIRST LAST MEMBERS
//	    starts MEMBERS members of GROUP; once the partitions are split
//	    between them, produces key-FIRST..key-(LAST-1) as produce does and
//	    consumes as consume does. Records, joins and commits name the member.
'use strict'

const { Kafka, logLevel, CompressionTypes, Partitioners } = require('kafkajs')

function print(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n')
}

function key(i) {
  return 'key-' + String(i).padStart(3, '0')
}

function value(i) {
  return 'value-' + String(i).padStart(3, '0')
}

// security is the SASL and TLS of the connections, from the environment:
// KAFKAJS_SASL=MECHANISM:USER:PASSWORD (plain, scram-sha-256,
// scram-sha-512) and KAFKAJS_SSL_CA=FILE, the authority that signed the
// broker's certificate.
function security() {
  const out = {}
  if (process.env.KAFKAJS_SASL) {
    const [mechanism, username, ...rest] = process.env.KAFKAJS_SASL.split(':')
    out.sasl = { mechanism, username, password: rest.join(':') }
  }
  if (process.env.KAFKAJS_SSL_CA) {
    out.ssl = { ca: [require('fs').readFileSync(process.env.KAFKAJS_SSL_CA, 'utf-8')] }
  }
  return out
}

function client(broker) {
  return new Kafka({
    ...security(),
    clientId: 'strand-kafkajs-check',
    brokers: [broker],
    logLevel: logLevel.WARN,
    logCreator: () => ({ namespace, level, log }) => {
      process.stderr.write(`kafkajs ${namespace} level=${level} ${JSON.stringify(log)}\n`)
    },
    retry: { retries: 3, initialRetryTime: 50 },
  })
}

// printSent prints what one producer.send reported: a base offset per
// partition. Keys are the keys of the messages that went to the partition,
// in the order kafkajs wrote them, which the test checks against the offsets
// the consumer reads.
function printSent(metadata, messages, partitionOf) {
  for (const m of metadata) {
    if (m.errorCode !== 0) {
      throw new Error(`produce to ${m.topicName}/${m.partition}: error code ${m.errorCode}`)
    }
    const keys = messages.filter(msg => partitionOf(msg) === m.partition).map(msg => msg.key)
    print({ sent: { partition: m.partition, baseOffset: Number(m.baseOffset), keys } })
  }
}

async function createTopic(kafka, topic, partitions) {
  const admin = kafka.admin()
  await admin.connect()
  const created = await admin.createTopics({
    topics: [{ topic, numPartitions: partitions, replicationFactor: 1 }],
    waitForLeaders: true,
  })
  if (!created) {
    throw new Error(`createTopics ${topic}: the topic already existed`)
  }
  await admin.disconnect()
}

// produce sends key-FIRST..key-(LAST-1) idempotently with acks -1: the
// first half in one gzip-compressed send, the rest one send each.
async function produce(kafka, topic, first, last) {
  // The partitioner is kafkajs's default (murmur2 of the key, as Java's
  // client); wrapping it records where each message went.
  const partitionOfKey = new Map()
  const producer = kafka.producer({
    idempotent: true,
    maxInFlightRequests: 1,
    // An idempotent producer retries until it succeeds: a limit could
    // leave a gap in the sequence numbers.
    retry: { retries: Number.MAX_SAFE_INTEGER, initialRetryTime: 50 },
    allowAutoTopicCreation: false,
    createPartitioner: () => {
      const partitioner = Partitioners.DefaultPartitioner()
      return args => {
        const p = partitioner(args)
        partitionOfKey.set(args.message.key, p)
        return p
      }
    },
  })
  await producer.connect()
  const partitionOf = msg => partitionOfKey.get(msg.key)

  const mid = first + Math.floor((last - first) / 2)
  const batch = []
  for (let i = first; i < mid; i++) {
    batch.push({ key: key(i), value: value(i) })
  }
  printSent(await producer.send({ topic, acks: -1, compression: CompressionTypes.GZIP, messages: batch }), batch, partitionOf)
  for (let i = mid; i < last; i++) {
    const one = [{ key: key(i), value: value(i) }]
    printSent(await producer.send({ topic, acks: -1, messages: one }), one, partitionOf)
  }
  await producer.disconnect()
}

// consume runs members members of groupId on topic until they have read and
// committed up to the topic's end offsets and a few more fetches brought
// nothing. With produceMore, the members first settle on a generation
// whose assignments split the partitions between them, then produceMore
// writes the records they are to read.
async function consume(kafka, topic, groupId, members, produceMore) {
  const admin = kafka.admin()
  await admin.connect()
  const offsets = await admin.fetchTopicOffsets(topic)
  // next and committed start at the group's committed offsets, or at the
  // start of the log for a partition without one.
  const lows = new Map(offsets.map(p => [p.partition, Number(p.low)]))
  const next = new Map()
  const committed = new Map()
  const [group] = await admin.fetchOffsets({ groupId, topics: [topic] })
  for (const p of group.partitions) {
    const o = Number(p.offset)
    next.set(p.partition, o >= 0 ? o : lows.get(p.partition))
    committed.set(p.partition, o >= 0 ? o : lows.get(p.partition))
  }
  let ends = null
  const reachedEnds = () =>
    ends !== null && [...ends].every(([p, end]) => next.get(p) >= end && committed.get(p) >= end)

  // settled resolves once the members' latest assignments are disjoint and
  // cover every partition, which makes them one generation's.
  const assignments = new Map()
  let settle
  const settled = new Promise(resolve => (settle = resolve))
  const checkSettled = () => {
    const all = [...assignments.values()].flat()
    if (assignments.size === members && all.length === offsets.length && new Set(all).size === all.length) {
      settle()
    }
  }

  let fetchesAtEnd = 0
  let finish
  let disconnecting = false
  const finished = new Promise(resolve => (finish = resolve))
  const consumers = []
  for (let member = 0; member < members; member++) {
    const consumer = kafka.consumer({
      groupId,
      sessionTimeout: 6000,
      heartbeatInterval: 100,
      maxWaitTimeInMs: 100,
      allowAutoTopicCreation: false,
    })
    consumers.push(consumer)
    consumer.on(consumer.events.GROUP_JOIN, e => {
      if (disconnecting) {
        // A member still stopping when another has left the group is told
        // to rebalance, and kafkajs's runner rejoins even as it stops: an
        // assignment nothing is consumed under, of a later generation
        // than the others' last.
        return
      }
      const assignment = e.payload.memberAssignment[topic] || []
      print({ joined: { member, memberId: e.payload.memberId, assignment } })
      assignments.set(member, assignment)
      checkSettled()
    })
    consumer.on(consumer.events.COMMIT_OFFSETS, e => {
      for (const t of e.payload.topics) {
        for (const p of t.partitions) {
          // kafkajs reports the partition as a string here.
          const partition = Number(p.partition)
          committed.set(partition, Number(p.offset))
          print({ committed: { member, partition, offset: Number(p.offset) } })
        }
      }
    })
    // A few fetches past the ends show that nothing more comes.
    consumer.on(consumer.events.FETCH, () => {
      if (reachedEnds() && ++fetchesAtEnd >= 3 * members) {
        finish()
      }
    })
    consumer.on(consumer.events.CRASH, e => {
      process.stderr.write(`kafkajs consumer ${member} crashed: ${e.payload.error}\n`)
      process.exit(1)
    })
    await consumer.connect()
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    await consumer.run({
      eachMessage: async ({ partition, message }) => {
        const offset = Number(message.offset)
        print({
          record: {
            member,
            partition,
            offset,
            key: message.key === null ? null : message.key.toString(),
            value: message.value === null ? null : message.value.toString(),
          },
        })
        next.set(partition, offset + 1)
      },
    })
  }
  if (produceMore) {
    await settled
    await produceMore()
  }
  ends = new Map((await admin.fetchTopicOffsets(topic)).map(p => [p.partition, Number(p.high)]))
  await admin.disconnect()
  await finished
  disconnecting = true
  await Promise.all(consumers.map(c => c.disconnect()))
}

async function main() {
  const [mode, broker, topic, ...rest] = process.argv.slice(2)
  const kafka = client(broker)
  switch (mode) {
    case 'produce':
      await createTopic(kafka, topic, Number(rest[0]))
      await produce(kafka, topic, Number(rest[1]), Number(rest[2]))
      break
    case 'consume':
      await consume(kafka, topic, rest[0], 1, null)
      break
    case 'group':
      await consume(kafka, topic, rest[0], Number(rest[3]), () => produce(kafka, topic, Number(rest[1]), Number(rest[2])))
      break
    default:
      throw new Error(`unknown mode ${mode}: want produce, consume or group`)
  }
}

// A hung client fails the run instead of hanging the test.
setTimeout(() => {
  process.stderr.write('check.js: no result after 60s\n')
  process.exit(2)
}, 60000).unref()

main().then(
  () => process.exit(0),
  err => {
    process.stderr.write(`check.js: ${err.stack || err}\n`)
    process.exit(1)
  }
)
