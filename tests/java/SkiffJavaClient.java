// Skiff test harness: the reference Java Kafka client (kafka-clients 4.3) driven from pytest.
//
// One program, several subcommands. Every result is printed to stdout as JSON, one object per
// line, each with a "type" field; diagnostics go to stderr. Exit status: 0 success, 1 failure
// (the last stderr line is then a JSON object {"type":"error",...}), 2 bad usage.
//
//   produce   --bootstrap H:P --topic T --partitions N --count C [--codec none|gzip|snappy|lz4|zstd]
//             [--acks 0|1|all] [--idempotent true|false] [--key-prefix k] [--headers]
//             [--value-size BYTES] [--prop k=v ...]
//   consume   --bootstrap H:P --topic T [--partitions N] --expect C [--group G] [--from-committed]
//             [--commit] [--timeout-ms MS] [--prop k=v ...]
//   admin     --bootstrap H:P create-topic T N [--rf R] [--config k=v ...] | delete-topic T
//             | list-topics | describe-topic T | describe-configs T | describe-cluster
//             | list-offsets T | list-groups | group-offsets G
//             | create-acl TYPE NAME PATTERN PRINCIPAL HOST OPERATION PERMISSION
//               (enum names as in org.apache.kafka.common.acl / .resource, e.g. TOPIC t LITERAL User:a * READ ALLOW)
//             | describe-acls TYPE NAME|- PATTERN   (a filter; "-" is any name; TYPE and PATTERN may be ANY)
//             | describe-topics T1,T2,... PAGE_LIMIT (describeTopics, partitionSizeLimitPerResponse)
//             | describe-log-dirs (every broker of describeCluster) | describe-producers T P
//             | elect-leaders PREFERRED|UNCLEAN T P | list-reassignments
//             | alter-reassignment T P BROKER[,BROKER...]|cancel
//   api-oracle [--kind response|request] [--show]   (reads "api_key api_version hex" lines on stdin)
//   group-member --bootstrap H:P --topic T --group G [--prop k=v ...]
//             (an interactive group consumer: one command per stdin line, one JSON answer per line;
//             see groupMember below)
//   txn-transform --bootstrap H:P --input T --output U --group G --transactional-id X
//             [--abort-every N] [--max-records N] [--batch N] [--assign] [--until-end] [--pause-before-commit R]
//             [--timeout-ms MS] [--prop [consumer.|producer.]k=v ...]
//             (exactly-once consume-transform-produce; see txnTransform below)
//
// Built and run by tests/support/java_client.py; see that module for the JSON formats.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.PartitionReassignment;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.message.FetchResponseData;
import org.apache.kafka.common.message.ProduceRequestData;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.protocol.ApiMessage;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.ObjectSerializationCache;
import org.apache.kafka.common.record.internal.MemoryRecords;
import org.apache.kafka.common.record.internal.MutableRecordBatch;
import org.apache.kafka.common.record.internal.Record;
import org.apache.kafka.common.requests.AbstractRequest;
import org.apache.kafka.common.requests.AbstractResponse;
import org.apache.kafka.common.requests.RequestAndSize;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.utils.BufferSupplier;
import org.apache.kafka.common.utils.CloseableIterator;

public final class SkiffJavaClient {

    /** Thrown for bad command lines: exit status 2. */
    static final class UsageError extends RuntimeException {
        private static final long serialVersionUID = 1L;

        UsageError(String message) {
            super(message);
        }
    }

    /** Thrown when the operation ran but did not succeed: exit status 1. */
    static final class Failure extends RuntimeException {
        private static final long serialVersionUID = 1L;

        Failure(String message) {
            super(message);
        }
    }

    public static void main(String[] argv) {
        int status;
        try {
            if (argv.length == 0) {
                throw new UsageError("usage: SkiffJavaClient produce|consume|admin|api-oracle ...");
            }
            Args args = new Args(Arrays.copyOfRange(argv, 1, argv.length));
            switch (argv[0]) {
                case "produce":
                    produce(args);
                    break;
                case "consume":
                    consume(args);
                    break;
                case "admin":
                    admin(args);
                    break;
                case "api-oracle":
                    apiOracle(args);
                    break;
                case "group-member":
                    groupMember(args);
                    break;
                case "txn-transform":
                    txnTransform(args);
                    break;
                default:
                    throw new UsageError("unknown subcommand: " + argv[0]);
            }
            status = 0;
        } catch (UsageError e) {
            reportError(e, "usage");
            status = 2;
        } catch (Throwable e) {
            reportError(unwrap(e), "failure");
            status = 1;
        }
        System.out.flush();
        System.err.flush();
        // Client threads can linger (e.g. a producer stuck on an unreachable broker): exit hard.
        Runtime.getRuntime().halt(status);
    }

    static Throwable unwrap(Throwable e) {
        while ((e instanceof ExecutionException || e instanceof java.util.concurrent.CompletionException)
                && e.getCause() != null) {
            e = e.getCause();
        }
        return e;
    }

    static void reportError(Throwable e, String kind) {
        StringWriter trace = new StringWriter();
        e.printStackTrace(new PrintWriter(trace));
        System.err.println(trace);
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("type", "error");
        out.put("kind", kind);
        out.put("class", e.getClass().getName());
        out.put("message", String.valueOf(e.getMessage()));
        System.err.println(Json.write(out));
    }

    static void emit(Map<String, Object> obj) {
        System.out.println(Json.write(obj));
    }

