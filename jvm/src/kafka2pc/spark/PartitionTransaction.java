package kafka2pc.spark;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.spark.TaskContext;
import org.apache.spark.TaskKilledException;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One Spark partition's Kafka transaction, written by Kafka's own Java producer: the one
 * implementation behind both entries, the mapPartitions job ({@link PartitionWriter}) and
 * the DataSource's {@link TransactionDataWriter}.
 *
 * <p>The producer opens at the first row ({@link #send}): an empty partition opens nothing.
 * {@code initTransactions()} fences whatever an earlier attempt of the same id left open;
 * every row is sent; {@link #prepare()} flushes (any failed send fails the task), takes the
 * producer id and epoch from the broker (DescribeTransactions, state Ongoing), never from
 * the producer's internals, and leaves the transaction open with {@code close(Duration.ZERO)},
 * which skips the abort a graceful close makes. {@link #failed} aborts. A {@link WriterHook},
 * when one is named, is called after each record sent.
 *
 * <p>A task Spark killed (its job failed or was cancelled) never opens late: it asks its
 * {@link TaskContext} before it creates its producer and again after InitProducerId, before
 * its first record (nothing is open on the broker until then), and ends as killed. Why:
 * the job's abort fences the ids as soon as the job fails, while the kill reaches the tasks
 * asynchronously; a task that opened after that fence held its transaction open until the
 * broker's timeout. A killed task's abort clears the thread's interrupt first (Spark Connect
 * kills with an interrupt, which failed the producer's wait for the abort and left the
 * transaction open), and sets it again once the producer is closed.
 */
final class PartitionTransaction {
    static final String KEY = "__kafka2pc_key";
    static final String VALUE = "__kafka2pc_value";
    static final String TIMESTAMP = "__kafka2pc_timestamp";
    static final String HEADER_PREFIX = "__kafka2pc_header_";
    /** Each row's topic, when the export routes rows among several. */
    static final String TOPIC = "__kafka2pc_topic";

    private enum State { IDLE, OPEN, PREPARED, ENDED }

    private final PrepareSpec spec;
    private final int partition;
    private final int attempt;
    private final String tid;
    private final long start = System.currentTimeMillis();
    private final WriterHook hook;
    private State state = State.IDLE;
    private Producer<byte[], byte[]> producer;
    private Deliveries deliveries;
    private Columns columns;
    private long sent;

    /** @param hookText the {@link WriterHook} ({@code class[:argument]}); null or empty: none */
    PartitionTransaction(PrepareSpec spec, int partition, int attempt, String hookText) {
        this.spec = spec;
        this.partition = partition;
        this.attempt = attempt;
        this.tid = spec.ids.get(partition);
        this.hook = hook(hookText);
    }

    /** Sends one row (read whole before the next: Spark may reuse one row object). */
    void send(InternalRow row) {
        if (state == State.IDLE) {
            open();
        }
        deliveries.raiseFirstError();
        producer.send(columns.record(row), deliveries);
        sent++;
        if (hook != null) {
            hook.afterSend(partition, attempt, sent, producer);
        }
    }

    /** Flushes and describes; the transaction stays open. What the driver gets. */
    PreparedPartition prepare() {
        if (state == State.IDLE) {
            state = State.ENDED;
            return new PreparedPartition(partition, attempt, 0,
                    Committable.empty(tid, start, spec.transactionTimeoutMs));
        }
        producer.flush();
        deliveries.raiseFirstError();
        if (deliveries.count() != sent) {
            throw new IllegalStateException(sent + " records sent but " + deliveries.count()
                    + " delivered");
        }
        Described described = Described.of(spec.adminProperties(), tid, spec.describeTimeoutMs());
        described.checkCovers(deliveries.partitions(), spec.transactionTimeoutMs);
        String committable = Committable.json(tid, described.producerId, described.epoch,
                described.transactionVersion, deliveries.partitions(), start,
                spec.transactionTimeoutMs);
        // Not close(): a graceful close aborts the open transaction. ZERO leaves it open.
        producer.close(Duration.ZERO);
        state = State.PREPARED;
        return new PreparedPartition(partition, attempt, sent, committable);
    }

    /**
     * Ends a failed write: aborts the open transaction (a producer closed already, as a
     * hook playing a dead executor leaves it, refuses: the transaction is left to be
     * fenced); the task's error to throw. Thrown as a plain JDK exception: the driver
     * deserialises a task's failure with a class loader that may lack kafka-clients (added
     * with ADD JAR), and would then report only "UnknownReason".
     */
    RuntimeException failed(Throwable failure) {
        if (failure instanceof CannotCreate) { // nothing opened: nothing to abort
            return new IllegalStateException(failure.getMessage());
        }
        abort(failure);
        if (failure instanceof TaskKilledException killed) {
            return killed; // Spark's own: the task ends as killed, not as failed
        }
        return new IllegalStateException("kafka2pc: partition " + partition + " (" + tid
                + "): " + causes(failure));
    }

    /** Aborts the transaction if it is open and not yet prepared (a no-op otherwise). */
    void abort(Throwable cause) {
        if (state != State.OPEN) {
            state = state == State.PREPARED ? State.PREPARED : State.ENDED;
            return;
        }
        state = State.ENDED;
        boolean aborted = false;
        boolean interrupted = Thread.interrupted(); // a kill's interrupt fails every wait below
        if (!(cause instanceof ProducerFencedException || cause instanceof AuthorizationException)) {
            try {
                producer.abortTransaction();
                aborted = true;
            } catch (RuntimeException ignored) {
                // not initialised, fenced, or no answer within max.block.ms: the
                // coordinator aborts it at its timeout, or the orchestrator fences the id
            }
        }
        try {
            producer.close(aborted ? Duration.ofSeconds(5) : Duration.ZERO);
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt(); // Spark's to see: the task was killed
            }
        }
        System.err.println("kafka2pc: " + tid + ": writing failed ("
                + (cause == null ? "task aborted" : cause.getClass().getName())
                + "), transaction " + (aborted ? "aborted" : "left to be fenced"));
    }

    private void open() {
        if (hook != null) {
            hook.beforeOpen(partition, attempt);
        }
        stopIfKilled(null);
        deliveries = new Deliveries();
        try {
            producer = new KafkaProducer<>(spec.producerProperties(tid), new ByteArraySerializer(),
                    new ByteArraySerializer());
        } catch (RuntimeException failure) { // settings the client refuses, unreadable TLS files
            state = State.ENDED;
            throw new CannotCreate("kafka2pc: partition " + partition + " (" + tid
                    + "): cannot create its producer: " + causes(failure));
        }
        state = State.OPEN;
        try {
            producer.initTransactions(); // fences (aborts) a failed earlier attempt of this id
        } catch (InterruptException interrupted) { // Spark's kill on Connect: nothing begun
            stopIfKilled(producer);
            throw interrupted;
        }
        stopIfKilled(producer); // killed during InitProducerId: still nothing open
        producer.beginTransaction();
        columns = new Columns(spec.schema, spec.headerNames, spec.topics);
    }

    /**
     * Ends a task Spark killed before it opens its transaction: {@code producer} (none yet,
     * or initialised, with no transaction begun) closed, then Spark's
     * {@link TaskKilledException}. Outside Spark (no task context) it never stops.
     */
    private void stopIfKilled(Producer<byte[], byte[]> initialised) {
        TaskContext context = TaskContext.get();
        if (context == null || !context.isInterrupted()) {
            return;
        }
        state = State.ENDED;
        if (initialised != null) {
            boolean interrupted = Thread.interrupted();
            try {
                initialised.close(Duration.ZERO);
            } finally {
                if (interrupted) {
                    Thread.currentThread().interrupt();
                }
            }
        }
        String reason = context.getKillReason().getOrElse(() -> "killed");
        System.err.println("kafka2pc: " + tid + ": task killed (" + reason + ") before it "
                + "opened its transaction: nothing opened");
        throw new TaskKilledException(reason);
    }

    /**
     * The {@link WriterHook} {@code text} names, loaded by the task's class loader (which
     * sees the jars the session added); null when none is named.
     */
    static WriterHook hook(String text) {
        if (text == null || text.isEmpty()) {
            return null;
        }
        int colon = text.indexOf(':');
        String name = colon < 0 ? text : text.substring(0, colon);
        String argument = colon < 0 ? "" : text.substring(colon + 1);
        ClassLoader loader = Thread.currentThread().getContextClassLoader();
        try {
            Class<?> named = Class.forName(name, true,
                    loader != null ? loader : PartitionTransaction.class.getClassLoader());
            return named.asSubclass(WriterHook.class).getConstructor(String.class)
                    .newInstance(argument);
        } catch (ReflectiveOperationException | ClassCastException | LinkageError exc) {
            throw new IllegalArgumentException("kafka2pc: " + WriterHook.PROPERTY + " names "
                    + name + ", which is no loadable " + WriterHook.class.getName()
                    + " with a (String) constructor: " + causes(exc));
        }
    }

    /** The failure and its causes as one line. */
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

    /** No producer, so nothing to abort: the message says so as it is. */
    static final class CannotCreate extends IllegalStateException {
        private static final long serialVersionUID = 1L;

        CannotCreate(String message) {
            super(message);
        }
    }

    /** Where each column is, found once per partition from the driver's schema. */
    private static final class Columns {
        private final int key;
        private final int value;
        /** A string value (the row's JSON): its UTF-8 bytes, without a cast to binary first. */
        private final boolean textValue;
        private final int timestamp;
        private final int topicColumn;
        private final String topic;
        /** The export's topics by their bytes: a row's topic is found without decoding it. */
        private final Map<UTF8String, String> topicsByBytes = new HashMap<>();
        private final int[] headers;
        private final String[] names;

        Columns(StructType schema, List<String> headerNames, List<String> exportTopics) {
            topicColumn = List.of(schema.fieldNames()).indexOf(TOPIC);
            topic = exportTopics.get(0);
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
                            + ", not among the export's " + topicsByBytes.values());
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
