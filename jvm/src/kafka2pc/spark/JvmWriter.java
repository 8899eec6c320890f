package kafka2pc.spark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;

/**
 * The driver's entry into the JVM writer, called from PySpark through py4j on the encoded
 * DataFrame ({@code df._jdf}): each Spark partition becomes one open Kafka transaction,
 * written by Kafka's own Java producer inside the executor ({@link PartitionWriter}).
 *
 * <p>Why: the Python writer hands every record from the JVM to a Python worker and from
 * there to librdkafka; here the rows never leave the executor's JVM, as with Spark's own
 * Kafka sink. As that sink does, the tasks read Spark's internal rows (the plan's
 * {@code toRdd}), not {@code Row} objects: a {@code Dataset.mapPartitions} would run a
 * deserializer per record, 7-10% of the write job's task time when profiled. The result
 * rows are the Python writer's (partition, attempt, input_rows, committable JSON), so the
 * driver's checks, the manifest and the ledger are shared. On Spark Connect, where no py4j
 * reaches the session's JVM, the same transactions are written through the DataSource
 * {@code kafka2pc} ({@link Kafka2pcSource}).
 */
public final class JvmWriter {
    private JvmWriter() {
    }

    /**
     * The version of kafka-clients this JVM loads; throws {@link NoClassDefFoundError} when
     * none is on the classpath (the driver then adds it).
     */
    public static String kafkaClientsVersion() {
        return Described.clientVersion();
    }

    /**
     * A lazy Dataset of one result row per written partition.
     *
     * @param encoded the rows as binary key/value/header columns (and an optional long
     *     {@code __kafka2pc_timestamp}), one Spark partition per transactional id
     * @param topics the export's topics: with one, every record goes to it; with several,
     *     each row names its own in {@code __kafka2pc_topic}, and each transaction spans them
     * @param transactionalIds one id per Spark partition
     * @param producerSettings Java client settings (already translated and checked)
     * @param transactionTimeoutMs the transaction timeout asked of the coordinator
     * @param headerNames header names; column {@code __kafka2pc_header_<name>} holds each
     * @param selected the partitions to write (a loss repair); null: all of them
     */
    public static Dataset<Row> prepare(
            Dataset<Row> encoded,
            List<String> topics,
            List<String> transactionalIds,
            Map<String, String> producerSettings,
            long transactionTimeoutMs,
            List<String> headerNames,
            List<Integer> selected) {
        Set<Integer> only = selected == null ? null : new HashSet<>(selected);
        PartitionWriter writer = new PartitionWriter(new PrepareSpec(
                new ArrayList<>(topics),
                new ArrayList<>(transactionalIds),
                new HashMap<>(producerSettings),
                transactionTimeoutMs,
                new ArrayList<>(headerNames),
                only,
                encoded.schema(),
                null));
        JavaRDD<Row> results = encoded.queryExecution().toRdd().toJavaRDD()
                .mapPartitions(writer);
        return encoded.sparkSession().createDataFrame(results, PreparedPartition.RESULT_SCHEMA);
    }
}
