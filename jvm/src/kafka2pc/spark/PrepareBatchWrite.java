package kafka2pc.spark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Properties;
import java.util.StringJoiner;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.spark.sql.RuntimeConfig;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The DataSource's driver side: one prepare, its partitions' transactions left open.
 *
 * <p>In: the option {@code spec} (JSON: topics, transactional_ids, transaction_timeout_ms,
 * header_names, selected), and the name of a session setting ({@code settings_conf},
 * under {@link #SECRET_PREFIX}) holding the producer settings as JSON. Why a session setting
 * and not an option: measured on a Spark 4.3 Connect server, a write's options show in its
 * UI (Connect tab) and its event log (the operation's statement text) whatever their keys,
 * while a session setting is in neither, and its key, matching the default
 * {@code spark.redaction.regex} ("secret"), is redacted where the SQL executions list the
 * session's settings. The settings then travel inside the tasks' factory only.
 *
 * <p>Out: {@link #commit} puts the committed messages, one JSON array of the result rows, in
 * the session setting {@code results_conf}, which the Connect client reads with
 * {@code spark.conf.get} and unsets: public API on both sides, no shared file system needed
 * between the client and the cluster. {@link #abort} fences the job's ids
 * ({@code initTransactions} aborts what a committed task left open), as the orchestrator's
 * abort would. The option {@code probe} writes nothing and reports the kafka-clients version
 * the driver loads: how the client tells a server that can run this writer.
 */
final class PrepareBatchWrite implements BatchWrite {
    static final String SECRET_PREFIX = "kafka2pc.secret.";
    static final String SPEC = "spec";
    static final String SETTINGS_CONF = "settings_conf";
    static final String RESULTS_CONF = "results_conf";
    static final String PROBE = "probe";
    static final List<String> OPTIONS = List.of(SPEC, SETTINGS_CONF, RESULTS_CONF, PROBE);

    private static final ObjectMapper JSON = new ObjectMapper();

    private final PrepareSpec spec;
    private final RuntimeConfig conf;
    private final String resultsConf;
    private final boolean probe;

    private PrepareBatchWrite(PrepareSpec spec, RuntimeConfig conf, String resultsConf, boolean probe) {
        this.spec = spec;
        this.conf = conf;
        this.resultsConf = resultsConf;
        this.probe = probe;
    }

    @Override
    public String toString() {
        return spec.toString();
    }

    /** The plan's {@code Write}: read on the driver, in the writing session. */
    static WriteBuilder builder(LogicalWriteInfo info) {
        return new WriteBuilder() {
            @Override
            public Write build() {
                PrepareBatchWrite batch = of(info);
                return new Write() {
                    @Override
                    public String description() {
                        return batch.toString();
                    }

                    @Override
                    public BatchWrite toBatch() {
                        return batch;
                    }
                };
            }
        };
    }

    private static PrepareBatchWrite of(LogicalWriteInfo info) {
        CaseInsensitiveStringMap options = info.options();
        RuntimeConfig conf = SparkSession.active().conf();
        String results = required(options, RESULTS_CONF);
        if (options.getBoolean(PROBE, false)) {
            Described.clientVersion(); // NoClassDefFoundError without kafka-clients
            PrepareSpec none = new PrepareSpec(new ArrayList<>(), new ArrayList<>(), new HashMap<>(),
                    0, new ArrayList<>(), new HashSet<>(), info.schema(), null);
            return new PrepareBatchWrite(none, conf, results, true);
        }
        String settingsConf = required(options, SETTINGS_CONF);
        if (!settingsConf.startsWith(SECRET_PREFIX)) {
            throw new IllegalArgumentException("kafka2pc: " + SETTINGS_CONF + " must name a "
                    + "session setting under " + SECRET_PREFIX + " (redacted by Spark)");
        }
        String settings = conf.get(settingsConf, "");
        if (settings.isEmpty()) {
            throw new IllegalArgumentException("kafka2pc: the session setting " + settingsConf
                    + " holds no producer settings");
        }
        String hook = conf.get(WriterHook.PROPERTY, "");
        try {
            Spec parsed = JSON.readValue(required(options, SPEC), Spec.class);
            HashMap<String, String> producer =
                    JSON.readValue(settings, new TypeReference<HashMap<String, String>>() { });
            PrepareSpec spec = new PrepareSpec(
                    new ArrayList<>(parsed.topics),
                    new ArrayList<>(parsed.transactional_ids),
                    producer,
                    parsed.transaction_timeout_ms,
                    new ArrayList<>(parsed.header_names),
                    parsed.selected == null ? null : new HashSet<>(parsed.selected),
                    info.schema(),
                    hook.isEmpty() ? null : hook);
            return new PrepareBatchWrite(spec, conf, results, false);
        } catch (JsonProcessingException exc) { // never the settings' text: it holds secrets
            throw new IllegalArgumentException("kafka2pc: the option " + SPEC + " or the "
                    + "producer settings are not the JSON expected (" + exc.getClass().getSimpleName()
                    + ")", null);
        }
    }

    private static String required(CaseInsensitiveStringMap options, String key) {
        String value = options.get(key);
        if (value == null || value.isEmpty()) {
            throw new IllegalArgumentException("kafka2pc: the option " + key + " is required");
        }
        return value;
    }

    /** The option {@code spec}, as the Python client writes it. */
    static final class Spec {
        public List<String> topics = List.of();
        public List<String> transactional_ids = List.of();
        public long transaction_timeout_ms;
        public List<String> header_names = List.of();
        public List<Integer> selected;
    }

    @Override
    public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
        if (!probe && info.numPartitions() != spec.ids.size()) {
            throw new IllegalStateException("kafka2pc: " + info.numPartitions()
                    + " partitions to write but " + spec.ids.size() + " transactional ids");
        }
        return new TransactionDataWriter.Factory(spec);
    }

    @Override
    public boolean useCommitCoordinator() {
        return true; // one attempt per partition reports: the one the coordinator allowed
    }

    @Override
    public void commit(WriterCommitMessage[] messages) {
        if (probe) {
            conf.set(resultsConf, "{\"kafka_clients\": \"" + Described.clientVersion() + "\"}");
            return;
        }
        StringJoiner rows = new StringJoiner(", ", "[", "]");
        for (WriterCommitMessage message : messages) {
            String json = PreparedPartition.json(message);
            if (json != null) {
                rows.add(json);
            }
        }
        conf.set(resultsConf, rows.toString());
    }

    /**
     * Fences every id this job writes, not only those the messages name: measured on a
     * Connect server, a task that committed as the job failed (its commit authorised
     * before the stage ended) is missing from {@code messages}, its transaction open.
     */
    @Override
    public void abort(WriterCommitMessage[] messages) {
        for (int partition = 0; partition < spec.ids.size(); partition++) {
            if (spec.writes(partition)) {
                fence(spec.ids.get(partition));
            }
        }
    }

    /** {@code initTransactions} aborts the id's open transaction (and fences its producer). */
    private void fence(String tid) {
        Properties props = spec.producerProperties(tid);
        try (Producer<byte[], byte[]> producer =
                new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer())) {
            producer.initTransactions();
            System.err.println("kafka2pc: " + tid + ": the write job failed, its transaction aborted");
        } catch (RuntimeException exc) { // the orchestrator's abort fences it later
            System.err.println("kafka2pc: " + tid + ": the write job failed, its transaction "
                    + "left to be fenced (" + exc.getClass().getName() + ")");
        }
    }
}