    static Map<String, Object> obj(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) {
            m.put((String) kv[i], kv[i + 1]);
        }
        return m;
    }

    // ------------------------------------------------------------------ produce

    static void produce(Args args) throws Exception {
        String bootstrap = args.required("--bootstrap");
        String topic = args.required("--topic");
        int partitions = args.intValue("--partitions", 1);
        int count = args.intValue("--count", 1);
        String codec = args.value("--codec", "none");
        String acks = args.value("--acks", "all");
        String idempotent = args.value("--idempotent", null);
        String keyPrefix = args.value("--key-prefix", "k");
        boolean headers = args.flag("--headers");
        int valueSize = args.intValue("--value-size", 0);
        args.checkNoPositionals();

        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.CLIENT_ID_CONFIG, "skiff-java-producer");
        props.put(ProducerConfig.ACKS_CONFIG, acks);
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        if (idempotent != null) {
            props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, idempotent);
        }
        props.putAll(args.props());

        final RecordMetadata[] metas = new RecordMetadata[count];
        final Exception[] errors = new Exception[count];
        final String[] keys = new String[count];
        final CountDownLatch done = new CountDownLatch(count);
        long start = System.nanoTime();
        KafkaProducer<byte[], byte[]> producer =
                new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer());
        try {
            for (int i = 0; i < count; i++) {
                final int index = i;
                keys[i] = keyPrefix + "-" + i;
                RecordHeaders hs = new RecordHeaders();
                if (headers) {
                    hs.add("idx", Integer.toString(i).getBytes(StandardCharsets.UTF_8));
                    hs.add("src", "skiff-java".getBytes(StandardCharsets.UTF_8));
                    hs.add("nil", null);
                }
                ProducerRecord<byte[], byte[]> rec = new ProducerRecord<>(
                        topic, i % partitions, null, keys[i].getBytes(StandardCharsets.UTF_8),
                        valueFor(i, valueSize), hs);
                producer.send(rec, (meta, exc) -> {
                    synchronized (metas) {
                        metas[index] = meta;
                        errors[index] = exc;
                    }
                    done.countDown();
                });
            }
            producer.flush();
            if (!done.await(60, TimeUnit.SECONDS)) {
                throw new Failure("timed out waiting for send callbacks");
            }
        } finally {
            producer.close(Duration.ofSeconds(10));
        }
        long elapsedMs = (System.nanoTime() - start) / 1_000_000;
        int failed = 0;
        String firstError = null;
        synchronized (metas) {
            for (int i = 0; i < count; i++) {
                Map<String, Object> line = obj("type", "ack", "index", i, "key", keys[i]);
                if (errors[i] != null) {
                    failed++;
                    String msg = errors[i].getClass().getName() + ": " + errors[i].getMessage();
                    if (firstError == null) {
                        firstError = msg;
                    }
                    line.put("partition", i % partitions);
                    line.put("error", msg);
                } else {
                    RecordMetadata m = metas[i];
                    line.put("partition", m.partition());
                    line.put("offset", m.hasOffset() ? m.offset() : -1L);
                    line.put("timestamp", m.hasTimestamp() ? m.timestamp() : -1L);
                }
                emit(line);
            }
        }
        emit(obj("type", "summary", "count", count, "acked", count - failed, "failed", failed,
                "elapsed_ms", elapsedMs, "first_error", firstError));
        if (failed > 0) {
            throw new Failure(failed + " of " + count + " sends failed; first: " + firstError);
        }
    }

    /** Deterministic value of record i: "v-<i>", padded with '.' up to size bytes if size > 0. */
    static byte[] valueFor(int i, int size) {
        String base = "v-" + i;
        if (size <= base.length()) {
            return base.getBytes(StandardCharsets.UTF_8);
        }
        StringBuilder sb = new StringBuilder(size);
        sb.append(base).append('-');
        while (sb.length() < size) {
            sb.append((char) ('a' + (sb.length() % 26)));
        }
        return sb.toString().getBytes(StandardCharsets.UTF_8);
    }

    // ------------------------------------------------------------------ consume

    static void consume(Args args) throws Exception {
        String bootstrap = args.required("--bootstrap");
        String topic = args.required("--topic");
        int partitions = args.intValue("--partitions", -1);
        int expect = args.intValue("--expect", 0);
        String group = args.value("--group", null);
        boolean fromCommitted = args.flag("--from-committed");
        boolean commit = args.flag("--commit");
        long timeoutMs = Long.parseLong(args.value("--timeout-ms", group == null ? "30000" : "60000"));
        args.checkNoPositionals();
        if ((fromCommitted || commit) && group == null) {
            throw new UsageError("--from-committed and --commit need --group");
        }

        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, "skiff-java-consumer");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        if (group != null) {
            props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        }
        props.putAll(args.props());

        long start = System.nanoTime();
        long deadline = start + timeoutMs * 1_000_000L;
        int received = 0;
        Map<Integer, Long> nextOffsets = new TreeMap<>();
        KafkaConsumer<byte[], byte[]> consumer =
                new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer());
        try {
            if (group == null) {
                List<TopicPartition> tps = new ArrayList<>();
                if (partitions < 0) {
                    consumer.partitionsFor(topic, Duration.ofMillis(timeoutMs))
                            .forEach(p -> tps.add(new TopicPartition(topic, p.partition())));
                } else {
                    for (int p = 0; p < partitions; p++) {
                        tps.add(new TopicPartition(topic, p));
                    }
                }
                consumer.assign(tps);
                consumer.seekToBeginning(tps);
            } else {
                consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                    @Override
                    public void onPartitionsRevoked(Collection<TopicPartition> parts) {}

                    @Override
                    public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                        if (!fromCommitted) {
                            consumer.seekToBeginning(parts);
                        }
                    }
                });
            }
            while (received < expect && System.nanoTime() < deadline) {
                ConsumerRecords<byte[], byte[]> recs = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<byte[], byte[]> r : recs) {
                    List<Object> hs = new ArrayList<>();
                    for (Header h : r.headers()) {
                        hs.add(Arrays.asList(h.key(), str(h.value())));
                    }
                    emit(obj("type", "record", "partition", r.partition(), "offset", r.offset(),
                            "key", str(r.key()), "value", str(r.value()),
                            "value_size", r.value() == null ? -1 : r.value().length, "headers", hs,
                            "timestamp", r.timestamp(), "timestamp_type", r.timestampType().toString(),
                            "leader_epoch", r.leaderEpoch().orElse(null)));
                    nextOffsets.put(r.partition(), r.offset() + 1);
                    received++;
                }
            }
            if (commit) {
                consumer.commitSync(Duration.ofMillis(timeoutMs));
            }
        } finally {
            consumer.close(CloseOptions.timeout(Duration.ofSeconds(5)));
        }
        Map<String, Object> next = new LinkedHashMap<>();
        nextOffsets.forEach((p, o) -> next.put(Integer.toString(p), o));
        emit(obj("type", "summary", "count", received, "expected", expect, "timed_out", received < expect,
                "elapsed_ms", (System.nanoTime() - start) / 1_000_000, "next_offsets", next));
        if (received < expect) {
            throw new Failure("received " + received + " of " + expect + " records within " + timeoutMs + " ms");
        }
    }

    static String str(byte[] b) {
        return b == null ? null : new String(b, StandardCharsets.UTF_8);
    }

    // ------------------------------------------------------------------ group-member

    /**
     * An interactive consumer in a group, driven line by line from stdin. It subscribes to --topic
     * (auto.offset.reset earliest and no auto commit unless --prop says otherwise), then answers
     * each command with exactly one JSON line on stdout: {"type": CMD, "ok": true, ...} or
     * {"type": "error", "ok": false, "command": ..., "class": ..., "message": ...}.
     *
     *   poll MS            one consumer.poll(MS): {"events": [...]} in the order they happened, each
     *                      {"type":"assigned"|"revoked"|"lost","partitions":[...]} (from the rebalance
     *                      listener) or {"type":"record","partition","offset","key","value"}
     *   assignment         {"partitions": [...]} (sorted)
     *   commit [P:O,...]   commitSync of those offsets (none given: of the consumed positions)
     *   committed          {"offsets": {"P": offset or null}} for every partition of the topic
     *   position           {"positions": {"P": offset}} for the assigned partitions
     *   pause P,... / resume P,...
     *   close              closes the consumer (leaving the group), answers, and exits
     *
     * Rebalance events that happen outside poll (e.g. during close) come in that answer's "events".
     */
    static void groupMember(Args args) throws Exception {
        String bootstrap = args.required("--bootstrap");
        String topic = args.required("--topic");
        String group = args.required("--group");
        args.checkNoPositionals();
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, "skiff-java-member");
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        props.putAll(args.props());
        final List<Object> events = new ArrayList<>();
        KafkaConsumer<byte[], byte[]> consumer =
                new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer());
        consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                events.add(obj("type", "revoked", "partitions", partitionList(parts)));
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                events.add(obj("type", "assigned", "partitions", partitionList(parts)));
            }

            @Override
            public void onPartitionsLost(Collection<TopicPartition> parts) {
                events.add(obj("type", "lost", "partitions", partitionList(parts)));
            }
        });
        emit(obj("type", "ready", "ok", true));
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        boolean closed = false;
        String line;
        while (!closed && (line = in.readLine()) != null) {
            line = line.trim();
            if (line.isEmpty()) {
                continue;
            }
            String[] parts = line.split("\\s+");
            String cmd = parts[0];
            String arg = parts.length > 1 ? parts[1] : null;
            Map<String, Object> out = obj("type", cmd, "ok", true);
            try {
                switch (cmd) {
                    case "poll": {
                        long ms = arg == null ? 100 : Long.parseLong(arg);
                        ConsumerRecords<byte[], byte[]> recs = consumer.poll(Duration.ofMillis(ms));
                        for (ConsumerRecord<byte[], byte[]> r : recs) {
                            events.add(obj("type", "record", "partition", r.partition(), "offset", r.offset(),
                                    "key", str(r.key()), "value", str(r.value())));
                        }
                        break;
                    }
                    case "assignment":
                        out.put("partitions", partitionList(consumer.assignment()));
                        break;
                    case "commit":
                        if (arg == null) {
                            consumer.commitSync();
                        } else {
                            Map<TopicPartition, OffsetAndMetadata> offs = new HashMap<>();
                            for (String po : arg.split(",")) {
                                String[] kv = po.split(":");
                                offs.put(new TopicPartition(topic, Integer.parseInt(kv[0])),
                                        new OffsetAndMetadata(Long.parseLong(kv[1])));
                            }
                            consumer.commitSync(offs);
                        }
                        break;
                    case "committed": {
                        Set<TopicPartition> tps = new java.util.HashSet<>();
                        for (org.apache.kafka.common.PartitionInfo pi : consumer.partitionsFor(topic)) {
                            tps.add(new TopicPartition(topic, pi.partition()));
                        }
                        Map<TopicPartition, OffsetAndMetadata> got = consumer.committed(tps);
                        Map<String, Object> offs = new TreeMap<>();
                        for (TopicPartition tp : tps) {
                            OffsetAndMetadata om = got.get(tp);
                            offs.put(Integer.toString(tp.partition()), om == null ? null : om.offset());
                        }
                        out.put("offsets", offs);
                        break;
                    }
                    case "position": {
                        Map<String, Object> pos = new TreeMap<>();
                        for (TopicPartition tp : consumer.assignment()) {
                            pos.put(Integer.toString(tp.partition()), consumer.position(tp));
                        }
                        out.put("positions", pos);
                        break;
                    }
                    case "pause":
                    case "resume": {
                        List<TopicPartition> tps = new ArrayList<>();
                        for (String p : (arg == null ? "" : arg).split(",")) {
                            if (!p.isEmpty()) {
                                tps.add(new TopicPartition(topic, Integer.parseInt(p)));
                            }
                        }
                        if (cmd.equals("pause")) {
                            consumer.pause(tps);
                        } else {
                            consumer.resume(tps);
                        }
                        break;
                    }
                    case "close":
                        consumer.close(CloseOptions.timeout(Duration.ofSeconds(10)));
                        closed = true;
                        break;
                    default:
                        throw new UsageError("unknown group-member command: " + cmd);
                }
            } catch (Exception e) {
                Throwable t = unwrap(e);
                out = obj("type", "error", "ok", false, "command", line, "class", t.getClass().getName(),
                        "message", String.valueOf(t.getMessage()));
            }
            out.put("events", new ArrayList<>(events));
            events.clear();
            emit(out);
            System.out.flush();
        }
        if (!closed) {
            consumer.close(CloseOptions.timeout(Duration.ofSeconds(10)));
        }
    }

    static List<Object> partitionList(Collection<TopicPartition> parts) {
        List<Object> out = new ArrayList<>();
        new TreeSet<>(parts.stream().map(TopicPartition::partition).toList()).forEach(out::add);
        return out;
    }

    // ------------------------------------------------------------------ txn-transform

    /**
     * Consume-transform-produce with exactly-once semantics, as the Kafka documentation writes it:
     * a read_committed consumer of --input (in group --group: subscribed, or with --assign every
     * partition assigned by hand), a transactional producer (--transactional-id) writing to
     * --output. One transaction per poll (at most --batch records): each input record (key K,
     * value V) becomes one output record (key K, value "T-" + V, headers src-partition and
     * src-offset), then sendOffsetsToTransaction(next offsets, consumer.groupMetadata()) and
     * commitTransaction. With --abort-every N, every Nth round (1-based) is flushed and aborted instead and
     * the consumer seeks back to where that round began, so the next round processes the same
     * records again. With --pause-before-commit R, round R prints {"type":"paused"} once its
     * records are written (flushed) and its offsets sent, and waits for one line on stdin before it commits (to let a second
     * instance fence this one). Stops once --max-records records are committed, or with
     * --until-end at the first empty poll once every assigned partition's position is at its end
     * offset (or fails after --timeout-ms). JSON lines on stdout:
     *
     *   {"type":"ready","transactional_id"}              after initTransactions
     *   {"type":"round","round","outcome":"committed"|"aborted","count","committed_total",
     *    "keys":[...],"offsets":{"P":next}}              after each round's commit or abort
     *   {"type":"paused","round","count"}
     *   {"type":"fenced","round","class","cause"}        a ProducerFencedException (then exit 1)
     *   {"type":"summary","committed_total","rounds","aborted_rounds"}
     */
    static void txnTransform(Args args) throws Exception {
        String bootstrap = args.required("--bootstrap");
        String input = args.required("--input");
        String output = args.required("--output");
        String group = args.required("--group");
        String txnId = args.required("--transactional-id");
        int abortEvery = args.intValue("--abort-every", 0);
        int maxRecords = args.intValue("--max-records", Integer.MAX_VALUE);
        int batch = args.intValue("--batch", 50);
        int pauseBeforeCommit = args.intValue("--pause-before-commit", -1);
        boolean assign = args.flag("--assign");
        boolean untilEnd = args.flag("--until-end");
        long timeoutMs = Long.parseLong(args.value("--timeout-ms", "120000"));
        args.checkNoPositionals();

        Properties cprops = new Properties();
        cprops.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cprops.put(ConsumerConfig.CLIENT_ID_CONFIG, "skiff-java-txn-consumer");
        cprops.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cprops.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        cprops.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cprops.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cprops.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, Integer.toString(batch));
        cprops.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        Properties pprops = new Properties();
        pprops.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pprops.put(ProducerConfig.CLIENT_ID_CONFIG, "skiff-java-txn-producer");
        pprops.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        pprops.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        pprops.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        pprops.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
        pprops.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "60000");
        // --prop consumer.X=v / producer.X=v go to one client; a bare --prop X=v to both
        for (Map.Entry<String, String> e : args.multiKv("--prop").entrySet()) {
            String k = e.getKey();
            if (k.startsWith("consumer.")) {
                cprops.put(k.substring("consumer.".length()), e.getValue());
            } else if (k.startsWith("producer.")) {
                pprops.put(k.substring("producer.".length()), e.getValue());
            } else {
                cprops.put(k, e.getValue());
                pprops.put(k, e.getValue());
            }
        }

        long deadline = System.nanoTime() + timeoutMs * 1_000_000L;
        int round = 0;
        int abortedRounds = 0;
        int committedTotal = 0;
        BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        KafkaProducer<byte[], byte[]> producer =
                new KafkaProducer<>(pprops, new ByteArraySerializer(), new ByteArraySerializer());
        KafkaConsumer<byte[], byte[]> consumer =
                new KafkaConsumer<>(cprops, new ByteArrayDeserializer(), new ByteArrayDeserializer());
        try {
            producer.initTransactions();
            emit(obj("type", "ready", "transactional_id", txnId));
            System.out.flush();
            if (assign) {
                List<TopicPartition> tps = new ArrayList<>();
                consumer.partitionsFor(input, Duration.ofMillis(timeoutMs))
                        .forEach(p -> tps.add(new TopicPartition(input, p.partition())));
                consumer.assign(tps);
            } else {
                consumer.subscribe(List.of(input));
            }
            while (committedTotal < maxRecords) {
                if (System.nanoTime() > deadline) {
                    throw new Failure("committed " + committedTotal + " of " + maxRecords + " records within "
                            + timeoutMs + " ms");
                }
                ConsumerRecords<byte[], byte[]> recs = consumer.poll(Duration.ofMillis(200));
                if (recs.isEmpty()) {
                    if (untilEnd && caughtUp(consumer)) {
                        break;
                    }
                    continue;
                }
                round++;
                Map<TopicPartition, Long> first = new HashMap<>();
                Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
                List<Object> keys = new ArrayList<>();
                try {
                    producer.beginTransaction();
                    for (ConsumerRecord<byte[], byte[]> r : recs) {
                        TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                        first.putIfAbsent(tp, r.offset());
                        next.put(tp, new OffsetAndMetadata(r.offset() + 1));
                        keys.add(str(r.key()));
                        RecordHeaders hs = new RecordHeaders();
                        hs.add("src-partition", Integer.toString(r.partition()).getBytes(StandardCharsets.UTF_8));
                        hs.add("src-offset", Long.toString(r.offset()).getBytes(StandardCharsets.UTF_8));
                        byte[] v = r.value() == null ? null : ("T-" + str(r.value())).getBytes(StandardCharsets.UTF_8);
                        producer.send(new ProducerRecord<>(output, null, null, r.key(), v, hs));
                    }
                    producer.sendOffsetsToTransaction(next, consumer.groupMetadata());
                    if (round == pauseBeforeCommit) {
                        producer.flush();  // the round's records are in the log before the pause
                        emit(obj("type", "paused", "round", round, "count", recs.count()));
                        System.out.flush();
                        stdin.readLine();
                    }
                    boolean abort = abortEvery > 0 && round % abortEvery == 0;
                    if (abort) {
                        // Written first, so the abort has records in the log to hide (abortTransaction
                        // alone drops the batches not sent yet).
                        producer.flush();
                        producer.abortTransaction();
                        abortedRounds++;
                        first.forEach(consumer::seek);
                    } else {
                        producer.commitTransaction();
                        committedTotal += recs.count();
                    }
                    Map<String, Object> offs = new TreeMap<>();
                    next.forEach((tp, om) -> offs.put(Integer.toString(tp.partition()), om.offset()));
                    emit(obj("type", "round", "round", round, "outcome", abort ? "aborted" : "committed",
                            "count", recs.count(), "committed_total", committedTotal, "keys", keys,
                            "offsets", offs));
                    System.out.flush();
                } catch (Exception e) {
                    Throwable fenced = unwrap(e);
                    while (fenced != null && !(fenced instanceof ProducerFencedException)) {
                        fenced = fenced.getCause();
                    }
                    if (fenced == null) {
                        throw e;
                    }
                    emit(obj("type", "fenced", "round", round, "class", e.getClass().getName(),
                            "cause", fenced.getClass().getName(), "message", String.valueOf(fenced.getMessage())));
                    System.out.flush();
                    throw e;
                }
            }
        } finally {
            consumer.close(CloseOptions.timeout(Duration.ofSeconds(5)));
            producer.close(Duration.ofSeconds(5));
        }
        emit(obj("type", "summary", "committed_total", committedTotal, "rounds", round,
                "aborted_rounds", abortedRounds));
    }

    /** Every assigned partition's position is at its end offset (the LSO: read_committed). */
    static boolean caughtUp(KafkaConsumer<byte[], byte[]> consumer) {
        Set<TopicPartition> tps = consumer.assignment();
        if (tps.isEmpty()) {
            return false;
        }
        Map<TopicPartition, Long> ends = consumer.endOffsets(tps);
        for (TopicPartition tp : tps) {
            if (consumer.position(tp) < ends.get(tp)) {
                return false;
            }
        }
        return true;
    }

    // ------------------------------------------------------------------ admin

    static void admin(Args args) throws Exception {
        String bootstrap = args.required("--bootstrap");
        int timeoutMs = args.intValue("--timeout-ms", 30000);
        int rf = args.intValue("--rf", -1);
        Map<String, String> configs = args.multiKv("--config");
        List<String> pos = args.positionals();
        if (pos.isEmpty()) {
            throw new UsageError("admin needs an operation");
        }
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, "skiff-java-admin");
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, Integer.toString(Math.min(timeoutMs, 15000)));
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, Integer.toString(timeoutMs));
        props.putAll(args.props());
        String op = pos.get(0);
        try (Admin admin = Admin.create(props)) {
            switch (op) {
                case "create-topic": {
                    need(pos, 3, "create-topic TOPIC PARTITIONS");
                    String topic = pos.get(1);
                    int n = Integer.parseInt(pos.get(2));
                    NewTopic nt = new NewTopic(topic, Optional.of(n),
                            rf < 0 ? Optional.empty() : Optional.of((short) rf));
                    if (!configs.isEmpty()) {
                        nt.configs(configs);
                    }
                    CreateTopicsResult res = admin.createTopics(List.of(nt));
                    res.all().get();
                    String id = null;
                    try {
                        Uuid uuid = res.topicId(topic).get();
                        id = uuid == null ? null : uuid.toString();
                    } catch (ExecutionException e) {
                        id = null;
                    }
                    emit(obj("type", "created", "topic", topic, "partitions", n, "topic_id", id));
                    break;
                }
                case "delete-topic": {
                    need(pos, 2, "delete-topic TOPIC");
                    admin.deleteTopics(List.of(pos.get(1))).all().get();
                    emit(obj("type", "deleted", "topic", pos.get(1)));
                    break;
                }
                case "list-topics": {
                    Set<String> names = admin.listTopics(new ListTopicsOptions().listInternal(true)).names().get();
                    emit(obj("type", "topics", "topics", new ArrayList<>(new TreeSet<>(names))));
                    break;
                }
                case "describe-topic": {
                    need(pos, 2, "describe-topic TOPIC");
                    TopicDescription d = admin.describeTopics(List.of(pos.get(1))).allTopicNames().get()
                            .get(pos.get(1));
                    List<Object> parts = new ArrayList<>();
                    for (TopicPartitionInfo p : d.partitions()) {
                        parts.add(obj("partition", p.partition(), "leader", p.leader() == null ? null : p.leader().id(),
                                "replicas", nodeIds(p.replicas()), "isr", nodeIds(p.isr())));
                    }
                    emit(obj("type", "topic", "topic", d.name(), "topic_id",
                            d.topicId() == null ? null : d.topicId().toString(), "internal", d.isInternal(),
                            "partitions", parts));
                    break;
                }
                case "describe-configs": {
                    need(pos, 2, "describe-configs TOPIC");
                    ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, pos.get(1));
                    Config c = admin.describeConfigs(List.of(r)).all().get().get(r);
                    Map<String, Object> entries = new TreeMap<>();
                    for (ConfigEntry e : c.entries()) {
                        entries.put(e.name(), obj("value", e.value(), "source", String.valueOf(e.source()),
                                "default", e.isDefault(), "read_only", e.isReadOnly(),
                                "sensitive", e.isSensitive()));
                    }
                    emit(obj("type", "configs", "resource", "topic", "name", pos.get(1), "configs", entries));
                    break;
                }
                case "alter-scram": {
                    need(pos, 5, "alter-scram USER MECHANISM ITERATIONS PASSWORD");
                    ScramCredentialInfo info = new ScramCredentialInfo(
                            ScramMechanism.fromMechanismName(pos.get(2)), Integer.parseInt(pos.get(3)));
                    admin.alterUserScramCredentials(
                            List.of(new UserScramCredentialUpsertion(pos.get(1), info, pos.get(4)))).all().get();
                    emit(obj("type", "scram-altered", "user", pos.get(1)));
                    break;
                }
                case "describe-scram": {
                    need(pos, 2, "describe-scram USER");
                    List<Object> creds = new ArrayList<>();
                    for (ScramCredentialInfo c : admin.describeUserScramCredentials(List.of(pos.get(1)))
                            .description(pos.get(1)).get().credentialInfos()) {
                        creds.add(obj("mechanism", c.mechanism().mechanismName(), "iterations", c.iterations()));
                    }
                    emit(obj("type", "scram", "user", pos.get(1), "credentials", creds));
                    break;
                }
                case "describe-cluster": {
                    DescribeClusterResult d = admin.describeCluster();
                    List<Object> nodes = new ArrayList<>();
                    for (Node n : d.nodes().get()) {
                        nodes.add(node(n));
                    }
                    Node controller = d.controller().get();
                    emit(obj("type", "cluster", "cluster_id", d.clusterId().get(),
                            "controller", controller == null || controller.isEmpty() ? null : node(controller),
                            "nodes", nodes));
                    break;
                }
                case "list-offsets": {
                    need(pos, 2, "list-offsets TOPIC");
                    String topic = pos.get(1);
                    TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
                    Map<TopicPartition, OffsetSpec> earliest = new HashMap<>();
                    Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
                    for (TopicPartitionInfo p : d.partitions()) {
                        earliest.put(new TopicPartition(topic, p.partition()), OffsetSpec.earliest());
                        latest.put(new TopicPartition(topic, p.partition()), OffsetSpec.latest());
                    }
                    Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> e =
                            admin.listOffsets(earliest).all().get();
                    Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> l =
                            admin.listOffsets(latest).all().get();
                    List<Object> parts = new ArrayList<>();
                    for (TopicPartitionInfo p : d.partitions()) {
                        TopicPartition tp = new TopicPartition(topic, p.partition());
                        parts.add(obj("partition", p.partition(), "earliest", e.get(tp).offset(),
                                "latest", l.get(tp).offset()));
                    }
                    emit(obj("type", "offsets", "topic", topic, "partitions", parts));
                    break;
                }
                case "list-groups": {
                    List<String> groups = new ArrayList<>();
                    for (GroupListing g : admin.listGroups().all().get()) {
                        groups.add(g.groupId());
                    }
                    groups.sort(null);
                    emit(obj("type", "groups", "groups", groups));
                    break;
                }
                case "group-offsets": {
                    need(pos, 2, "group-offsets GROUP");
                    Map<TopicPartition, OffsetAndMetadata> offs =
                            admin.listConsumerGroupOffsets(pos.get(1)).partitionsToOffsetAndMetadata().get();
                    List<Object> out = new ArrayList<>();
                    List<TopicPartition> tps = new ArrayList<>(offs.keySet());
                    tps.sort((a, b) -> a.topic().equals(b.topic())
                            ? Integer.compare(a.partition(), b.partition()) : a.topic().compareTo(b.topic()));
                    for (TopicPartition tp : tps) {
                        OffsetAndMetadata om = offs.get(tp);
                        out.add(obj("topic", tp.topic(), "partition", tp.partition(),
                                "offset", om == null ? null : om.offset(),
                                "metadata", om == null ? null : om.metadata()));
                    }
                    emit(obj("type", "group_offsets", "group", pos.get(1), "offsets", out));
                    break;
                }
                case "create-acl": {
                    need(pos, 8, "create-acl TYPE NAME PATTERN PRINCIPAL HOST OPERATION PERMISSION");
                    AclBinding binding = new AclBinding(
                            new ResourcePattern(ResourceType.valueOf(pos.get(1)), pos.get(2),
                                    PatternType.valueOf(pos.get(3))),
                            new AccessControlEntry(pos.get(4), pos.get(5), AclOperation.valueOf(pos.get(6)),
                                    AclPermissionType.valueOf(pos.get(7))));
                    admin.createAcls(List.of(binding)).all().get();
                    emit(obj("type", "acl_created", "acl", aclObj(binding)));
                    break;
                }
                case "describe-acls": {
                    need(pos, 4, "describe-acls TYPE NAME|- PATTERN");
                    String name = "-".equals(pos.get(2)) ? null : pos.get(2);
                    AclBindingFilter filter = new AclBindingFilter(
                            new ResourcePatternFilter(ResourceType.valueOf(pos.get(1)), name,
                                    PatternType.valueOf(pos.get(3))),
                            AccessControlEntryFilter.ANY);
                    List<Object> acls = new ArrayList<>();
                    for (AclBinding b : admin.describeAcls(filter).values().get()) {
                        acls.add(aclObj(b));
                    }
                    emit(obj("type", "acls", "acls", acls));
                    break;
                }
                case "alter-quota": {
                    need(pos, 4, "alter-quota TYPE=NAME[,TYPE=<default>] KEY VALUE|remove");
                    admin.alterClientQuotas(List.of(new org.apache.kafka.common.quota.ClientQuotaAlteration(
                            new org.apache.kafka.common.quota.ClientQuotaEntity(quotaEntity(pos.get(1))),
                            List.of(new org.apache.kafka.common.quota.ClientQuotaAlteration.Op(pos.get(2),
                                    "remove".equals(pos.get(3)) ? null : Double.valueOf(pos.get(3)))))))
                            .all().get();
                    emit(obj("type", "quota_altered"));
                    break;
                }
                case "describe-quotas": {
                    if (pos.size() < 2) {
                        throw new UsageError("usage: admin describe-quotas strict|loose [TYPE=NAME|TYPE=<default>|TYPE=*]...");
                    }
                    List<org.apache.kafka.common.quota.ClientQuotaFilterComponent> parts = new ArrayList<>();
                    for (String c : pos.subList(2, pos.size())) {
                        String[] kv = c.split("=", 2);
                        parts.add("*".equals(kv[1]) ? org.apache.kafka.common.quota.ClientQuotaFilterComponent.ofEntityType(kv[0])
                                : "<default>".equals(kv[1]) ? org.apache.kafka.common.quota.ClientQuotaFilterComponent.ofDefaultEntity(kv[0])
                                : org.apache.kafka.common.quota.ClientQuotaFilterComponent.ofEntity(kv[0], kv[1]));
                    }
                    org.apache.kafka.common.quota.ClientQuotaFilter filter = "strict".equals(pos.get(1))
                            ? org.apache.kafka.common.quota.ClientQuotaFilter.containsOnly(parts)
                            : org.apache.kafka.common.quota.ClientQuotaFilter.contains(parts);
                    List<Object> entries = new ArrayList<>();
                    for (Map.Entry<org.apache.kafka.common.quota.ClientQuotaEntity, Map<String, Double>> e
                            : admin.describeClientQuotas(filter).entities().get().entrySet()) {
                        Map<String, Object> entity = new LinkedHashMap<>();
                        for (Map.Entry<String, String> part : new java.util.TreeMap<>(e.getKey().entries()).entrySet()) {
                            entity.put(part.getKey(), part.getValue() == null ? "<default>" : part.getValue());
                        }
                        entries.add(obj("entity", entity, "values", new java.util.TreeMap<>(e.getValue())));
                    }
                    emit(obj("type", "quotas", "entries", entries));
                    break;
                }
                default:
                    if (!adminTools(admin, op, pos)) {
                        throw new UsageError("unknown admin operation: " + op);
                    }
            }
        }
    }

    /** The admin calls that tools make first (issue 23): describe topics, log dirs, producers;
     *  elections and reassignments. Returns false for an operation it does not know. */
    static boolean adminTools(Admin admin, String op, List<String> pos) throws Exception {
        switch (op) {
            case "describe-topics": {
                need(pos, 3, "describe-topics T1,T2,... PAGE_LIMIT");
                List<String> names = Arrays.asList(pos.get(1).split(","));
                DescribeTopicsOptions opts = new DescribeTopicsOptions()
                        .partitionSizeLimitPerResponse(Integer.parseInt(pos.get(2)))
                        .includeAuthorizedOperations(true);
                Map<String, TopicDescription> ds = admin.describeTopics(names, opts).allTopicNames().get();
                List<Object> topics = new ArrayList<>();
                for (String name : new TreeSet<>(ds.keySet())) {
                    TopicDescription d = ds.get(name);
                    List<Object> parts = new ArrayList<>();
                    for (TopicPartitionInfo p : d.partitions()) {
                        parts.add(obj("partition", p.partition(), "leader", p.leader() == null ? null : p.leader().id(),
                                "replicas", nodeIds(p.replicas()), "isr", nodeIds(p.isr())));
                    }
                    topics.add(obj("topic", name, "topic_id", d.topicId().toString(), "internal", d.isInternal(),
                            "operations", d.authorizedOperations() == null ? null : d.authorizedOperations().size(),
                            "partitions", parts));
                }
                emit(obj("type", "topics", "topics", topics));
                return true;
            }
            case "describe-log-dirs": {
                List<Integer> ids = new ArrayList<>();
                for (Node n : admin.describeCluster().nodes().get()) {
                    ids.add(n.id());
                }
                Map<Integer, Map<String, LogDirDescription>> all = admin.describeLogDirs(ids).allDescriptions().get();
                List<Object> brokers = new ArrayList<>();
                for (Integer id : new TreeSet<>(all.keySet())) {
                    List<Object> dirs = new ArrayList<>();
                    for (Map.Entry<String, LogDirDescription> dir : all.get(id).entrySet()) {
                        List<Object> replicas = new ArrayList<>();
                        for (Map.Entry<TopicPartition, ReplicaInfo> r : dir.getValue().replicaInfos().entrySet()) {
                            replicas.add(obj("topic", r.getKey().topic(), "partition", r.getKey().partition(),
                                    "size", r.getValue().size(), "offset_lag", r.getValue().offsetLag(),
                                    "future", r.getValue().isFuture()));
                        }
                        LogDirDescription d = dir.getValue();
                        dirs.add(obj("path", dir.getKey(), "error", d.error() == null ? null : d.error().getClass().getSimpleName(),
                                "total_bytes", d.totalBytes().isPresent() ? d.totalBytes().getAsLong() : null,
                                "usable_bytes", d.usableBytes().isPresent() ? d.usableBytes().getAsLong() : null,
                                "replicas", replicas));
                    }
                    brokers.add(obj("broker", id, "log_dirs", dirs));
                }
                emit(obj("type", "log_dirs", "brokers", brokers));
                return true;
            }
            case "describe-groups": {
                need(pos, 2, "describe-groups G1,G2,...");
                List<String> ids = Arrays.asList(pos.get(1).split(","));
                Map<String, ConsumerGroupDescription> ds = admin.describeConsumerGroups(ids).all().get();
                List<Object> groups = new ArrayList<>();
                for (String id : new TreeSet<>(ds.keySet())) {
                    ConsumerGroupDescription d = ds.get(id);
                    List<Object> members = new ArrayList<>();
                    for (MemberDescription m : d.members()) {
                        List<Object> assigned = new ArrayList<>();
                        for (TopicPartition tp : m.assignment().topicPartitions()) {
                            assigned.add(obj("topic", tp.topic(), "partition", tp.partition()));
                        }
                        members.add(obj("member_id", m.consumerId(), "client_id", m.clientId(),
                                "assigned", assigned.size(),
                                "epoch", m.memberEpoch().isPresent() ? m.memberEpoch().get() : null));
                    }
                    groups.add(obj("group", id, "state", d.groupState().toString(), "type", d.type().toString(),
                            "assignor", d.partitionAssignor(),
                            "epoch", d.groupEpoch().isPresent() ? d.groupEpoch().get() : null,
                            "coordinator", d.coordinator() == null ? null : d.coordinator().id(),
                            "members", members));
                }
                emit(obj("type", "groups", "groups", groups));
                return true;
            }
            case "describe-producers": {
                need(pos, 3, "describe-producers TOPIC PARTITION");
                TopicPartition tp = new TopicPartition(pos.get(1), Integer.parseInt(pos.get(2)));
                List<Object> producers = new ArrayList<>();
                for (ProducerState s : admin.describeProducers(List.of(tp)).partitionResult(tp).get().activeProducers()) {
                    producers.add(obj("producer_id", s.producerId(), "epoch", s.producerEpoch(),
                            "last_sequence", s.lastSequence(), "last_timestamp", s.lastTimestamp(),
                            "coordinator_epoch", s.coordinatorEpoch().isPresent() ? s.coordinatorEpoch().getAsInt() : null,
                            "txn_start_offset", s.currentTransactionStartOffset().isPresent()
                                    ? s.currentTransactionStartOffset().getAsLong() : null));
                }
                emit(obj("type", "producers", "topic", tp.topic(), "partition", tp.partition(), "producers", producers));
                return true;
            }
            case "elect-leaders": {
                need(pos, 4, "elect-leaders PREFERRED|UNCLEAN TOPIC PARTITION");
                TopicPartition tp = new TopicPartition(pos.get(2), Integer.parseInt(pos.get(3)));
                Map<TopicPartition, Optional<Throwable>> res =
                        admin.electLeaders(ElectionType.valueOf(pos.get(1)), Set.of(tp)).partitions().get();
                Optional<Throwable> err = res.get(tp);
                emit(obj("type", "election", "topic", tp.topic(), "partition", tp.partition(),
                        "error", err == null || err.isEmpty() ? null : err.get().getClass().getSimpleName()));
                return true;
            }
            case "list-reassignments": {
                Map<TopicPartition, PartitionReassignment> rs = admin.listPartitionReassignments().reassignments().get();
                List<Object> out = new ArrayList<>();
                for (TopicPartition tp : rs.keySet()) {
                    out.add(obj("topic", tp.topic(), "partition", tp.partition()));
                }
                emit(obj("type", "reassignments", "reassignments", out));
                return true;
            }
            case "alter-reassignment": {
                need(pos, 4, "alter-reassignment TOPIC PARTITION BROKER[,BROKER...]|cancel");
                TopicPartition tp = new TopicPartition(pos.get(1), Integer.parseInt(pos.get(2)));
                Optional<NewPartitionReassignment> target = Optional.empty();
                if (!"cancel".equals(pos.get(3))) {
                    List<Integer> replicas = new ArrayList<>();
                    for (String b : pos.get(3).split(",")) {
                        replicas.add(Integer.parseInt(b));
                    }
                    target = Optional.of(new NewPartitionReassignment(replicas));
                }
                String error = null;
                try {
                    admin.alterPartitionReassignments(Map.of(tp, target)).all().get();
                } catch (ExecutionException e) {
                    error = e.getCause().getClass().getSimpleName();
                }
                emit(obj("type", "reassignment", "topic", tp.topic(), "partition", tp.partition(), "error", error));
                return true;
            }
            default:
                return false;
        }
    }

    /** "user=alice,client-id=<default>" as a quota entity's map (null names the default). */
    static Map<String, String> quotaEntity(String text) {
        Map<String, String> entity = new HashMap<>();
        for (String part : text.split(",")) {
            String[] kv = part.split("=", 2);
            entity.put(kv[0], "<default>".equals(kv[1]) ? null : kv[1]);
        }
        return entity;
    }

    static Map<String, Object> aclObj(AclBinding b) {
        return obj("resource_type", b.pattern().resourceType().name(), "name", b.pattern().name(),
                "pattern", b.pattern().patternType().name(), "principal", b.entry().principal(),
                "host", b.entry().host(), "operation", b.entry().operation().name(),
                "permission", b.entry().permissionType().name());
    }

    static void need(List<String> pos, int n, String usage) {
        if (pos.size() != n) {
            throw new UsageError("usage: admin " + usage);
        }
    }

    static List<Object> nodeIds(List<Node> nodes) {
        List<Object> ids = new ArrayList<>();
        for (Node n : nodes) {
            ids.add(n.id());
        }
        return ids;
    }

    static Map<String, Object> node(Node n) {
        return obj("id", n.id(), "host", n.host(), "port", n.port(), "rack", n.rack());
    }

    // ------------------------------------------------------------------ api-oracle

    /**
     * Reads lines "API_KEY API_VERSION HEX" (HEX: the body after the size prefix and the header) and
     * parses each with Kafka's own classes. ok = parsed and every byte consumed. roundtrip = writing
     * the parsed message back at the same version gives the same bytes.
     */
    static void apiOracle(Args args) throws Exception {
        String kind = args.value("--kind", "response");
        boolean show = args.flag("--show");
        args.checkNoPositionals();
        if (!kind.equals("response") && !kind.equals("request")) {
            throw new UsageError("--kind must be response or request");
        }
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        int lineNo = 0;
        int bad = 0;
        while ((line = in.readLine()) != null) {
            lineNo++;
            line = line.trim();
            if (line.isEmpty() || line.startsWith("#")) {
                continue;
            }
            Map<String, Object> out = oracleLine(lineNo, line, kind, show);
            if (!Boolean.TRUE.equals(out.get("ok"))) {
                bad++;
            }
            emit(out);
            System.out.flush();
        }
        emit(obj("type", "summary", "lines", lineNo, "failed", bad));
    }

    static Map<String, Object> oracleLine(int lineNo, String line, String kind, boolean show) {
        Map<String, Object> out = obj("type", "oracle", "line", lineNo);
        String[] parts = line.split("\\s+");
        if (parts.length < 2 || parts.length > 3) {
            out.put("ok", false);
            out.put("error", "malformed input line: expected 'api_key api_version hex'");
            return out;
        }
        int key;
        short version;
        byte[] body;
        try {
            key = Integer.parseInt(parts[0]);
            version = Short.parseShort(parts[1]);
            body = hex(parts.length == 3 ? parts[2] : "");
        } catch (RuntimeException e) {
            out.put("ok", false);
            out.put("error", "malformed input line: " + e);
            return out;
        }
        out.put("api_key", key);
        out.put("api_version", (int) version);
        out.put("size", body.length);
        if (!ApiKeys.hasId(key)) {
            out.put("ok", false);
            out.put("unsupported_by_oracle", true);
            out.put("error", "unknown api key " + key);
            return out;
        }
        ApiKeys api = ApiKeys.forId(key);
        out.put("api_name", api.name);
        out.put("oracle_versions", Arrays.asList((int) api.oldestVersion(), (int) api.latestVersion(true)));
        if (!api.isVersionSupported(version)) {
            out.put("ok", false);
            out.put("unsupported_by_oracle", true);
            out.put("error", api.name + " v" + version + " is not supported by kafka-clients "
                    + "(supports v" + api.oldestVersion() + "..v" + api.latestVersion(true) + ")");
            return out;
        }
        ByteBufferAccessor acc = new ByteBufferAccessor(ByteBuffer.wrap(body));
        ApiMessage data;
        try {
            if (kind.equals("response")) {
                AbstractResponse resp = AbstractResponse.parseResponse(api, acc, version);
                data = resp.data();
            } else {
                RequestAndSize rs = AbstractRequest.parseRequest(api, version, acc);
                data = rs.request.data();
            }
        } catch (Throwable e) {
            out.put("ok", false);
            out.put("error", e.getClass().getName() + ": " + e.getMessage());
            return out;
        }
        int remaining = acc.remaining();
        out.put("remaining", remaining);
        out.put("unknown_tagged_fields", data.unknownTaggedFields().size());
        if (remaining != 0) {
            out.put("ok", false);
            out.put("error", remaining + " trailing byte(s) after the " + api.name + " v" + version + " " + kind);
        } else {
            out.put("ok", true);
            out.put("error", null);
        }
        String recordsError = checkRecords(data, out, show);
        if (recordsError != null) {
            out.put("ok", false);
            out.put("error", recordsError);
        }
        try {
            ObjectSerializationCache cache = new ObjectSerializationCache();
            int size = data.size(cache, version);
            ByteBuffer buf = ByteBuffer.allocate(size);
            data.write(new ByteBufferAccessor(buf), cache, version);
            byte[] again = buf.array();
            int consumed = body.length - remaining;
            int diff = -1;
            for (int i = 0; i < Math.max(again.length, consumed); i++) {
                if (i >= again.length || i >= consumed || again[i] != body[i]) {
                    diff = i;
                    break;
                }
            }
            out.put("roundtrip", diff < 0);
            if (diff >= 0) {
                out.put("roundtrip_diff_at", diff);
                out.put("roundtrip_size", again.length);
            }
        } catch (Throwable e) {
            out.put("roundtrip", false);
            out.put("roundtrip_error", e.getClass().getName() + ": " + e.getMessage());
        }
        if (show) {
            out.put("data", data.toString());
        }
        return out;
    }

    /**
     * The record batches inside a Fetch response or a Produce request are opaque bytes to the
     * message parser: check each batch's CRC and decode every record (decompressing). A partial
     * batch at the end of a fetched partition is legal and skipped, as the consumer does. Adds
     * "batches" and "records" counts (and, with --show, "batch_offsets": [topic, partition,
     * base offset, last offset] per batch); returns an error message or null.
     */
    static String checkRecords(ApiMessage data, Map<String, Object> out, boolean show) {
        List<Object[]> sets = new ArrayList<>();
        if (data instanceof FetchResponseData) {
            for (FetchResponseData.FetchableTopicResponse t : ((FetchResponseData) data).responses()) {
                String name = t.topic() == null || t.topic().isEmpty() ? String.valueOf(t.topicId()) : t.topic();
                for (FetchResponseData.PartitionData p : t.partitions()) {
                    sets.add(new Object[] {name, p.partitionIndex(), p.records()});
                }
            }
        } else if (data instanceof ProduceRequestData) {
            for (ProduceRequestData.TopicProduceData t : ((ProduceRequestData) data).topicData()) {
                String name = t.name() == null || t.name().isEmpty() ? String.valueOf(t.topicId()) : t.name();
                for (ProduceRequestData.PartitionProduceData p : t.partitionData()) {
                    sets.add(new Object[] {name, p.index(), p.records()});
                }
            }
        } else {
            return null;
        }
        int batches = 0;
        int records = 0;
        List<Object> offsets = new ArrayList<>();
        for (Object[] set : sets) {
            if (!(set[2] instanceof MemoryRecords)) {
                continue;
            }
            for (MutableRecordBatch batch : ((MemoryRecords) set[2]).batches()) {
                String where = set[0] + "-" + set[1] + " batch at offset " + batch.baseOffset();
                try {
                    batch.ensureValid();
                    try (CloseableIterator<Record> it = batch.streamingIterator(BufferSupplier.NO_CACHING)) {
                        while (it.hasNext()) {
                            it.next();
                            records++;
                        }
                    }
                } catch (Throwable e) {
                    out.put("batches", batches);
                    out.put("records", records);
                    return "invalid record batch in " + where + ": " + e.getClass().getName() + ": " + e.getMessage();
                }
                batches++;
                if (show) {
                    offsets.add(Arrays.asList(set[0], set[1], batch.baseOffset(), batch.lastOffset()));
                }
            }
        }
        out.put("batches", batches);
        out.put("records", records);
        if (show) {
            out.put("batch_offsets", offsets);
        }
        return null;
    }

    static byte[] hex(String s) {
        if (s.length() % 2 != 0) {
            throw new IllegalArgumentException("odd number of hex digits");
        }
        byte[] b = new byte[s.length() / 2];
        for (int i = 0; i < b.length; i++) {
            int hi = Character.digit(s.charAt(2 * i), 16);
            int lo = Character.digit(s.charAt(2 * i + 1), 16);
            if (hi < 0 || lo < 0) {
                throw new IllegalArgumentException("bad hex digit near index " + (2 * i));
            }
            b[i] = (byte) ((hi << 4) | lo);
        }
        return b;
    }

    // ------------------------------------------------------------------ argument parsing

    static final class Args {
        private final Map<String, List<String>> options = new LinkedHashMap<>();
        private final Set<String> flags = new TreeSet<>();
        private final List<String> positionals = new ArrayList<>();
        private static final Set<String> FLAGS = Set.of("--headers", "--from-committed", "--commit", "--show", "--assign", "--until-end");

        Args(String[] argv) {
            for (int i = 0; i < argv.length; i++) {
                String a = argv[i];
                if (a.startsWith("--")) {
                    int eq = a.indexOf('=');
                    if (FLAGS.contains(a)) {
                        flags.add(a);
                    } else if (eq > 0 && !a.equals("--prop") && !a.equals("--config")) {
                        options.computeIfAbsent(a.substring(0, eq), k -> new ArrayList<>()).add(a.substring(eq + 1));
                    } else if (i + 1 < argv.length) {
                        options.computeIfAbsent(a, k -> new ArrayList<>()).add(argv[++i]);
                    } else {
                        throw new UsageError("option " + a + " needs a value");
                    }
                } else {
                    positionals.add(a);
                }
            }
        }

        String value(String name, String dflt) {
            List<String> v = options.get(name);
            return v == null ? dflt : v.get(v.size() - 1);
        }

        String required(String name) {
            String v = value(name, null);
            if (v == null) {
                throw new UsageError("missing required option " + name);
            }
            return v;
        }

        int intValue(String name, int dflt) {
            String v = value(name, null);
            try {
                return v == null ? dflt : Integer.parseInt(v);
            } catch (NumberFormatException e) {
                throw new UsageError(name + " must be an integer, got " + v);
            }
        }

        boolean flag(String name) {
            return flags.contains(name);
        }

        Map<String, String> multiKv(String name) {
            Map<String, String> out = new LinkedHashMap<>();
            for (String kv : options.getOrDefault(name, List.of())) {
                int eq = kv.indexOf('=');
                if (eq <= 0) {
                    throw new UsageError(name + " takes key=value, got " + kv);
                }
                out.put(kv.substring(0, eq), kv.substring(eq + 1));
            }
            return out;
        }

        Properties props() {
            Properties p = new Properties();
            p.putAll(multiKv("--prop"));
            return p;
        }

        List<String> positionals() {
            return positionals;
        }

        void checkNoPositionals() {
            if (!positionals.isEmpty()) {
                throw new UsageError("unexpected arguments: " + positionals);
            }
        }
    }

    // ------------------------------------------------------------------ JSON writer

    static final class Json {
        static String write(Object o) {
            StringBuilder sb = new StringBuilder();
            write(sb, o);
            return sb.toString();
        }

        @SuppressWarnings("unchecked")
        static void write(StringBuilder sb, Object o) {
            if (o == null) {
                sb.append("null");
            } else if (o instanceof String) {
                string(sb, (String) o);
            } else if (o instanceof Boolean || o instanceof Integer || o instanceof Long || o instanceof Short) {
                sb.append(o);
            } else if (o instanceof Map) {
                sb.append('{');
                boolean first = true;
                for (Map.Entry<String, Object> e : ((Map<String, Object>) o).entrySet()) {
                    if (!first) {
                        sb.append(',');
                    }
                    first = false;
                    string(sb, e.getKey());
                    sb.append(':');
                    write(sb, e.getValue());
                }
                sb.append('}');
            } else if (o instanceof Collection) {
                sb.append('[');
                boolean first = true;
                for (Object x : (Collection<Object>) o) {
                    if (!first) {
                        sb.append(',');
                    }
                    first = false;
                    write(sb, x);
                }
                sb.append(']');
            } else {
                string(sb, o.toString());
            }
        }

        static void string(StringBuilder sb, String s) {
            sb.append('"');
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                switch (c) {
                    case '"':
                        sb.append("\\\"");
                        break;
                    case '\\':
                        sb.append("\\\\");
                        break;
                    case '\n':
                        sb.append("\\n");
                        break;
                    case '\r':
                        sb.append("\\r");
                        break;
                    case '\t':
                        sb.append("\\t");
                        break;
                    default:
                        if (c < 0x20) {
                            sb.append(String.format("\\u%04x", (int) c));
                        } else {
                            sb.append(c);
                        }
                }
            }
            sb.append('"');
        }
    }
}
