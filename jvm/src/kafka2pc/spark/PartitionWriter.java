package kafka2pc.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Executor side: one Spark partition becomes one open Kafka transaction, written by Kafka's
 * own Java producer, and one result row for the driver.
 *
 * <p>{@code initTransactions()} fences whatever an earlier attempt of the same id left open;
 * every row is sent, the producer flushed, and any failed send fails the task (after an
 * abort). The open transaction is left open with {@code close(Duration.ZERO)}, which skips
 * the abort a graceful close makes; its producer id and epoch come from the broker
 * (DescribeTransactions, state Ongoing), never from the producer's internals.
 *
 * <p>Holds the producer settings, credentials included, in fields only: Spark 4.3's plan
 * (its UI's SQL tab, {@code explain()}) names the lambda it wraps this function in, and
 * {@link #toString()} names only the topic and the number of ids, should anything print it.
 */
final class PartitionWriter implements FlatMapFunction<Iterator<InternalRow>, Row> {
    private static final long serialVersionUID = 1L;

    static final String KEY = "__kafka2pc_key";
    static final String VALUE = "__kafka2pc_value";
    static final String TIMESTAMP = "__kafka2pc_timestamp";
    static final String HEADER_PREFIX = "__kafka2pc_header_";
    /** Each row's topic, when the export routes rows among several. */
    static final String TOPIC = "__kafka2pc_topic";
    /** Client certificate and key files, read on the executor into a PEM key store. */
    static final String CERTIFICATE_FILE = "kafka2pc.ssl.certificate.location";
    static final String KEY_FILE = "kafka2pc.ssl.key.location";
    static final String DESCRIBE_TIMEOUT = "kafka2pc.describe.timeout.ms";

    /** The Python writer's {@code RESULT_SCHEMA}. */
    static final StructType RESULT_SCHEMA = new StructType()
            .add("partition", DataTypes.IntegerType, false)
            .add("attempt", DataTypes.IntegerType, false)
            .add("input_rows", DataTypes.LongType, false)
            .add("committable", DataTypes.StringType, false);

    private final ArrayList<String> topics;
    private final ArrayList<String> ids;
    private final HashMap<String, String> settings;
    private final long transactionTimeoutMs;
    private final ArrayList<String> headerNames;
    private final Set<Integer> selected;
    /** The encoded rows' schema, from the driver: internal rows carry none. */
    private final StructType schema;

    PartitionWriter(
            ArrayList<String> topics,
            ArrayList<String> ids,
            HashMap<String, String> settings,
            long transactionTimeoutMs,
            ArrayList<String> headerNames,
            Set<Integer> selected,
            StructType schema) {
        this.topics = topics;
        this.ids = ids;
        this.settings = settings;
        this.transactionTimeoutMs = transactionTimeoutMs;
        this.headerNames = headerNames;
        this.selected = selected;
        this.schema = schema;
    }

    @Override
    public String toString() {
        return "kafka2pc.JvmWriter(topics=" + topics + ", transactions=" + ids.size() + ")";
    }

    @Override
    public Iterator<Row> call(Iterator<InternalRow> rows) {
        TaskContext context = TaskContext.get();
        int partition = context.partitionId();
        int attempt = context.attemptNumber();
        if (selected != null && !selected.contains(partition)) {
            return Collections.emptyIterator(); // a repair: not even an InitProducerId
        }
        String tid = ids.get(partition);
        long start = System.currentTimeMillis();
        if (!rows.hasNext()) {
            return result(partition, attempt, 0, Committable.empty(tid, start, transactionTimeoutMs));
        }
        Fault fault = Fault.parse(context.getLocalProperty(Fault.PROPERTY));
        Deliveries deliveries = new Deliveries();
        Producer<byte[], byte[]> producer;
        try {
            producer = new KafkaProducer<>(
                    producerProperties(tid), new ByteArraySerializer(), new ByteArraySerializer());
        } catch (RuntimeException failure) { // settings the client refuses, unreadable TLS files
            throw new IllegalStateException("kafka2pc: partition " + partition + " (" + tid
                    + "): cannot create its producer: " + causes(failure));
        }
        long sent = 0;
        try {
            producer.initTransactions(); // fences (aborts) a failed earlier attempt of this id
            producer.beginTransaction();
            Columns columns = new Columns(schema, headerNames, topics);
            // Spark may reuse one row object per task: each is read whole before the next.
            InternalRow row = rows.next();
            while (true) {
                deliveries.raiseFirstError();
                producer.send(columns.record(row), deliveries);
                sent++;
                if (fault != null) {
                    fault.check(partition, attempt, sent, producer);
                }
                if (!rows.hasNext()) {
                    break;
                }
                row = rows.next();
            }
            producer.flush();
            deliveries.raiseFirstError();
            if (deliveries.count() != sent) {
                throw new IllegalStateException(sent + " records sent but " + deliveries.count()
                        + " delivered");
            }
            Described described = Described.of(adminProperties(), tid, describeTimeoutMs());
            described.checkCovers(deliveries.partitions(), transactionTimeoutMs);
            String committable = Committable.json(tid, described.producerId, described.epoch,
                    described.transactionVersion, deliveries.partitions(), start,
                    transactionTimeoutMs);
            // Not close(): a graceful close aborts the open transaction. ZERO leaves it open.
            producer.close(Duration.ZERO);
            return result(partition, attempt, sent, committable);
        } catch (Fault.Died died) {
            producer.close(Duration.ZERO); // as a dead executor: nothing ends the transaction
            throw new IllegalStateException(died.getMessage());
        } catch (RuntimeException | Error failure) {
            abort(producer, tid, failure);
            throw new IllegalStateException("kafka2pc: partition " + partition + " (" + tid
                    + "): " + causes(failure));
        }
    }

    /**
     * The failure and its causes as one line. Thrown as a plain JDK exception: the driver
     * deserialises a task's failure with a class loader that may lack kafka-clients (added
     * with ADD JAR), and would then report only "UnknownReason".
     */
    static String causes(Throwable failure) {
        StringBuilder text = new StringBuilder();
        for (Throwable t = failure; t != null && text.length() < 2000; t = t.getCause()) {
            text.append(text.length() == 0 ? "" : "; caused by ")
                    .append(t.getClass().getName()).append(": ").append(t.getMessage());
            if (t.getCause() == t) {
                break;
            }
        }
        return text.toString();
    }

    private long describeTimeoutMs() {
        return Long.parseLong(settings.getOrDefault(DESCRIBE_TIMEOUT, "30000"));
    }

    private static Iterator<Row> result(int partition, int attempt, long rows, String committable) {
        return Collections.singletonList(RowFactory.create(partition, attempt, rows, committable))
                .iterator();
    }

    /** Abort a failed transaction (a fenced or unauthorized producer cannot: close only). */
    private static void abort(Producer<byte[], byte[]> producer, String tid, Throwable cause) {
        boolean aborted = false;
        if (!(cause instanceof ProducerFencedException || cause instanceof AuthorizationException)) {
            try {
                producer.abortTransaction();
                aborted = true;
            } catch (RuntimeException ignored) {
                // not initialised, fenced, or no answer within max.block.ms: the
                // coordinator aborts it at its timeout, or the orchestrator fences the id
            }
        }
        producer.close(aborted ? Duration.ofSeconds(5) : Duration.ZERO);
        System.err.println("kafka2pc: " + tid + ": writing failed (" + cause.getClass().getName()
                + "), transaction " + (aborted ? "aborted" : "left to be fenced"));
    }

    private Properties producerProperties(String tid) {
        Properties props = new Properties();
        for (Map.Entry<String, String> e : settings.entrySet()) {
            if (!e.getKey().startsWith("kafka2pc.")) {
                props.put(e.getKey(), e.getValue());
            }
        }
        keyStore(props);
        props.put("transactional.id", tid);
        props.put("transaction.timeout.ms", Long.toString(transactionTimeoutMs));
        props.put("enable.idempotence", "true");
        props.put("acks", "all");
        return props;
    }

    /** The settings the Admin client needs to reach the cluster: connection and security. */
    private Properties adminProperties() {
        Properties props = new Properties();
        for (Map.Entry<String, String> e : settings.entrySet()) {
            String key = e.getKey();
            if (key.startsWith("ssl.") || key.startsWith("sasl.") || key.equals("bootstrap.servers")
                    || key.equals("security.protocol") || key.equals("client.id")
                    || key.equals("request.timeout.ms")) {
                props.put(key, e.getValue());
            }
        }
        keyStore(props);
        return props;
    }

    /** librdkafka's certificate and key files, as the Java client's PEM key store. */
    private void keyStore(Properties props) {
        String certificate = settings.get(CERTIFICATE_FILE);
        if (certificate == null) {
            return;
        }
        props.put("ssl.keystore.type", "PEM");
        props.put("ssl.keystore.certificate.chain", read(certificate));
        if (!settings.containsKey("ssl.keystore.key")) { // a key the driver decrypted
            props.put("ssl.keystore.key", read(settings.getOrDefault(KEY_FILE, certificate)));
        }
    }

    private static String read(String path) {
        try {
            return Files.readString(Path.of(path), StandardCharsets.US_ASCII);
        } catch (IOException exc) {
            throw new UncheckedIOException("cannot read " + path, exc);
        }
    }

    /** Where each column is, found once per partition from the first row's schema. */
    private static final class Columns {
        private final int key;
        private final int value;
        /** A string value (the row's JSON): its UTF-8 bytes, without a cast to binary first. */
        private final boolean textValue;
        private final int timestamp;
        private final int topicColumn;
        private final String topic;
        private final Set<String> topics;
        /** The export's topics by their bytes: a row's topic is found without decoding it. */
        private final Map<UTF8String, String> topicsByBytes = new HashMap<>();
        private final int[] headers;
        private final String[] names;

        Columns(StructType schema, List<String> headerNames, List<String> exportTopics) {
            topicColumn = List.of(schema.fieldNames()).indexOf(TOPIC);
            topic = exportTopics.get(0);
            topics = Set.copyOf(exportTopics);
            for (String name : exportTopics) {
                topicsByBytes.put(UTF8String.fromString(name), name);
            }
            if (topicColumn < 0 && exportTopics.size() > 1) {
                throw new IllegalStateException("several topics " + exportTopics + " but no "
                        + TOPIC + " column to route the rows");
            }
            key = schema.fieldIndex(KEY);
            value = schema.fieldIndex(VALUE);
            textValue = schema.fields()[value].dataType() instanceof StringType;
            timestamp = List.of(schema.fieldNames()).indexOf(TIMESTAMP);
            headers = new int[headerNames.size()];
            names = headerNames.toArray(new String[0]);
            for (int i = 0; i < headers.length; i++) {
                headers[i] = schema.fieldIndex(HEADER_PREFIX + names[i]);
            }
        }

        ProducerRecord<byte[], byte[]> record(InternalRow row) {
            String topic = this.topic;
            if (topicColumn >= 0) {
                UTF8String named = row.isNullAt(topicColumn) ? null : row.getUTF8String(topicColumn);
                topic = named == null ? null : topicsByBytes.get(named);
                if (topic == null) { // the driver's map stage refuses these first
                    throw new IllegalStateException("a row goes to topic " + named
                            + ", not among the export's " + topics);
                }
            }
            // getBinary copies: the producer keeps the arrays until the batch is sent.
            byte[] k = row.isNullAt(key) ? null : row.getBinary(key);
            byte[] v = row.isNullAt(value) ? null // a tombstone
                    : textValue ? row.getUTF8String(value).getBytes() : row.getBinary(value);
            Long ts = timestamp < 0 || row.isNullAt(timestamp) ? null : row.getLong(timestamp);
            if (headers.length == 0) {
                return new ProducerRecord<>(topic, null, ts, k, v);
            }
            List<Header> present = new ArrayList<>(headers.length);
            for (int i = 0; i < headers.length; i++) {
                if (!row.isNullAt(headers[i])) {
                    present.add(new BytesHeader(names[i], row.getBinary(headers[i])));
                }
            }
            return new ProducerRecord<>(topic, null, ts, k, v, present);
        }
    }

    /** A record header (the client's own implementation is in an internals package). */
    private record BytesHeader(String key, byte[] value) implements Header {
    }
}
