package kafka2pc.spark;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Drives one {@link PartitionTransaction} outside Spark, as a task would, for the tests
 * (tests/integration/test_partition_transaction.py) that then look at the broker: a small
 * JVM, the product jar, this test jar, kafka-clients and PySpark's jars on its class path.
 *
 * <p>In (stdin): a JSON array of scenarios, run one after another in this JVM (a race is
 * tried many times without a JVM's start each). A scenario: {@code topics}, {@code ids},
 * {@code settings} (the Java producer's), {@code transaction_timeout_ms},
 * {@code header_names}, {@code partition}, {@code attempt}, {@code hook}
 * ({@link WriterHook} text or null), {@code rows} (each
 * {@code key}, {@code value}, {@code timestamp}, {@code headers}, {@code topic}: strings,
 * sent as UTF-8; null or absent: none), and {@code end}: {@code prepare} (what
 * {@link PartitionWriter} does) or {@code abort} (the rows sent, then the DataSource task's
 * abort). Out (stdout): a JSON array, per scenario an object with {@code prepared} (the
 * driver's result row), or {@code failed} (the message the task would throw), or
 * {@code aborted}. The product's own log lines (what it aborted) go to stderr, as in an
 * executor.
 */
public final class TransactionHarness {
    private static final ObjectMapper JSON = new ObjectMapper();

    private TransactionHarness() {
    }

    /** The scenario, as the tests write it. */
    public static final class Scenario {
        public List<String> topics = List.of();
        public List<String> ids = List.of();
        public Map<String, String> settings = Map.of();
        public long transaction_timeout_ms = 60_000;
        public List<String> header_names = List.of();
        public int partition;
        public int attempt;
        public String hook;
        public List<Map<String, Object>> rows = List.of();
        public String end = "prepare";
    }

    public static void main(String[] args) throws IOException {
        List<Map<String, Object>> answers = new ArrayList<>();
        for (JsonNode one : JSON.readTree(System.in)) { // one after another in this JVM
            answers.add(run(JSON.treeToValue(one, Scenario.class)));
        }
        System.out.println(JSON.writeValueAsString(answers));
        System.out.flush();
    }

    static Map<String, Object> run(Scenario s) throws IOException {
        StructType schema = schema(s);
        PrepareSpec spec = new PrepareSpec(new ArrayList<>(s.topics), new ArrayList<>(s.ids),
                new HashMap<>(s.settings), s.transaction_timeout_ms,
                new ArrayList<>(s.header_names), null, schema, null);
        Map<String, Object> out = new HashMap<>();
        PartitionTransaction transaction;
        try {
            transaction = new PartitionTransaction(spec, s.partition, s.attempt, s.hook);
        } catch (IllegalArgumentException unloadable) { // the task fails, nothing opened
            out.put("failed", unloadable.getMessage());
            return out;
        }
        try {
            for (Map<String, Object> row : s.rows) {
                transaction.send(row(s, row));
            }
            if (s.end.equals("abort")) {
                transaction.abort(null);
                out.put("aborted", true);
                return out;
            }
            out.put("prepared", JSON.readTree(transaction.prepare().toJson()));
        } catch (RuntimeException | Error failure) {
            out.put("failed", transaction.failed(failure).getMessage());
        }
        return out;
    }

    /** The encoded rows' columns: key, value, timestamp, each header, the topic if routed. */
    private static StructType schema(Scenario s) {
        StructType schema = new StructType()
                .add(PartitionTransaction.KEY, DataTypes.BinaryType)
                .add(PartitionTransaction.VALUE, DataTypes.BinaryType)
                .add(PartitionTransaction.TIMESTAMP, DataTypes.LongType);
        for (String name : s.header_names) {
            schema = schema.add(PartitionTransaction.HEADER_PREFIX + name, DataTypes.BinaryType);
        }
        return s.topics.size() > 1 ? schema.add(PartitionTransaction.TOPIC, DataTypes.StringType)
                : schema;
    }

    @SuppressWarnings("unchecked")
    private static InternalRow row(Scenario s, Map<String, Object> row) {
        List<Object> values = new ArrayList<>();
        values.add(bytes(row.get("key")));
        values.add(bytes(row.get("value")));
        Object timestamp = row.get("timestamp");
        values.add(timestamp == null ? null : ((Number) timestamp).longValue());
        Map<String, Object> headers = (Map<String, Object>) row.getOrDefault("headers", Map.of());
        for (String name : s.header_names) {
            values.add(bytes(headers.get(name)));
        }
        if (s.topics.size() > 1) {
            Object topic = row.get("topic");
            values.add(topic == null ? null : UTF8String.fromString((String) topic));
        }
        return new GenericInternalRow(values.toArray());
    }

    private static byte[] bytes(Object text) {
        return text == null ? null : ((String) text).getBytes(StandardCharsets.UTF_8);
    }
}
