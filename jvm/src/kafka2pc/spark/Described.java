package kafka2pc.spark;

import java.io.IOException;
import java.io.InputStream;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.FinalizedVersionRange;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.clients.producer.KafkaProducer;

/**
 * What the broker says of a just-written open transaction: its producer id and epoch
 * (DescribeTransactions, public Admin API) and the transaction version the client used.
 *
 * <p>Why the broker and not the producer: the Java producer keeps its id and epoch in
 * internal classes, reachable only by reflection (what Flink does). The transaction
 * version: kafka-clients 4.x runs a transaction as KIP-890 (TV2, ended with EndTxn v5)
 * when the cluster's finalized {@code transaction.version} is at least 2, as the producer
 * reads it from the ApiVersions answers; Admin {@code describeFeatures} reads the same.
 */
final class Described {
    static final String TRANSACTION_VERSION_FEATURE = "transaction.version";

    final long producerId;
    final int epoch;
    final int transactionVersion;
    private final TransactionDescription description;

    private Described(TransactionDescription description, int transactionVersion) {
        this.description = description;
        this.producerId = description.producerId();
        this.epoch = description.producerEpoch();
        this.transactionVersion = transactionVersion;
    }

    static Described of(Properties adminSettings, String tid, long timeoutMs) {
        try (Admin admin = Admin.create(adminSettings)) {
            TransactionDescription description = admin.describeTransactions(List.of(tid))
                    .description(tid).get(timeoutMs, TimeUnit.MILLISECONDS);
            if (description.state() != TransactionState.ONGOING) {
                throw new IllegalStateException("transaction " + tid + " is "
                        + description.state() + " after the flush, not Ongoing");
            }
            FeatureMetadata features = admin.describeFeatures().featureMetadata()
                    .get(timeoutMs, TimeUnit.MILLISECONDS);
            return new Described(description, transactionVersion(features));
        } catch (ExecutionException exc) {
            Throwable cause = exc.getCause();
            throw new IllegalStateException("DescribeTransactions of " + tid + " failed: "
                    + cause.getClass().getSimpleName() + ": " + cause.getMessage(), cause);
        } catch (TimeoutException exc) {
            throw new IllegalStateException("DescribeTransactions of " + tid
                    + " got no answer within " + timeoutMs + " ms", exc);
        } catch (InterruptedException exc) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted describing " + tid, exc);
        }
    }

    /** TV2 when this client implements KIP-890 (4.x) and the cluster has it finalized. */
    static int transactionVersion(FeatureMetadata features) {
        FinalizedVersionRange range = features.finalizedFeatures().get(TRANSACTION_VERSION_FEATURE);
        boolean cluster = range != null && range.maxVersionLevel() >= 2;
        return cluster && clientMajor() >= 4
                ? Committable.TRANSACTION_VERSION_KIP890 : Committable.TRANSACTION_VERSION_CLASSIC;
    }

    /**
     * The kafka-clients version on the classpath, from the properties file its jar carries
     * (the class that parses it is internal); "unknown" without one.
     */
    static String clientVersion() {
        Properties props = new Properties();
        try (InputStream in = KafkaProducer.class.getResourceAsStream("/kafka/kafka-version.properties")) {
            if (in != null) {
                props.load(in);
            }
        } catch (IOException exc) {
            return "unknown";
        }
        return props.getProperty("version", "unknown");
    }

    private static int clientMajor() {
        String version = clientVersion();
        try {
            return Integer.parseInt(version.substring(0, version.indexOf('.')));
        } catch (RuntimeException exc) {
            return 0; // unknown: assume the classic protocol
        }
    }

    /**
     * The coordinator's record must cover every partition the records landed in, with the
     * timeout asked: otherwise this is not the transaction the records were written into.
     */
    void checkCovers(Map<String, ? extends Map<Integer, ?>> partitions, long timeoutMs) {
        Set<String> known = new TreeSet<>();
        for (TopicPartition tp : description.topicPartitions()) {
            known.add(tp.toString());
        }
        Set<String> written = new TreeSet<>();
        partitions.forEach((topic, ranges) -> ranges.keySet().forEach(
                p -> written.add(new TopicPartition(topic, p).toString())));
        if (!known.containsAll(written) || description.transactionTimeoutMs() != timeoutMs) {
            throw new IllegalStateException("the coordinator's transaction (partitions " + known
                    + ", timeout " + description.transactionTimeoutMs() + " ms) is not the one "
                    + "written (partitions " + written + ", timeout " + timeoutMs + " ms)");
        }
    }
}
